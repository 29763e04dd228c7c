"""The e2b provider at the SDK's boundary: a double shaped like the `e2b` module (its real
exception classes and SandboxQuery; AsyncSandbox and AsyncTemplate recording what the adapter
asks for) is handed to the provider, as `E2BProvider.connect` hands it the real module."""

from __future__ import annotations

import asyncio
import io
import shlex
import subprocess
import sys
import tarfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.resources import RolloutTrialSpec
from rollout.bridge.providers.base import (
    LABEL_BRIDGE,
    ProviderError,
    SandboxRequest,
    sandbox_labels,
)
from rollout.bridge.providers.e2b import (
    LIFETIME_MARGIN_SEC,
    MAX_LIFETIME_SEC,
    E2BProvider,
    lifetime_sec,
    sandbox_size,
)
from rollout.bridge.providers.e2b_sandbox import (
    KILL_ALL_SCRIPT,
    PACK_SCRIPT,
    UNPACK_SCRIPT,
    E2BSandbox,
)
from rollout.bridge.providers.scripts import KILL_SCRIPT, RUN_WRAPPER
from rollout_runner.environment import EnvironmentFailure, FileTransferError

e2b = pytest.importorskip("e2b", reason="the E2B SDK (the e2b extra) is not installed")

API = {"api_key": "e2b_test_key"}
SECRET = "sk-never-on-a-line"


def spec(**fields: object) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "job",
            "agent": {"name": "oracle", "env": [{"name": "API_KEY", "value": SECRET}]},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 1,
            "image": "python:3.12-slim",
            "resources": {"cpus": "1500m", "memory": "1G", "storage": "10Gi"},
            "timeouts": {
                "agentInstallSec": 100,
                "agentSec": 600,
                "verifierSec": 200,
                "buildSec": 5,
            },
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def request(trial_spec: RolloutTrialSpec, task_dir: Path | None = None) -> SandboxRequest:
    labels = sandbox_labels("ns", "trial-1", trial_spec.job_name, "bridge-a")
    return SandboxRequest("ns", "trial-1", trial_spec, labels, task_dir)


# --- the SDK double ---------------------------------------------------------------------------


class Builder:
    """What `AsyncTemplate()` returns: records the definition's steps."""

    def __init__(self, calls: list[tuple[Any, ...]], **options: Any) -> None:
        self.steps: list[tuple[Any, ...]] = [("new", options)]
        calls.append(("template", self))

    def from_image(self, image: str) -> Builder:
        self.steps.append(("from_image", image))
        return self

    def from_dockerfile(self, path: str) -> Builder:
        text = Path(path).read_text()
        if text.count("FROM") > 1:
            raise e2b.DockerfileSyntaxError("Multi-stage Dockerfiles are not supported")
        self.steps.append(("from_dockerfile", path))
        return self

    def set_user(self, user: str) -> Builder:
        self.steps.append(("set_user", user))
        return self

    def set_workdir(self, workdir: str) -> Builder:
        self.steps.append(("set_workdir", workdir))
        return self


class Handle:
    """A background command: ends when `finish` is called (or at once with `exit_code`)."""

    def __init__(self, exit_code: int | None) -> None:
        self.ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if exit_code is not None:
            self.finish(exit_code)

    def finish(self, exit_code: int) -> None:
        if not self.ended.done():
            self.ended.set_result(exit_code)

    async def wait(self) -> Any:
        code = await self.ended
        if code != 0:
            raise e2b.CommandExitException(stdout="", stderr="", exit_code=code, error=None)
        return e2b.CommandResult(stdout="", stderr="", exit_code=0, error=None)


