"""The modal provider at the SDK boundary: a stand-in for the `modal` module, shaped like its
documented asynchronous API (`X.aio(...)`), is injected into the provider, records what the
adapter asks for and raises the SDK's own exception classes (`modal.exception`, installed).

The stand-in's sandbox runs each exec as a local process, so the adapter's shell scripts (the
run wrapper, the kill script, tar in and out) run for real, in a directory of the test's own;
only `kill_all`, which would signal every process of this machine, is answered from a script.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from modal import exception as modal_errors

from rollout.api.errors import ErrorType
from rollout.api.names import LABEL_COMPONENT
from rollout.api.resources import UNBUILT_IMAGE, RolloutTrialSpec
from rollout.bridge.providers.base import (
    BRIDGE_COMPONENT,
    LABEL_BRIDGE,
    OwnedSandbox,
    ProviderError,
    SandboxRequest,
    sandbox_labels,
)
from rollout.bridge.providers.modal import LIFETIME_MARGIN_SEC, MAX_LIFETIME_SEC, ModalProvider
from rollout.bridge.providers.modal_sandbox import APP_NAME, ModalSandbox
from rollout_runner.environment import EnvironmentFailure, EnvironmentNotReady, FileTransferError

NAMESPACE = "team-a"
TOKEN = {"MODAL_TOKEN_ID": "ak-test", "MODAL_TOKEN_SECRET": "as-very-secret"}
REPO = Path(__file__).resolve().parents[2]


class Aio:
    """A method of the SDK as its synchronicity wrapper offers it: `method.aio(...)`."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.aio = function


# --- The stand-in SDK -------------------------------------------------------------------------


class FakeStream:
    def __init__(self, reader: asyncio.StreamReader | None, data: bytes = b"") -> None:
        self._reader = reader
        self._data = data
        self.read = Aio(self._read)

    async def _read(self) -> bytes:
        return await self._reader.read() if self._reader is not None else self._data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        if self._reader is None:
            yield self._data
            return
        while chunk := await self._reader.read(65536):
            yield chunk


class FakeProcess:
    """A ContainerProcess: a local process, or a scripted answer."""

    def __init__(
        self,
        local: asyncio.subprocess.Process | None,
        answer: tuple[int, bytes, bytes] = (0, b"", b""),
    ) -> None:
        self.local = local
        self.stdout = FakeStream(local.stdout if local else None, answer[1])
        self.stderr = FakeStream(local.stderr if local else None, answer[2])
        self._code = answer[0]
        self.wait = Aio(self._wait)

    async def _wait(self) -> int:
        if self.local is None:
            return self._code
        code = await self.local.wait()
        return 128 - code if code < 0 else code  # Modal reports signal N as 128+N


