"""The daytona provider at the SDK's boundary: a fake `AsyncDaytona` of the SDK's documented
shape (create, list, get, close; a sandbox's process.exec, fs.upload_file/download_file, stop,
delete) is injected, records what the adapter asks for, and raises the real SDK's errors.

The fake's `process.exec` runs each command as Daytona's toolbox does (a shell reading the
command on stdin, in a process group of its own, killed at its timeout) in a PID namespace of
its own that stands for the sandbox (unshare/nsenter, as root), so the wrapper, the kills, the
users and the archives are tested for real; without namespaces, in a host shell (kill_all is
then not tested: it would signal the machine's processes).
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.resources import UNBUILT_IMAGE, RolloutTrialSpec
from rollout.bridge.providers.base import ProviderError, SandboxRequest, sandbox_labels
from rollout.bridge.providers.daytona import (
    START_TIMEOUT_SEC,
    DaytonaProvider,
    lifetime,
    sandbox_resources,
)
from rollout.bridge.providers.daytona_sandbox import DaytonaSandbox
from rollout_runner.environment import EnvironmentFailure, FileTransferError

daytona: Any = pytest.importorskip("daytona", reason="the Daytona SDK (`daytona`) is not installed")

SECRET = "sk-never-on-a-command-line"


def spec(**fields: object) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "job",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 1,
            "image": "busybox:1",
            "resources": {"cpus": "1500m", "memory": "1Gi", "storage": "10G"},
            "timeouts": {
                "agentInstallSec": 60,
                "agentSec": 600,
                "verifierSec": 120,
                "buildSec": 300,
            },
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def request(trial_spec: RolloutTrialSpec, task_dir: Path | None = None) -> SandboxRequest:
    labels = sandbox_labels("team", "trial-1", "job", "bridge-a", preserved=trial_spec.preserve_env)
    return SandboxRequest("team", "trial-1", trial_spec, labels, task_dir)


# --- The fake SDK client ------------------------------------------------------------------------


class Box:
    """The sandbox's processes: a PID and mount namespace with its own /proc, entered by every
    exec; None where this machine cannot make one."""

    def __init__(self) -> None:
        self.keeper: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
            return
        self.keeper = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "sleep", "infinity"]
        )
        children = Path(f"/proc/{self.keeper.pid}/task/{self.keeper.pid}/children")
        for _ in range(200):
            words = children.read_text().split() if children.exists() else []
            if words:
                self.pid = int(words[0])
                return
            if self.keeper.poll() is not None:
                self.keeper = None
                return
            subprocess.run(["sleep", "0.01"], check=False)

    def prefix(self) -> list[str]:
        return [] if self.pid is None else ["nsenter", "-t", str(self.pid), "-p", "-m"]

    def close(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)  # the namespace's init: all of it ends
        if self.keeper is not None:
            self.keeper.kill()
            self.keeper.wait()


class FakeProcess:
    def __init__(self, box: Box, calls: list[tuple[str, Any]]) -> None:
        self.box = box
        self.calls = calls
        self.refuse: Exception | None = None

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 - the SDK's parameter
    ) -> SimpleNamespace:
        self.calls.append(("exec", {"command": command, "env": env, "timeout": timeout}))
        if self.refuse is not None:
            raise self.refuse
        assert isinstance(timeout, int)
        process = await asyncio.create_subprocess_exec(
            *self.box.prefix(),
            "/bin/sh",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(command.encode()), timeout)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise daytona.DaytonaTimeoutError(
                "Command execution timed out", status_code=408
            ) from None
        return SimpleNamespace(exit_code=process.returncode, result=out.decode())


class FakeFileSystem:
    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls

    async def upload_file(self, src: str | bytes, dst: str, timeout: int = 1800) -> None:  # noqa: ASYNC109
        self.calls.append(("upload_file", {"src": src, "dst": dst, "timeout": timeout}))
        await asyncio.to_thread(_copy, src, dst)

    async def download_file(self, remote_path: str, *rest: Any) -> bytes | None:
        self.calls.append(("download_file", {"remote_path": remote_path, "rest": rest}))
        data = await asyncio.to_thread(_read, remote_path)
        if data is None:
            # Without the toolbox's error details the SDK raises its base error.
            raise daytona.DaytonaError(f"Failed to download file: {remote_path}")
        if rest and isinstance(rest[0], str):
            await asyncio.to_thread(_copy, data, rest[0])
            return None
        return data


def _copy(source: str | bytes, destination: str) -> None:
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    Path(destination).write_bytes(data)


def _read(path: str) -> bytes | None:
    source = Path(path)
    return source.read_bytes() if source.is_file() else None


class FakeSandbox:
    def __init__(self, box: Box, sandbox_id: str, name: str, labels: dict[str, str]) -> None:
        self.id = sandbox_id
        self.name = name
        self.labels = labels
        self.state = "started"
        self.calls: list[tuple[str, Any]] = []
        self.process = FakeProcess(box, self.calls)
        self.fs = FakeFileSystem(self.calls)
        self.deleted = False

    async def stop(self, timeout: float | None = 60, force: bool = False) -> None:  # noqa: ASYNC109
        self.calls.append(("stop", {"timeout": timeout}))
        self.state = "stopped"

    async def delete(self, timeout: float | None = 60, wait: bool = False) -> None:  # noqa: ASYNC109
        self.calls.append(("delete", {"timeout": timeout}))
        if self.deleted:
            raise daytona.DaytonaNotFoundError("Sandbox not found", status_code=404)
        self.deleted = True


class FakeDaytona:
    """`AsyncDaytona`'s methods that the provider uses."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.created: list[tuple[Any, float]] = []
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.refuse: Exception | None = None
        self.closed = False

    async def create(self, params: Any, *, timeout: float = 60) -> FakeSandbox:  # noqa: ASYNC109
        self.created.append((params, timeout))
        sandbox_id = f"sb-{len(self.created)}"
        if self.refuse is not None:
            if isinstance(self.refuse, daytona.DaytonaTimeoutError):
                self.sandboxes[sandbox_id] = FakeSandbox(self.box, sandbox_id, "late", {})
                self.refuse._attach_sandbox_id(sandbox_id)
            raise self.refuse
        sandbox = FakeSandbox(self.box, sandbox_id, params.name, dict(params.labels))
        self.sandboxes[sandbox_id] = sandbox
        return sandbox

    async def list(
        self, query: Any = None, request_timeout: float | None = None
    ) -> AsyncIterator[FakeSandbox]:
        wanted = (query.labels if query is not None else None) or {}
        for sandbox in list(self.sandboxes.values()):
            if all(sandbox.labels.get(k) == v for k, v in wanted.items()):
                yield sandbox

    async def get(self, sandbox_id: str, request_timeout: float | None = None) -> FakeSandbox:
        if sandbox_id not in self.sandboxes:
            raise daytona.DaytonaNotFoundError(f"Sandbox {sandbox_id} not found", status_code=404)
        return self.sandboxes[sandbox_id]

    async def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    made = Box()
    yield made
    made.close()