class Sandbox:
    """An `AsyncSandbox`: `commands.run` and `files` record their calls; a background run's
    outcome comes from `outcomes` (its command -> exit code, stdout; None: it never ends)."""

    def __init__(self, sdk: Sdk, sandbox_id: str) -> None:
        self.sdk = sdk
        self.sandbox_id = sandbox_id
        self.files_held: dict[str, bytes] = {}
        self.runs: list[dict[str, Any]] = []
        self.handles: dict[str, Handle] = {}
        self.killed = 0
        self.commands = types.SimpleNamespace(run=self._run)
        self.files = types.SimpleNamespace(read=self._read, write=self._write, remove=self._remove)

    async def _run(self, cmd: str, background: bool = False, **options: Any) -> Any:
        words = shlex.split(cmd)
        script, args = words[3], words[5:]
        self.runs.append(
            {"cmd": cmd, "script": script, "args": args, "background": background, **options}
        )
        if options.get("user") == "nobody-here":
            raise e2b.InvalidArgumentException("user nobody-here not found")
        if background:
            run_dir, command = args[0], args[2]
            exit_code, stdout = self.sdk.outcomes.get(command, (0, b""))
            if exit_code is not None:
                self.files_held[f"{run_dir}/out"] = stdout
            handle = Handle(exit_code)
            self.handles[run_dir] = handle
            return handle
        if script == KILL_SCRIPT:
            self.handles[args[0]].finish(137)
        if script == PACK_SCRIPT:
            archive, _parent, name = args
            if name not in self.sdk.tree:
                raise e2b.CommandExitException(stdout="", stderr="", exit_code=3, error=None)
            self.files_held[archive] = self.sdk.tree[name]
        stdout = "1000\n1000\n" if script == "id -u; id -g" else ""
        return e2b.CommandResult(stdout=stdout, stderr="", exit_code=0, error=None)

    async def _read(self, path: str, **options: Any) -> Any:
        if path not in self.files_held:
            raise e2b.FileNotFoundException(f"{path} not found")
        data = self.files_held[path]
        return bytearray(data) if options.get("format") == "bytes" else data.decode()

    async def _write(self, path: str, data: Any, **options: Any) -> None:
        self.files_held[path] = data.read()

    async def _remove(self, path: str, **options: Any) -> None:
        for held in [p for p in self.files_held if p == path or p.startswith(f"{path}/")]:
            del self.files_held[held]

    async def kill(self) -> bool:
        self.killed += 1
        return True


class Sdk(types.SimpleNamespace):
    """The `e2b` module as the adapter uses it."""

    def __init__(self) -> None:
        names = [name for name in dir(e2b) if name.endswith(("Exception", "Error"))]
        super().__init__(**{name: getattr(e2b, name) for name in names})
        self.SandboxQuery = e2b.SandboxQuery
        self.calls: list[tuple[Any, ...]] = []
        self.outcomes: dict[str, tuple[int | None, bytes]] = {}
        self.tree: dict[str, bytes] = {}
        self.existing: set[str] = set()
        self.create_error: BaseException | None = None
        self.build_error: BaseException | None = None
        self.build_hangs = False
        self.listed: list[list[Any]] = []
        sdk = self

        class AsyncTemplate:
            def __new__(cls, **options: Any) -> Any:
                return Builder(sdk.calls, **options)

            @staticmethod
            async def exists(name: str, **api: Any) -> bool:
                sdk.calls.append(("exists", name, api))
                return name in sdk.existing

            @staticmethod
            async def build(template: Builder, name: str, **options: Any) -> None:
                sdk.calls.append(("build", template.steps, name, options))
                if sdk.build_hangs:
                    await asyncio.sleep(3600)
                if sdk.build_error is not None:
                    raise sdk.build_error
                sdk.existing.add(name)

        class AsyncSandbox:
            @staticmethod
            async def create(**options: Any) -> Sandbox:
                sdk.calls.append(("create", options))
                if sdk.create_error is not None:
                    raise sdk.create_error
                return Sandbox(sdk, "sbx-1")

            @staticmethod
            def list(**options: Any) -> Any:
                sdk.calls.append(("list", options))
                return _Pages(list(sdk.listed))

            @staticmethod
            async def kill(sandbox_id: str, **api: Any) -> bool:
                sdk.calls.append(("kill", sandbox_id, api))
                return True

        self.AsyncTemplate = AsyncTemplate
        self.AsyncSandbox = AsyncSandbox

    def named(self, kind: str) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == kind]


class _Pages:
    def __init__(self, pages: list[list[Any]]) -> None:
        self.pages = pages

    @property
    def has_next(self) -> bool:
        return bool(self.pages)

    async def next_items(self) -> list[Any]:
        return self.pages.pop(0)