class FakeSandbox:
    def __init__(self, object_id: str, tags: dict[str, str]) -> None:
        self.object_id = object_id
        self.tags = tags
        self.execs: list[dict[str, Any]] = []
        self.copies: list[tuple[Path, str]] = []
        self.exec_errors: list[BaseException] = []
        self.terminate_errors: list[BaseException] = []
        self.answer: Callable[[tuple[str, ...]], tuple[int, bytes, bytes] | None] = lambda _: None
        self.terminated = 0
        self.finished = False
        self.exec = Aio(self._exec)
        self.terminate = Aio(self._terminate)
        self.poll = Aio(self._poll)
        self.get_tags = Aio(self._get_tags)
        self._experimental_stats = Aio(self._stats)
        self.filesystem = type("Filesystem", (), {})()
        self.filesystem.copy_from_local = Aio(self._copy_from_local)

    async def _exec(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        text: bool = True,
        timeout: int | None = None,  # noqa: ASYNC109 (the SDK's own keyword)
    ) -> FakeProcess:
        self.execs.append({"args": args, "env": env, "text": text, "timeout": timeout})
        if self.exec_errors:
            raise self.exec_errors.pop(0)
        answer = self.answer(args)
        if answer is not None:
            return FakeProcess(None, answer)
        local = await asyncio.create_subprocess_exec(
            *args,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return FakeProcess(local)

    async def _terminate(self) -> None:
        self.terminated += 1
        if self.terminate_errors:
            raise self.terminate_errors.pop(0)

    async def _poll(self) -> int | None:
        return 0 if self.finished else None

    async def _get_tags(self) -> dict[str, str]:
        return dict(self.tags)

    async def _stats(self) -> Any:
        return type("Stats", (), {"cost": Decimal("0.0125")})()

    async def _copy_from_local(self, local_path: Path, remote_path: str) -> None:
        self.copies.append((Path(local_path), remote_path))
        shutil.copyfile(local_path, remote_path)


class FakeImage:
    def __init__(self, sdk: FakeSdk, how: str, *args: Any, **kwargs: Any) -> None:
        self.sdk = sdk
        self.defined = (how, args, kwargs)
        self.build = Aio(self._build)

    async def _build(self, app: Any) -> FakeImage:
        self.sdk.builds.append((self.defined, app))
        if self.sdk.build_delay_sec:
            await asyncio.sleep(self.sdk.build_delay_sec)
        if self.sdk.build_errors:
            raise self.sdk.build_errors.pop(0)
        return self


class FakeSdk:
    """The parts of `modal` the adapter uses, each recording its calls."""

    exception = modal_errors

    def __init__(self) -> None:
        self.credentials: list[tuple[str, str]] = []
        self.lookups: list[dict[str, Any]] = []
        self.creates: list[dict[str, Any]] = []
        self.lists: list[dict[str, Any]] = []
        self.builds: list[tuple[Any, Any]] = []
        self.closed = 0
        self.lookup_errors: list[BaseException] = []
        self.create_errors: list[BaseException] = []
        self.build_errors: list[BaseException] = []
        self.build_delay_sec = 0.0
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.app = type("App", (), {"app_id": "ap-test"})()
        self.client = type("Client", (), {"close": Aio(self._close)})()
        sdk = self
        self.Client = type("Client", (), {"from_credentials": Aio(self._from_credentials)})
        self.App = type("App", (), {"lookup": Aio(self._lookup)})
        self.Image = type(
            "Image",
            (),
            {
                "from_registry": staticmethod(
                    lambda *a, **k: FakeImage(sdk, "from_registry", *a, **k)
                ),
                "from_dockerfile": staticmethod(
                    lambda *a, **k: FakeImage(sdk, "from_dockerfile", *a, **k)
                ),
            },
        )
        self.Sandbox = type(
            "Sandbox",
            (),
            {
                "create": Aio(self._create),
                "list": Aio(self._list),
                "from_id": Aio(self._from_id),
            },
        )

    async def _close(self) -> None:
        self.closed += 1

    async def _from_credentials(self, token_id: str, token_secret: str) -> Any:
        self.credentials.append((token_id, token_secret))
        return self.client

    async def _lookup(self, name: str, **kwargs: Any) -> Any:
        self.lookups.append({"name": name, **kwargs})
        if self.lookup_errors:
            raise self.lookup_errors.pop(0)
        return self.app

    async def _create(self, *args: str, **kwargs: Any) -> FakeSandbox:
        self.creates.append({"args": args, **kwargs})
        if self.create_errors:
            raise self.create_errors.pop(0)
        sandbox = FakeSandbox(f"sb-{len(self.sandboxes) + 1}", dict(kwargs.get("tags") or {}))
        self.sandboxes[sandbox.object_id] = sandbox
        return sandbox

    async def _list(self, **kwargs: Any) -> AsyncIterator[FakeSandbox]:
        self.lists.append(kwargs)
        for sandbox in self.sandboxes.values():
            if all(sandbox.tags.get(k) == v for k, v in (kwargs["tags"] or {}).items()):
                yield sandbox

    async def _from_id(self, sandbox_id: str, **kwargs: Any) -> FakeSandbox:
        if sandbox_id not in self.sandboxes:
            raise modal_errors.NotFoundError(f"Sandbox {sandbox_id} not found")
        return self.sandboxes[sandbox_id]


# --- Helpers ----------------------------------------------------------------------------------


def spec_for(image: str = "debian:bookworm-slim", **fields: Any) -> RolloutTrialSpec:
    resources = {"cpus": "1", "memory": "256Mi", "storage": "1G", **fields.pop("resources", {})}
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "bridge-test",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 1,
            "image": image,
            "resources": resources,
            "timeouts": {
                "agentInstallSec": 100,
                "agentSec": 200,
                "verifierSec": 300.5,
                "buildSec": 60,
            },
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def request_for(
    spec: RolloutTrialSpec, *, trial: str = "trial-1", task_dir: Path | None = None
) -> SandboxRequest:
    labels = sandbox_labels(
        NAMESPACE, trial, spec.job_name, "bridge-a", preserved=spec.preserve_env
    )
    return SandboxRequest(NAMESPACE, trial, spec, labels, task_dir)


@pytest.fixture
def sdk() -> FakeSdk:
    return FakeSdk()


@pytest.fixture
async def provider(sdk: FakeSdk) -> ModalProvider:
    return await ModalProvider.open(sdk, TOKEN, kill_grace_sec=0.3)


@pytest.fixture
async def sandbox(tmp_path: Path) -> ModalSandbox:
    """A ready sandbox whose execs run on this machine, in the test's directory."""
    modal_sandbox = ModalSandbox(
        FakeSdk(),
        FakeSandbox("sb-local", {}),
        "local",
        kill_grace_sec=0.3,
        response_timeout_sec=10.0,
        transfer_timeout_sec=30.0,
        private_dir=str(tmp_path / "private"),
        logs_dir=str(tmp_path / "logs"),
    )
    await modal_sandbox.wait_ready(10)
    return modal_sandbox


def alive(pid: str) -> bool:
    """Whether process `pid` runs (a zombie, or no process, does not)."""
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" not in status.read_text()


def fake(sandbox: ModalSandbox) -> FakeSandbox:
    inner: FakeSandbox = sandbox.sandbox
    return inner


# --- Connecting -------------------------------------------------------------------------------


async def test_open_signs_in_with_the_token_and_looks_up_the_app(sdk: FakeSdk) -> None:
    await ModalProvider.open(sdk, {**TOKEN, "MODAL_ENVIRONMENT": "staging"})

    assert sdk.credentials == [("ak-test", "as-very-secret")]
    assert sdk.lookups == [
        {
            "name": APP_NAME,
            "client": sdk.client,
            "environment_name": "staging",
            "create_if_missing": True,
        }
    ]


async def test_a_refused_token_is_a_start_failure_that_names_no_secret(sdk: FakeSdk) -> None:
    sdk.lookup_errors.append(modal_errors.AuthError("Token ID is malformed"))

    with pytest.raises(ProviderError) as caught:
        await ModalProvider.open(sdk, TOKEN)

    assert caught.value.error_type is ErrorType.ENVIRONMENT_START_FAILED
    assert "MODAL_TOKEN_ID" in caught.value.message
    assert "Token ID is malformed" in caught.value.message
    assert "as-very-secret" not in caught.value.message
    assert sdk.closed == 1


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({}, "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set"),
        ({"MODAL_TOKEN_ID": "ak-1"}, "MODAL_TOKEN_SECRET is not set"),
        ({"MODAL_TOKEN_SECRET": "as-1", "MODAL_TOKEN_ID": ""}, "MODAL_TOKEN_ID is not set"),
    ],
)
async def test_connect_without_a_token_names_the_missing_variables(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        await ModalProvider.connect(environ)

    assert caught.value.error_type is ErrorType.ENVIRONMENT_START_FAILED
    assert named in caught.value.message


def test_connect_without_the_sdk_says_how_to_install_it() -> None:
    program = (
        "import asyncio, sys\n"
        "sys.modules['modal'] = None\n"
        "from rollout.bridge.providers.base import ProviderError\n"
        "from rollout.bridge.providers.modal import ModalProvider\n"
        "try:\n"
        "    environ = {'MODAL_TOKEN_ID': 'a', 'MODAL_TOKEN_SECRET': 'b'}\n"
        "    asyncio.run(ModalProvider.connect(environ))\n"
        "except ProviderError as err:\n"
        "    print(err.error_type.value, err.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("environment_start_failed ")
    assert "pip install 'rollout-operator[modal]'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


# --- Starting ---------------------------------------------------------------------------------


async def test_a_sandbox_starts_from_the_registry_image_with_the_trials_settings(
    provider: ModalProvider, sdk: FakeSdk
) -> None:
    spec = spec_for(workdir="/app")
    request = request_for(spec)

    started = await provider.start(request)

    ((defined, app),) = sdk.builds
    assert defined == ("from_registry", ("debian:bookworm-slim",), {})
    assert app is sdk.app
    (create,) = sdk.creates
    name = create.pop("name")
    image = create.pop("image")
    assert name.startswith(f"{NAMESPACE}-trial-1-")
    assert image.defined == defined  # the image built (pulled) before the create
    assert create == {
        "args": (),
        "app": sdk.app,
        "tags": dict(request.labels),
        "timeout": 100 + 200 + 301 + LIFETIME_MARGIN_SEC,
        "workdir": "/app",
        "client": sdk.client,
        "cpu": (1.0, 1.0),
        "memory": (256, 256),
        "gpu": None,
    }
    assert create["tags"][LABEL_BRIDGE] == "bridge-a"
    assert started.sandbox_id == "sb-1"
    assert "modal shell sb-1" in started.describe()


@pytest.mark.parametrize(
    ("resources", "cpu", "memory", "gpu"),
    [
        ({"cpus": "500m", "memory": "2Gi"}, 0.5, 2048, None),
        ({"cpus": "2", "memory": "1G"}, 2.0, 954, None),  # 1e9 bytes, rounded up to MiB
        ({"cpus": "0.25", "memory": "512Mi", "gpus": 2}, 0.25, 512, "T4:2"),
    ],
)
async def test_resources_map_to_cores_mib_and_gpus(
    provider: ModalProvider,
    sdk: FakeSdk,
    resources: dict[str, Any],
    cpu: float,
    memory: int,
    gpu: str | None,
) -> None:
    await provider.start(request_for(spec_for(resources=resources)))

    (create,) = sdk.creates
    assert (create["cpu"], create["memory"], create["gpu"]) == ((cpu, cpu), (memory, memory), gpu)


async def test_the_gpu_type_is_the_bridges_setting(sdk: FakeSdk) -> None:
    provider = await ModalProvider.open(sdk, {**TOKEN, "ROLLOUT_MODAL_GPU_TYPE": "A10G"})

    await provider.start(request_for(spec_for(resources={"gpus": 1})))

    assert sdk.creates[0]["gpu"] == "A10G:1"


async def test_a_kept_or_very_long_trial_gets_modals_longest_lifetime(
    provider: ModalProvider, sdk: FakeSdk
) -> None:
    long_spec = spec_for().model_copy(
        update={
            "timeouts": spec_for().timeouts.model_copy(update={"agent_sec": 10 * MAX_LIFETIME_SEC})
        }
    )
    await provider.start(request_for(spec_for(preserveEnv=True)))
    await provider.start(request_for(long_spec))

    assert [create["timeout"] for create in sdk.creates] == [MAX_LIFETIME_SEC, MAX_LIFETIME_SEC]


async def test_an_unbuilt_image_is_built_from_the_tasks_dockerfile_once_per_job(
    provider: ModalProvider, sdk: FakeSdk, tmp_path: Path
) -> None:
    spec = spec_for(UNBUILT_IMAGE)

    await provider.start(request_for(spec, task_dir=tmp_path))
    await provider.start(request_for(spec, trial="trial-2", task_dir=tmp_path))

    context = tmp_path / "environment"
    assert [defined for defined, _ in sdk.builds] == [
        (
            "from_dockerfile",
            (context / "Dockerfile",),
            {"context_dir": context, "force_build": False},
        )
    ]
    assert len(sdk.creates) == 2


async def test_force_build_builds_even_a_named_image_and_asks_modal_to_skip_its_cache(
    provider: ModalProvider, sdk: FakeSdk, tmp_path: Path
) -> None:
    await provider.start(request_for(spec_for(forceBuild=True), task_dir=tmp_path))

    ((how, _, kwargs), _) = sdk.builds[0]
    assert (how, kwargs["force_build"]) == ("from_dockerfile", True)


async def test_a_build_without_task_files_fails_before_anything_starts(
    provider: ModalProvider, sdk: FakeSdk
) -> None:
    with pytest.raises(ProviderError) as caught:
        await provider.start(request_for(spec_for(UNBUILT_IMAGE)))

    assert caught.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED
    assert (sdk.builds, sdk.creates) == ([], [])


async def test_a_failed_build_fails_the_jobs_later_trials_but_a_failed_pull_is_tried_again(
    provider: ModalProvider, sdk: FakeSdk, tmp_path: Path
) -> None:
    sdk.build_errors.append(modal_errors.ImageBuildError("Image build failed: RUN false", "im-1"))
    for trial in ("trial-1", "trial-2"):
        with pytest.raises(ProviderError) as caught:
            await provider.start(
                request_for(spec_for(UNBUILT_IMAGE), trial=trial, task_dir=tmp_path)
            )
        assert caught.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED
    assert len(sdk.builds) == 1

    sdk.build_errors.append(modal_errors.ImageBuildError("manifest unknown", "im-2"))
    with pytest.raises(ProviderError):
        await provider.start(request_for(spec_for("missing:1")))
    await provider.start(request_for(spec_for("missing:1"), trial="trial-3"))
    assert len(sdk.builds) == 3


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (UNBUILT_IMAGE, ErrorType.ENVIRONMENT_BUILD_TIMEOUT),
        ("slow:1", ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED),
    ],
)
async def test_a_build_or_pull_past_the_build_timeout_fails_the_trial(
    provider: ModalProvider, sdk: FakeSdk, tmp_path: Path, image: str, expected: ErrorType
) -> None:
    sdk.build_delay_sec = 5.0
    spec = spec_for(image)
    spec = spec.model_copy(update={"timeouts": spec.timeouts.model_copy(update={"build_sec": 0.1})})
    started = time.monotonic()

    with pytest.raises(ProviderError) as caught:
        await provider.start(request_for(spec, task_dir=tmp_path))

    assert caught.value.error_type is expected
    assert "within 0.1s" in caught.value.message
    assert time.monotonic() - started < 3
    assert sdk.creates == []