@pytest.fixture
def client(box: Box) -> FakeDaytona:
    return FakeDaytona(box)


@pytest.fixture
def provider(client: FakeDaytona, tmp_path: Path) -> DaytonaProvider:
    return DaytonaProvider(
        client,
        daytona,
        sandbox_options={
            "private_dir": str(tmp_path / "private"),
            "logs_dir": str(tmp_path / "logs"),
            "kill_grace_sec": 0.3,
            "response_timeout_sec": 10,
            "long_poll_sec": 0.5,
        },
    )


@pytest.fixture
async def sandbox(provider: DaytonaProvider) -> DaytonaSandbox:
    started = await provider.start(request(spec()))
    await started.wait_ready(10)
    return started


def alive(pid: str) -> str:
    """A script that prints whether `pid` lives (a zombie does not: the fake's init, sleep,
    reaps none)."""
    return (
        f"s=$(sed -n 's/^State:[[:space:]]*//p' /proc/{pid}/status 2>/dev/null); "
        'case $s in ""|Z*) echo gone ;; *) echo alive ;; esac'
    )


def scripts(calls: list[tuple[str, Any]]) -> list[str]:
    """What each exec ran: the base64 script inside its command line, decoded."""
    found = []
    for kind, args in calls:
        if kind == "exec":
            encoded = re.search(r"echo (\S+) \| base64 -d", args["command"])
            assert encoded is not None, args["command"]
            found.append(base64.b64decode(encoded[1]).decode())
    return found


# --- Starting sandboxes -------------------------------------------------------------------------