@pytest.fixture
def sdk() -> Sdk:
    return Sdk()


@pytest.fixture
def provider(sdk: Sdk) -> E2BProvider:
    return E2BProvider(sdk, API, kill_grace_sec=0.01, response_timeout_sec=1.0)


def task_dir(tmp_path: Path, dockerfile: str) -> Path:
    environment = tmp_path / "task" / "environment"
    environment.mkdir(parents=True)
    (environment / "Dockerfile").write_text(dockerfile)
    return tmp_path / "task"


async def started(provider: E2BProvider, sdk: Sdk) -> tuple[E2BSandbox, Sandbox]:
    sandbox = await provider.start(request(spec()))
    await sandbox.wait_ready(5)
    return sandbox, sandbox.sandbox


# --- mapping ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpus", "memory", "storage", "expected"),
    [
        ("1500m", "1G", "10Gi", (2, 954, 10240)),
        ("500m", "2Gi", "1G", (1, 2048, 954)),
        ("4", "513Mi", "0", (4, 514, 0)),
    ],
)
def test_resources_become_whole_cpus_even_mib_and_free_disk(
    cpus: str, memory: str, storage: str, expected: tuple[int, int, int]
) -> None:
    size = sandbox_size(spec(resources={"cpus": cpus, "memory": memory, "storage": storage}))
    assert (size.cpu_count, size.memory_mb, size.min_free_disk_mb) == expected


def test_the_sandbox_outlives_every_phase_by_a_margin_and_at_most_a_day() -> None:
    assert lifetime_sec(spec()) == 900 + LIFETIME_MARGIN_SEC
    long = spec(
        timeouts={"agentInstallSec": 1, "agentSec": 90_000, "verifierSec": 1, "buildSec": 1}
    )
    assert lifetime_sec(long) == MAX_LIFETIME_SEC