@pytest.mark.parametrize(
    ("image", "error", "expected"),
    [
        (
            "missing:1",
            modal_errors.ImageBuildError("pull access denied for missing", "im-1"),
            ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
        ),
        (
            "missing:1",
            modal_errors.NotFoundError("image not found"),
            ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
        ),
        (
            "bad ref",
            modal_errors.InvalidError("invalid reference format"),
            ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
        ),
        (
            UNBUILT_IMAGE,
            modal_errors.ImageBuildError("Image build for im-1 failed", "im-1"),
            ErrorType.ENVIRONMENT_BUILD_FAILED,
        ),
        (
            UNBUILT_IMAGE,
            modal_errors.ImageBuildError("Image build for im-1 timed out.", "im-1"),
            ErrorType.ENVIRONMENT_BUILD_TIMEOUT,
        ),
        (
            UNBUILT_IMAGE,
            modal_errors.ResourceExhaustedError("build quota exceeded"),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            "debian:12",
            modal_errors.AuthError("token revoked"),
            ErrorType.ENVIRONMENT_START_FAILED,
        ),
        (
            "debian:12",
            modal_errors.ConnectionError("cannot reach api.modal.com"),
            ErrorType.ENVIRONMENT_START_FAILED,
        ),
    ],
)
async def test_image_errors_have_the_seeds_error_types(
    provider: ModalProvider,
    sdk: FakeSdk,
    tmp_path: Path,
    image: str,
    error: Exception,
    expected: ErrorType,
) -> None:
    sdk.build_errors.append(error)

    with pytest.raises(ProviderError) as caught:
        await provider.start(request_for(spec_for(image), task_dir=tmp_path))

    assert caught.value.error_type is expected
    assert str(error) in caught.value.message
    assert sdk.creates == []


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            modal_errors.ResourceExhaustedError("Insufficient capacity to create sandbox."),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            modal_errors.InvalidError("memory request of 9999999 MiB exceeds the maximum"),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (modal_errors.InvalidError("bad sandbox name"), ErrorType.ENVIRONMENT_START_FAILED),
        (modal_errors.AuthError("token expired"), ErrorType.ENVIRONMENT_START_FAILED),
        (modal_errors.PermissionDeniedError("no"), ErrorType.ENVIRONMENT_START_FAILED),
        (modal_errors.InternalError("oops"), ErrorType.ENVIRONMENT_START_FAILED),
    ],
)
async def test_create_errors_have_the_seeds_error_types(
    provider: ModalProvider, sdk: FakeSdk, error: Exception, expected: ErrorType
) -> None:
    sdk.create_errors.append(error)

    with pytest.raises(ProviderError) as caught:
        await provider.start(request_for(spec_for()))

    assert caught.value.error_type is expected
    assert str(error) in caught.value.message