async def test_a_sandbox_is_asked_for_with_the_trials_image_resources_labels_and_lifetime(
    provider: DaytonaProvider, client: FakeDaytona
) -> None:
    started = await provider.start(request(spec()))
    params, timeout = client.created[0]
    assert isinstance(params, daytona.CreateSandboxFromImageParams)
    assert params.image == "busybox:1"
    assert params.resources == daytona.Resources(cpu=2, memory=1, disk=10)
    assert params.labels == sandbox_labels("team", "trial-1", "job", "bridge-a")
    assert params.name.startswith("team-trial-1-")
    # 300 + 60 + 600 + 120 s of phases and a 900 s margin: 33 minutes, then destroyed.
    assert (params.ttl_minutes, params.auto_delete_interval, params.auto_stop_interval) == (
        33,
        0,
        0,
    )
    assert timeout == START_TIMEOUT_SEC
    assert started.sandbox_id == "sb-1"
    assert "sb-1" in started.describe()


def test_resources_are_whole_cores_and_gib_rounded_up_and_gpus_pass() -> None:
    small = spec(resources={"cpus": "250m", "memory": "512Mi", "storage": "1"})
    assert sandbox_resources(small) == {"cpu": 1, "memory": 1, "disk": 1}
    big = spec(resources={"cpus": "4", "memory": "5G", "storage": "20Gi", "gpus": 2})
    assert sandbox_resources(big) == {"cpu": 4, "memory": 5, "disk": 20, "gpu": 2}


def test_a_kept_sandbox_has_no_age_limit_but_stops_when_idle() -> None:
    assert lifetime(spec(preserveEnv=True), preserved=True) == {"auto_stop_interval": 33}


async def test_an_unbuilt_image_is_built_from_the_tasks_dockerfile(
    provider: DaytonaProvider, client: FakeDaytona, tmp_path: Path
) -> None:
    task = tmp_path / "task"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM busybox:1\nRUN echo built\n")
    await provider.start(request(spec(image=UNBUILT_IMAGE), task))
    params, timeout = client.created[0]
    assert isinstance(params.image, daytona.Image)
    assert "RUN echo built" in params.image.dockerfile()
    assert timeout == 300  # the trial's build timeout

    with pytest.raises(ProviderError) as missing:
        await provider.start(request(spec(forceBuild=True), None))
    assert missing.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED
    (task / "environment" / "Dockerfile").unlink()
    with pytest.raises(ProviderError) as no_dockerfile:
        await provider.start(request(spec(forceBuild=True), task))
    assert no_dockerfile.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED


@pytest.mark.parametrize(
    ("error", "builds", "expected"),
    [
        (daytona.DaytonaAuthenticationError("Invalid API key", 401), False, "start_failed"),
        (daytona.DaytonaForbiddenError("Forbidden", 403), False, "start_failed"),
        (daytona.DaytonaRateLimitError("Too many requests", 429), False, "resource"),
        (daytona.DaytonaForbiddenError("Total CPU quota exceeded", 403), False, "resource"),
        (daytona.DaytonaBadRequestError("Not enough GPUs available", 400), False, "resource"),
        (daytona.DaytonaQueueTimeoutError("destroyed after waiting"), False, "resource"),
        (daytona.DaytonaSpotEvictedError("evicted by spot preemption"), False, "resource"),
        (daytona.DaytonaTimeoutError("Sandbox did not start in 300s"), False, "start_failed"),
        (daytona.DaytonaTimeoutError("create timed out"), True, "build_timeout"),
        (daytona.DaytonaConnectionError("connection refused"), True, "start_failed"),
        (
            daytona.DaytonaError("Sandbox x entered error state: build_failed, error reason: x"),
            True,
            "build_failed",
        ),
        (
            daytona.DaytonaError("Sandbox x entered error state: build_failed, manifest unknown"),
            False,
            "pull",
        ),
        (daytona.DaytonaBadRequestError("failed to pull image nope:1"), False, "pull"),
        (daytona.DaytonaInternalServerError("runner crashed"), False, "start_failed"),
    ],
)
async def test_the_sdks_errors_map_onto_the_seeds_types(
    provider: DaytonaProvider,
    client: FakeDaytona,
    tmp_path: Path,
    error: Exception,
    builds: bool,
    expected: str,
) -> None:
    types = {
        "start_failed": ErrorType.ENVIRONMENT_START_FAILED,
        "resource": ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        "build_timeout": ErrorType.ENVIRONMENT_BUILD_TIMEOUT,
        "build_failed": ErrorType.ENVIRONMENT_BUILD_FAILED,
        "pull": ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
    }
    task = tmp_path / "task"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM busybox:1\n")
    client.refuse = error
    with pytest.raises(ProviderError) as refused:
        await provider.start(request(spec(forceBuild=builds), task if builds else None))
    assert refused.value.error_type is types[expected]
    assert str(error.args[0]) in refused.value.message