async def test_a_registry_image_becomes_a_template_of_the_trials_size_then_a_sandbox(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox = await provider.start(request(spec(workdir="/app", preserveEnv=True)))
    assert sdk.named("exists")[0][2] == API
    (_, steps, name, options) = sdk.named("build")[0]
    assert steps[1:] == [
        ("from_image", "python:3.12-slim"),
        ("set_user", "root"),
        ("set_workdir", "/app"),
    ]
    assert options == {
        "cpu_count": 2,
        "memory_mb": 954,
        "min_free_disk_mb": 10240,
        "skip_cache": False,
        **API,
    }
    (_, create) = sdk.named("create")[0]
    assert create["template"] == name
    assert create["api_key"] == API["api_key"]
    assert create["timeout"] == 900 + LIFETIME_MARGIN_SEC
    assert create["metadata"][LABEL_BRIDGE] == "bridge-a"
    assert create["lifecycle"] == {"on_timeout": "pause"}  # preserveEnv: kept, paused
    assert "network" not in create
    assert SECRET not in repr(sdk.calls)
    assert sandbox.sandbox_id == "sbx-1"
    assert "e2b sandbox connect sbx-1" in sandbox.describe()


async def test_a_template_is_built_once_and_reused_where_e2b_has_it(
    provider: E2BProvider, sdk: Sdk
) -> None:
    await provider.start(request(spec()))
    await provider.start(request(spec()))
    assert len(sdk.named("build")) == 1
    assert len(sdk.named("exists")) == 1
    other = E2BProvider(sdk, API)  # a restarted bridge: E2B has the template
    await other.start(request(spec()))
    assert len(sdk.named("build")) == 1


async def test_a_restricted_egress_denies_all_but_the_allowed_hosts(
    provider: E2BProvider, sdk: Sdk
) -> None:
    egress = {"restricted": True, "allowedHosts": ["pypi.org", "10.0.0.0/8"]}
    await provider.start(request(spec(egress=egress)))
    network = sdk.named("create")[0][1]["network"]
    assert network == {"deny_out": ["0.0.0.0/0"], "allow_out": ["10.0.0.0/8", "pypi.org"]}


async def test_a_dockerfile_is_built_with_dockers_defaults_and_force_build_skips_the_cache(
    provider: E2BProvider, sdk: Sdk, tmp_path: Path
) -> None:
    task = task_dir(tmp_path, "FROM ubuntu:24.04\nRUN true\n")
    await provider.start(request(spec(forceBuild=True), task))
    await provider.start(request(spec(forceBuild=True), task))  # once per job
    builds = sdk.named("build")
    assert len(builds) == 1
    assert not sdk.named("exists")
    steps, options = builds[0][1], builds[0][3]
    assert steps[0] == ("new", {"file_context_path": str(task / "environment")})
    assert steps[1:] == [
        ("from_dockerfile", str(task / "environment" / "Dockerfile")),
        ("set_user", "root"),
        ("set_workdir", "/"),
    ]
    assert options["skip_cache"] is True


async def test_a_dockerfiles_own_user_and_workdir_are_kept(
    provider: E2BProvider, sdk: Sdk, tmp_path: Path
) -> None:
    task = task_dir(tmp_path, "FROM ubuntu:24.04\nUSER app\nWORKDIR /srv\n")
    await provider.start(request(spec(image="unbuilt"), task))
    assert [step[0] for step in sdk.named("build")[0][1]] == ["new", "from_dockerfile"]


START = ErrorType.ENVIRONMENT_START_FAILED
RESOURCES = ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
PULL = ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
BUILD = ErrorType.ENVIRONMENT_BUILD_FAILED


def error_cases() -> list[tuple[str, Callable[[], BaseException], ErrorType]]:
    return [
        ("create", lambda: e2b.AuthenticationException("401: bad key"), START),
        ("create", lambda: e2b.RateLimitException("429: too many sandboxes"), RESOURCES),
        ("create", lambda: e2b.ServiceBusyException("503: no capacity"), RESOURCES),
        ("create", lambda: e2b.SandboxException("404: no template", status_code=404), PULL),
        ("create", lambda: e2b.SandboxException("400: memory limit", status_code=400), RESOURCES),
        ("create", lambda: e2b.TimeoutException("request timed out"), START),
        ("build", lambda: e2b.BuildException("failed to pull image: manifest unknown"), PULL),
        ("build", lambda: e2b.BuildException("400: cpu count exceeds the maximum"), RESOURCES),
        ("build", lambda: e2b.BuildException("step 2 failed"), BUILD),
        ("build", lambda: e2b.AuthenticationException("401"), START),
        ("build", lambda: e2b.ServiceBusyException("503"), RESOURCES),
    ]


@pytest.mark.parametrize(("where", "error", "error_type"), error_cases())
async def test_every_sdk_refusal_has_the_seeds_error_type(
    provider: E2BProvider,
    sdk: Sdk,
    where: str,
    error: Callable[[], BaseException],
    error_type: ErrorType,
) -> None:
    setattr(sdk, f"{where}_error", error())
    with pytest.raises(ProviderError) as raised:
        await provider.start(request(spec()))
    assert raised.value.error_type is error_type
    assert str(error()) in raised.value.message


async def test_a_failed_dockerfile_build_fails_the_jobs_later_trials_without_building(
    provider: E2BProvider, sdk: Sdk, tmp_path: Path
) -> None:
    task = task_dir(tmp_path, "FROM ubuntu:24.04\nRUN false\n")
    sdk.build_error = e2b.BuildException("RUN false: exit code 1")
    for _ in range(2):
        with pytest.raises(ProviderError) as raised:
            await provider.start(request(spec(image="unbuilt"), task))
        assert raised.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED
    assert len(sdk.named("build")) == 1


async def test_a_build_past_its_timeout_fails_with_build_timeout(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sdk.build_hangs = True
    timeouts = {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 0.05}
    with pytest.raises(ProviderError) as raised:
        await provider.start(request(spec(timeouts=timeouts)))
    assert raised.value.error_type is ErrorType.ENVIRONMENT_BUILD_TIMEOUT
    assert "0.05s" in raised.value.message


@pytest.mark.parametrize(
    ("dockerfile", "image", "needle"),
    [
        ("FROM a\nFROM b\n", "unbuilt", "Multi-stage"),
        (None, "unbuilt", "no environment/Dockerfile"),
        ("FROM a\n", "unbuilt", "no task files"),
    ],
)
async def test_what_cannot_be_built_fails_with_build_failed(
    provider: E2BProvider, tmp_path: Path, dockerfile: str | None, image: str, needle: str
) -> None:
    task: Path | None = tmp_path / "task"
    if dockerfile is not None and needle != "no task files":
        task = task_dir(tmp_path, dockerfile)
    elif needle == "no task files":
        task = None
    else:
        (tmp_path / "task" / "environment").mkdir(parents=True)
    with pytest.raises(ProviderError) as raised:
        await provider.start(request(spec(image=image), task))
    assert raised.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED
    assert needle in raised.value.message


async def test_gpus_are_refused_as_a_resource_e2b_lacks(provider: E2BProvider, sdk: Sdk) -> None:
    gpu = spec(resources={"cpus": "1", "memory": "1Gi", "storage": "1Gi", "gpus": 1})
    with pytest.raises(ProviderError) as raised:
        await provider.start(request(gpu))
    assert raised.value.error_type is ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    assert not sdk.calls


# --- commands ---------------------------------------------------------------------------------


async def test_ready_makes_the_bridges_directories_as_root_and_learns_the_default_user(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox, fake = await started(provider, sdk)
    setup, probe = fake.runs
    assert setup["user"] == "root"
    assert setup["args"] == ["/logs", "/.rollout-bridge"]
    assert probe["user"] is None
    assert sandbox._owner == (1000, 1000)


async def test_env_goes_in_the_process_environment_never_on_the_command_line(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox, fake = await started(provider, sdk)
    sdk.outcomes["printenv API_KEY"] = (0, b"out \xff bytes\n")
    result = await sandbox.run(
        "printenv API_KEY", env={"API_KEY": SECRET}, user="agent", cwd="work", timeout_sec=5
    )
    run = fake.runs[-1]
    assert run["envs"] == {"API_KEY": SECRET}
    assert SECRET not in run["cmd"]
    assert run["user"] == "agent"
    assert run["background"] is True
    assert run["timeout"] == 0
    assert run["script"] == RUN_WRAPPER
    assert run["args"][1:] == ["./work", "printenv API_KEY"]
    assert run["cmd"].startswith("exec /bin/sh -c ")
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"out \xff bytes\n", False)
    assert not any(path.startswith(run["args"][0]) for path in fake.files_held)  # removed


async def test_an_exit_status_is_the_wrappers_as_the_sdk_reports_it(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox, _ = await started(provider, sdk)
    sdk.outcomes["kill -TERM $$"] = (143, b"")
    result = await sandbox.run("kill -TERM $$", timeout_sec=5)
    assert (result.exit_code, result.timed_out) == (143, False)


async def test_a_command_past_its_timeout_is_killed_as_root_and_reports_timed_out(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox, fake = await started(provider, sdk)
    sdk.outcomes["sleep 100"] = (None, b"")
    result = await sandbox.run("sleep 100", timeout_sec=0.05)
    kill = fake.runs[-1]
    run_dir = fake.runs[-2]["args"][0]
    assert kill["script"] == KILL_SCRIPT
    assert kill["user"] == "root"
    assert kill["args"] == [run_dir, "10"]
    assert (result.exit_code, result.timed_out) == (None, True)


async def test_a_user_the_sandbox_lacks_is_a_refused_command(
    provider: E2BProvider, sdk: Sdk
) -> None:
    sandbox, _ = await started(provider, sdk)
    result = await sandbox.run("true", user="nobody-here", timeout_sec=5)
    assert result.exit_code == 126
    assert b"nobody-here" in result.stderr


async def test_kill_all_spares_the_sandboxs_own_processes(provider: E2BProvider, sdk: Sdk) -> None:
    sandbox, fake = await started(provider, sdk)
    await sandbox.kill_all()
    assert fake.runs[-1]["script"] == KILL_ALL_SCRIPT
    assert fake.runs[-1]["args"] == ["/.rollout-bridge/base", "10"]


async def test_stop_and_terminate_kill_the_sandbox_once(provider: E2BProvider, sdk: Sdk) -> None:
    sandbox, fake = await started(provider, sdk)
    await sandbox.stop(0)
    await sandbox.terminate()
    await sandbox.terminate()
    assert fake.killed == 1
    with pytest.raises(EnvironmentFailure, match="stopped"):
        await sandbox.run("true", timeout_sec=1)


# --- files ------------------------------------------------------------------------------------


async def test_put_files_writes_a_tar_of_the_default_users_and_unpacks_it_as_root(
    provider: E2BProvider, sdk: Sdk, tmp_path: Path
) -> None:
    sandbox, fake = await started(provider, sdk)
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "run.sh").write_text("echo hi\n")
    written: dict[str, bytes] = {}
    write = fake.files.write

    async def keep(path: str, data: Any, **options: Any) -> None:
        await write(path, data, **options)
        written[path] = fake.files_held[path]

    fake.files.write = keep
    await sandbox.put_files(tmp_path / "tree", "/opt/tree", owner="agent")
    ((archive_path, data),) = written.items()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.getmember("run.sh")
        assert (member.uid, member.gid) == (1000, 1000)
    unpack = fake.runs[-1]
    assert unpack["script"] == UNPACK_SCRIPT
    assert unpack["user"] == "root"
    assert unpack["args"] == [archive_path, "/opt/tree", "agent", "/opt/tree"]


async def test_get_files_unpacks_the_sandboxs_tar_and_a_missing_path_says_so(
    provider: E2BProvider, sdk: Sdk, tmp_path: Path
) -> None:
    sandbox, _ = await started(provider, sdk)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        body = b"reward 1\n"
        info = tarfile.TarInfo("./verifier/reward.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        evil = tarfile.TarInfo("../escape")
        tar.addfile(evil, io.BytesIO(b""))
    sdk.tree["verifier"] = buffer.getvalue()
    await sandbox.get_files("/logs/verifier", tmp_path / "out")
    assert (tmp_path / "out" / "reward.txt").read_bytes() == b"reward 1\n"
    assert not (tmp_path / "escape").exists()
    with pytest.raises(FileTransferError, match="there is no /logs/absent"):
        await sandbox.get_files("/logs/absent", tmp_path / "absent")


# --- the account ------------------------------------------------------------------------------


async def test_owned_lists_by_the_bridges_metadata_across_pages(
    provider: E2BProvider, sdk: Sdk
) -> None:
    labels = dict(sandbox_labels("ns", "trial-1", "job", "bridge-a", preserved=True))
    sdk.listed = [
        [types.SimpleNamespace(sandbox_id="a", metadata=labels)],
        [types.SimpleNamespace(sandbox_id="b", metadata={})],
    ]
    owned = await provider.owned("bridge-a")
    query = sdk.named("list")[0][1]["query"]
    assert query.metadata[LABEL_BRIDGE] == "bridge-a"
    assert [o.sandbox_id for o in owned] == ["a", "b"]
    assert owned[0].of_trial("ns", "trial-1")
    assert owned[0].preserved
    await provider.terminate("a")
    assert sdk.named("kill") == [("kill", "a", API)]


async def test_connect_reads_the_key_and_domain_from_the_bridges_variables_only() -> None:
    provider = await E2BProvider.connect({"E2B_API_KEY": "k", "E2B_DOMAIN": "e2b.example"})
    assert provider.api == {"api_key": "k", "domain": "e2b.example"}
    assert provider.sdk is e2b
    with pytest.raises(ProviderError, match="E2B_API_KEY") as raised:
        await E2BProvider.connect({})
    assert raised.value.error_type is ErrorType.ENVIRONMENT_START_FAILED


def test_connect_without_the_sdk_says_how_to_install_it() -> None:
    program = (
        "import asyncio, sys\n"
        "sys.modules['e2b'] = None\n"
        "from rollout.bridge.providers.e2b import E2BProvider\n"
        "from rollout.bridge.providers.base import ProviderError\n"
        "try:\n"
        "    asyncio.run(E2BProvider.connect({'E2B_API_KEY': 'k'}))\n"
        "except ProviderError as err:\n"
        "    print(err.error_type.value, err.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("environment_start_failed ")
    assert "pip install 'rollout-operator[e2b]'" in done.stdout
    assert "Traceback" not in done.stderr