# --- Owned sandboxes --------------------------------------------------------------------------


async def test_owned_lists_the_apps_sandboxes_tagged_with_the_bridge(
    provider: ModalProvider, sdk: FakeSdk
) -> None:
    mine = await provider.start(request_for(spec_for(preserveEnv=True), trial="kept"))
    other = sandbox_labels(NAMESPACE, "theirs", "bridge-test", "bridge-b")
    sdk.sandboxes["sb-other"] = FakeSandbox("sb-other", other)

    owned = await provider.owned("bridge-a")

    assert sdk.lists == [
        {
            "app_id": "ap-test",
            "tags": {LABEL_BRIDGE: "bridge-a", LABEL_COMPONENT: BRIDGE_COMPONENT},
            "client": sdk.client,
        }
    ]
    assert owned == [OwnedSandbox(mine.sandbox_id, NAMESPACE, "kept", preserved=True)]


async def test_terminate_by_id_is_done_when_the_sandbox_is_gone(
    provider: ModalProvider, sdk: FakeSdk
) -> None:
    started = await provider.start(request_for(spec_for()))

    await provider.terminate(started.sandbox_id)
    await provider.terminate("sb-gone")
    sdk.sandboxes[started.sandbox_id].terminate_errors.append(modal_errors.AuthError("denied"))
    with pytest.raises(ProviderError, match="denied"):
        await provider.terminate(started.sandbox_id)

    assert sdk.sandboxes[started.sandbox_id].terminated == 2