async def test_a_start_that_timed_out_deletes_the_sandbox_it_left(
    provider: DaytonaProvider, client: FakeDaytona
) -> None:
    client.refuse = daytona.DaytonaTimeoutError("Sandbox did not start")
    with pytest.raises(ProviderError):
        await provider.start(request(spec()))
    assert client.sandboxes["sb-1"].deleted


async def test_owned_lists_the_bridges_sandboxes_by_label_and_terminate_is_idempotent(
    provider: DaytonaProvider, client: FakeDaytona
) -> None:
    await provider.start(request(spec()))
    await provider.start(request(spec(preserveEnv=True)))
    other = FakeSandbox(client.box, "sb-x", "x", {"rollout.dev/bridge": "bridge-b"})
    client.sandboxes["sb-x"] = other
    owned = await provider.owned("bridge-a")
    assert [(o.sandbox_id, o.namespace, o.trial_name, o.preserved) for o in owned] == [
        ("sb-1", "team", "trial-1", False),
        ("sb-2", "team", "trial-1", True),
    ]
    await provider.terminate("sb-1")
    await provider.terminate("sb-1")  # gone already: done
    await provider.terminate("sb-never")
    assert client.sandboxes["sb-1"].deleted
    await provider.aclose()
    assert client.closed


# --- Commands -----------------------------------------------------------------------------------


async def test_a_command_gets_its_env_cwd_and_separate_output_and_no_line_holds_the_env(
    sandbox: DaytonaSandbox, tmp_path: Path
) -> None:
    result = await sandbox.run(
        'echo "$TOKEN"; pwd; echo oops >&2; exit 3',
        env={"TOKEN": SECRET},
        cwd=str(tmp_path),
        timeout_sec=20,
    )
    assert (result.exit_code, result.timed_out) == (3, False)
    assert result.stdout.decode().split() == [SECRET, str(tmp_path)]
    assert result.stderr == b"oops\n"
    calls = sandbox.sandbox.calls
    assert not any(SECRET in args["command"] for kind, args in calls if kind == "exec")
    assert not any(SECRET in script for script in scripts(calls))
    assert [args["env"] for kind, args in calls if kind == "exec" and args["env"]] == [
        {"TOKEN": SECRET}
    ]


async def test_a_signal_reports_128_plus_n_and_a_missing_cwd_126(sandbox: DaytonaSandbox) -> None:
    killed = await sandbox.run("kill -TERM $$", timeout_sec=20)
    assert killed.exit_code == 128 + signal.SIGTERM
    nowhere = await sandbox.run("true", cwd="/no/such/dir", timeout_sec=20)
    assert nowhere.exit_code == 126