# --- Commands ---------------------------------------------------------------------------------


async def test_a_command_gets_its_env_cwd_and_separate_output_and_the_env_stays_off_argv(
    sandbox: ModalSandbox,
) -> None:
    secret = "s3cr3t value\nsecond line"

    result = await sandbox.run(
        'echo "$TOKEN"; echo to-stderr >&2; pwd; exit 3',
        env={"TOKEN": secret},
        cwd="/tmp",
        timeout_sec=30,
    )

    assert (result.exit_code, result.timed_out) == (3, False)
    assert result.stdout.decode().split("\n")[:3] == [*secret.split("\n"), "/tmp"]
    assert result.stderr == b"to-stderr\n"
    run = fake(sandbox).execs[-1]
    assert "s3cr3t" not in " ".join(run["args"])
    assert "s3cr3t" in run["env"]["_RS_ENV"]
    assert run["text"] is False
    assert run["timeout"] >= 30


async def test_a_command_runs_as_the_user_named_or_numbered_and_an_unknown_one_is_126(
    sandbox: ModalSandbox,
) -> None:
    by_name = await sandbox.run("id -u", user="nobody", env={"A": "1"}, timeout_sec=30)
    by_uid = await sandbox.run('id -un; echo "$A"', user="65534", env={"A": "2"}, timeout_sec=30)
    unknown = await sandbox.run("id -u", user="no-such-user", timeout_sec=30)

    assert by_name.stdout == b"65534\n", by_name
    assert by_uid.stdout == b"nobody\n2\n", by_uid
    assert unknown.exit_code == 126
    assert b"no-such-user" in unknown.stderr


async def test_a_relative_cwd_is_under_the_working_directory_and_a_missing_one_is_126(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "sub").mkdir()
    os.chdir(tmp_path)  # the stand-in's execs run in the test's working directory

    relative = await sandbox.run("pwd", cwd="sub", timeout_sec=30)
    missing = await sandbox.run("pwd", cwd="/no/such/dir", timeout_sec=30)

    assert relative.stdout.decode().strip() == str(tmp_path / "sub")
    assert missing.exit_code == 126


@pytest.mark.parametrize(("signal_number", "exit_code"), [(9, 137), (15, 143)])
async def test_a_command_killed_by_a_signal_reports_128_plus_its_number(
    sandbox: ModalSandbox, signal_number: int, exit_code: int
) -> None:
    result = await sandbox.run(f"kill -{signal_number} $$", timeout_sec=30)

    assert (result.exit_code, result.timed_out) == (exit_code, False)


async def test_a_command_that_overruns_is_killed_with_every_process_of_its_session(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    result = await sandbox.run(
        "echo before; sleep 300 & echo $!; "
        "(trap '' TERM; while :; do sleep 0.05; done) & echo $!; sleep 300",
        user="nobody",
        timeout_sec=1,
    )

    assert (result.exit_code, result.timed_out) == (None, True)
    before, *pids = result.stdout.decode().split()
    assert (before, len(pids)) == ("before", 2)
    assert 1 <= result.duration_sec < 60  # killed, not its 300 s (loose: CI runs two workers)
    assert [pid for pid in pids if alive(pid)] == []
    assert list((tmp_path / "private").iterdir()) == []  # the run's directory went with it


async def test_a_daemon_left_behind_holds_no_command_open(sandbox: ModalSandbox) -> None:
    started = time.monotonic()

    result = await sandbox.run("setsid sleep 30 & echo $!", timeout_sec=20)

    daemon = int(result.stdout)
    try:
        assert result.exit_code == 0
        assert time.monotonic() - started < 10
    finally:
        os.kill(daemon, signal.SIGKILL)


async def test_modal_failing_under_a_command_is_an_environment_failure(
    sandbox: ModalSandbox,
) -> None:
    fake(sandbox).exec_errors.append(modal_errors.SandboxTerminatedError("terminated"))

    with pytest.raises(EnvironmentFailure, match="terminated"):
        await sandbox.run("true", timeout_sec=30)


async def test_kill_all_kills_with_a_grace_and_fails_when_processes_survive(
    sandbox: ModalSandbox,
) -> None:
    answers = iter([(0, b"", b""), (1, b" 41 42\n", b"")])
    fake(sandbox).answer = lambda args: next(answers)

    await sandbox.kill_all()
    with pytest.raises(EnvironmentFailure, match="41"):
        await sandbox.kill_all()

    assert fake(sandbox).execs[-1]["args"][-2:] == ("all", "300")


# --- Readiness, stop and cost -----------------------------------------------------------------


async def test_ready_makes_the_logs_and_private_directories(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    for path, mode in (("logs/agent", 0o777), ("logs/verifier", 0o777), ("private", 0o1777)):
        assert (tmp_path / path).stat().st_mode & 0o7777 == mode


async def test_a_sandbox_that_ended_is_not_ready(tmp_path: Path) -> None:
    inner = FakeSandbox("sb-x", {})
    inner.exec_errors.append(modal_errors.SandboxTerminatedError("Sandbox terminated"))
    inner.finished = True
    sandbox = ModalSandbox(FakeSdk(), inner, "x", private_dir=str(tmp_path / "p"))

    with pytest.raises(EnvironmentNotReady, match="not running"):
        await sandbox.wait_ready(10)


async def test_stop_ends_the_sandbox_once_and_terminate_is_idempotent(
    sandbox: ModalSandbox,
) -> None:
    await sandbox.stop(0)
    await sandbox.stop(0)
    fake(sandbox).terminate_errors.append(modal_errors.NotFoundError("gone"))
    await sandbox.terminate()
    await sandbox.terminate()
    with pytest.raises(EnvironmentFailure, match="stopped"):
        await sandbox.run("true", timeout_sec=5)
    fake(sandbox).terminate_errors.append(modal_errors.InternalError("down"))
    with pytest.raises(EnvironmentFailure, match="down"):
        await sandbox.terminate()

    assert fake(sandbox).terminated == 4


async def test_the_reported_cost_is_modals_estimate(sandbox: ModalSandbox) -> None:
    assert await sandbox.reported_cost() == 0.0125


# --- Files ------------------------------------------------------------------------------------


async def test_files_go_in_at_their_path_with_an_owner_and_come_out_in_the_same_shape(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    (source / "nested").mkdir(parents=True)
    (source / "a.txt").write_text("a")
    (source / "nested" / "b.sh").write_text("#!/bin/sh\n")
    (source / "nested" / "b.sh").chmod(0o755)
    inside = tmp_path / "inside" / "tests"

    await sandbox.put_files(source, str(inside), owner="nobody")
    await sandbox.put_files(source / "a.txt", str(tmp_path / "inside" / "single.txt"))
    await sandbox.get_files(str(inside), tmp_path / "out")
    await sandbox.get_files(str(tmp_path / "inside" / "single.txt"), tmp_path / "one.txt")

    assert (inside / "a.txt").read_text() == "a"
    assert (inside / "nested" / "b.sh").stat().st_uid == 65534
    assert (tmp_path / "out" / "nested" / "b.sh").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "out" / "a.txt").read_text() == "a"
    assert (tmp_path / "one.txt").read_text() == "a"
    (_, archive), _ = fake(sandbox).copies
    assert archive.startswith(str(tmp_path / "private"))
    assert [p.name for p in (tmp_path / "private").iterdir()] == []  # archives removed


async def test_a_failing_prepare_script_fails_the_transfer_and_copies_nothing(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "file.txt").write_text("x")

    with pytest.raises(FileTransferError, match="preparing"):
        await sandbox.put_files(
            tmp_path / "file.txt", str(tmp_path / "target" / "file.txt"), prepare="exit 4"
        )

    assert not (tmp_path / "target").exists()
    assert [p.name for p in (tmp_path / "private").iterdir()] == []


async def test_a_missing_path_or_a_link_out_of_the_tree_is_not_copied_out(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok.txt").write_text("ok")
    (tree / "escape").symlink_to("/etc/passwd")

    with pytest.raises(FileTransferError, match="there is no"):
        await sandbox.get_files(str(tmp_path / "missing"), tmp_path / "out-missing")
    await sandbox.get_files(str(tree), tmp_path / "out")

    assert (tmp_path / "out" / "ok.txt").read_text() == "ok"
    escape = tmp_path / "out" / "escape"
    assert not escape.exists() or escape.is_symlink()  # a link as a link, never its target


async def test_a_copy_modal_refuses_is_a_transfer_error(
    sandbox: ModalSandbox, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("x")

    async def refuse(local_path: Path, remote_path: str) -> None:
        raise modal_errors.SandboxFilesystemPermissionError("permission denied")

    fake(sandbox).filesystem.copy_from_local = Aio(refuse)

    with pytest.raises(FileTransferError, match="permission denied"):
        await sandbox.put_files(tmp_path / "f", "/somewhere/f")