async def test_a_timed_out_command_and_everything_it_started_are_killed(
    sandbox: DaytonaSandbox, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    result = await sandbox.run(f"sleep 60 & echo $! >{pids}; trap '' TERM; sleep 60", timeout_sec=1)
    assert result.timed_out
    assert result.exit_code is None
    assert result.duration_sec < 30  # killed, not its 60 s (loose: CI runs two workers)
    child = int(pids.read_text())
    probe = await sandbox.run(alive(str(child)), timeout_sec=20)
    assert probe.stdout == b"gone\n"


async def test_a_user_runs_the_command_and_keeps_the_env_su_resets(
    sandbox: DaytonaSandbox,
) -> None:
    result = await sandbox.run(
        'id -un; echo "$HOME $TOKEN"',
        env={"HOME": "/agent", "TOKEN": SECRET},
        user="nobody",
        timeout_sec=20,
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.decode().split() == ["nobody", "/agent", SECRET]


async def test_kill_all_ends_every_process_but_the_sandboxes_own(
    sandbox: DaytonaSandbox, box: Box, tmp_path: Path
) -> None:
    if box.pid is None:
        pytest.skip("no PID namespace here (needs root, unshare and nsenter)")
    pid_file = tmp_path / "daemon"
    started = await sandbox.run(
        f"setsid sleep 120 </dev/null >/dev/null 2>&1 & echo $! >{pid_file}", timeout_sec=20
    )
    assert started.exit_code == 0
    daemon_pid = pid_file.read_text().strip()
    await sandbox.kill_all()
    probe = await sandbox.run(alive(daemon_pid), timeout_sec=20)
    assert probe.stdout == b"gone\n"
    keeper = await sandbox.run(alive("1"), timeout_sec=20)
    assert keeper.stdout == b"alive\n"


async def test_a_cancelled_command_is_killed(sandbox: DaytonaSandbox, tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    running = asyncio.ensure_future(sandbox.run(f"echo $$ >{pids}; exec sleep 60", timeout_sec=60))
    for _ in range(200):
        if pids.exists() and pids.read_text().strip():
            break
        await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    probe = await sandbox.run(alive(pids.read_text().strip()), timeout_sec=20)
    assert probe.stdout == b"gone\n"


async def test_sdk_failures_fail_the_environment_and_a_stopped_one_runs_nothing(
    sandbox: DaytonaSandbox,
) -> None:
    sandbox.sandbox.process.refuse = daytona.DaytonaConnectionError("toolbox unreachable")
    with pytest.raises(EnvironmentFailure, match="toolbox unreachable"):
        await sandbox.run("true", timeout_sec=5)
    sandbox.sandbox.process.refuse = None
    await sandbox.stop()
    await sandbox.stop()  # once only
    assert [kind for kind, _ in sandbox.sandbox.calls].count("stop") == 1
    with pytest.raises(EnvironmentFailure, match="stopped"):
        await sandbox.run("true", timeout_sec=5)
    await sandbox.terminate()
    await sandbox.terminate()  # idempotent
    assert sandbox.sandbox.deleted
    assert await sandbox.reported_cost() is None


# --- Files --------------------------------------------------------------------------------------


async def test_files_go_in_and_out_with_their_modes_and_owner(
    sandbox: DaytonaSandbox, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    (source / "tests").mkdir(parents=True)
    (source / "tests" / "test.sh").write_text("#!/bin/sh\necho ok\n")
    (source / "tests" / "test.sh").chmod(0o755)
    (source / "note.txt").write_text("hello")
    target = tmp_path / "box" / "task"
    await sandbox.put_files(source, str(target), owner="nobody")
    assert (target / "tests" / "test.sh").stat().st_mode & 0o111
    assert (target / "note.txt").read_text() == "hello"
    owner = await sandbox.run(f"stat -c %U {target}/note.txt", timeout_sec=20)
    assert owner.stdout == b"nobody\n"

    await sandbox.put_files(source / "note.txt", str(tmp_path / "box" / "one" / "renamed.txt"))
    assert (tmp_path / "box" / "one" / "renamed.txt").read_text() == "hello"

    back = tmp_path / "back"
    await sandbox.get_files(str(target), back)
    assert (back / "tests" / "test.sh").read_text() == "#!/bin/sh\necho ok\n"
    await sandbox.get_files(str(target / "note.txt"), tmp_path / "back-note.txt")
    assert (tmp_path / "back-note.txt").read_text() == "hello"
    assert not list((tmp_path / "private").glob("*.tar"))  # archives removed


async def test_a_failed_prepare_copies_nothing_and_a_missing_path_is_named(
    sandbox: DaytonaSandbox, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x")
    target = tmp_path / "box" / "never"
    with pytest.raises(FileTransferError, match="preparing"):
        await sandbox.put_files(tmp_path / "file", str(target), prepare="echo no >&2; exit 4")
    assert not target.exists()
    with pytest.raises(FileTransferError, match="there is no /no/such/path"):
        await sandbox.get_files("/no/such/path", tmp_path / "out")


# --- Connecting ---------------------------------------------------------------------------------


async def test_connect_names_the_missing_variable() -> None:
    with pytest.raises(ProviderError) as missing:
        await DaytonaProvider.connect({"DAYTONA_API_URL": "https://example.invalid/api"})
    assert missing.value.error_type is ErrorType.ENVIRONMENT_START_FAILED
    assert "DAYTONA_API_KEY" in missing.value.message


def test_connect_without_the_sdk_says_how_to_install_it() -> None:
    program = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["daytona"] = None
        from rollout.bridge.providers.base import ProviderError
        from rollout.bridge.providers.daytona import DaytonaProvider
        try:
            asyncio.run(DaytonaProvider.connect({"DAYTONA_API_KEY": "k"}))
        except ProviderError as err:
            print(err.error_type.value, err.message)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("environment_start_failed ")
    assert "pip install 'rollout-operator[daytona]'" in done.stdout
    assert "Traceback" not in done.stderr
