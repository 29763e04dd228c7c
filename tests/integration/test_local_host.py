"""The host sandbox (`environment.type: local`) for real: namespaces, the shim, the runner."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from host_kit import run_runner
from nobody_kit import (
    NOBODY,
    as_nobody,
    nobody_directory,
    nobody_env,
    nobody_python,
    unprivileged_unavailable_reason,
)
from runner_kit import DATASET, JOB, make_spec, publish_task

from fakecontainer import eventually, namespace_processes
from rollout.api.errors import ErrorType
from rollout.api.results import TrialResult
from rollout.local.host import (
    HostRoot,
    HostSandbox,
    host_sandbox_unavailable,
    spawn_host_sandbox,
    start_host_sandbox,
)
from rollout.local.sandbox import SandboxStartFailed
from rollout.storage import DirectoryStore
from rollout_runner.context import ISOLATED_AGENT_USER
from rollout_runner.shim_environment import ShimEnvironment

pytestmark = pytest.mark.integration

HOST_KIT = Path(__file__).with_name("host_kit.py")


@functools.cache
def unavailable_reason() -> str | None:
    return host_sandbox_unavailable()


def requires_host_sandbox() -> pytest.MarkDecorator:
    reason = unavailable_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@pytest.fixture
def storage(tmp_path: Path) -> DirectoryStore:
    directory = tmp_path / "storage"
    directory.mkdir()
    return DirectoryStore(directory)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[HostSandbox]:
    base = tmp_path / "sandbox"
    base.mkdir()
    started = await start_host_sandbox(base, workdir=None)
    try:
        yield started
    finally:
        await started.close()


def write_spec(tmp_path: Path, store: DirectoryStore, task: str, **fields: Any) -> Path:
    spec = make_spec(store, task, publish_task(store, task), **fields)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    return spec_file


def trial_result(store: DirectoryStore, task: str, agent: str = "oracle") -> TrialResult:
    path = store.root / "jobs" / JOB / agent / DATASET / f"{task}__1" / "result.json"
    return TrialResult.model_validate_json(path.read_bytes())


def user_names(passwd: Path) -> list[str]:
    return [line.split(":", 1)[0] for line in passwd.read_text().splitlines()]


def mounts_under(base: Path) -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(f"{base}/")
    ]


def processes_in_namespace(namespace: str) -> list[int]:
    """Host pids of the processes in the pid namespace `namespace` (a /proc/*/ns/pid link)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "pid") == namespace:
                found.append(int(entry.name))
        except OSError:
            continue  # it ended while we looked
    return found


def test_a_host_sandbox_can_run_here_as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the machine's root may create namespaces; this test process is not root")
    assert host_sandbox_unavailable() is None


def test_without_unshare_the_refusal_names_type_docker(tmp_path: Path) -> None:
    # A PATH with the other tools the sandbox needs, and no unshare.
    for tool in ("mount", "setsid", "sh"):
        found = shutil.which(tool)
        assert found is not None
        (tmp_path / tool).symlink_to(found)

    message = host_sandbox_unavailable(path=str(tmp_path))

    assert message is not None
    assert "unshare" in message
    assert "environment.type: docker" in message


@requires_host_sandbox()
@pytest.mark.parametrize(
    ("task", "reward", "error_type"),
    [
        ("hello-offline", 1.0, None),
        ("verifier-fails-after-reward", None, ErrorType.VERIFIER_FAILED),
    ],
)
async def test_the_runner_runs_an_offline_task_in_a_host_sandbox(
    tmp_path: Path,
    storage: DirectoryStore,
    sandbox: HostSandbox,
    task: str,
    reward: float | None,
    error_type: ErrorType | None,
) -> None:
    spec_file = write_spec(tmp_path, storage, task)

    done = await run_runner(sandbox, storage.root, spec_file, tmp_path / "work")

    assert done.returncode == 0, done.stderr
    result = trial_result(storage, task)
    assert result.reward == reward
    assert (result.error and result.error.type) == error_type
    # The runner told the shim to exit: the sandbox ended with it.
    assert await asyncio.to_thread(sandbox.process.wait, 20) == 0


@requires_host_sandbox()
async def test_as_root_an_isolated_agents_user_is_made_in_the_sandboxs_etc_only(
    tmp_path: Path, storage: DirectoryStore, sandbox: HostSandbox
) -> None:
    if os.geteuid() != 0:
        pytest.skip("without root the sandbox has no users but root (see the unprivileged test)")
    spec_file = write_spec(tmp_path, storage, "hello-offline", isolateAgent=True)

    done = await run_runner(sandbox, storage.root, spec_file, tmp_path / "work")

    assert done.returncode == 0, done.stderr
    result = trial_result(storage, "hello-offline")
    assert result.error is None, result.error
    assert result.reward == 1.0
    assert ISOLATED_AGENT_USER in user_names(sandbox.layout.etc_upper / "passwd")
    assert ISOLATED_AGENT_USER not in user_names(Path("/etc/passwd"))


WRITE_MINE = """\
mkdir -p /logs/agent /tmp/rllm
echo "$NAME" > /logs/agent/x; echo "$NAME" > /tmp/rllm/x; echo "$NAME" > /app/x
"""


@requires_host_sandbox()
async def test_two_sandboxes_see_only_their_own_files(tmp_path: Path) -> None:
    sandboxes = []
    try:
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            sandboxes.append(await start_host_sandbox(tmp_path / name, workdir="/app"))
        envs = [ShimEnvironment(s.paths.control_dir, kill_grace_sec=0.3) for s in sandboxes]
        await asyncio.gather(*(env.wait_ready(20) for env in envs))
        writes = [
            env.run(WRITE_MINE, env={"NAME": name}, timeout_sec=20)
            for env, name in zip(envs, ("one", "two"), strict=True)
        ]
        assert [w.exit_code for w in await asyncio.gather(*writes)] == [0, 0]
        reads = [env.run("cat /logs/agent/x /tmp/rllm/x /app/x", timeout_sec=20) for env in envs]
        seen = [r.stdout.decode() for r in await asyncio.gather(*reads)]
    finally:
        for sandbox in sandboxes:
            await sandbox.close()

    assert seen == ["one\none\none\n", "two\ntwo\ntwo\n"]
    for name in ("one", "two"):
        assert (tmp_path / name / "logs" / "agent" / "x").read_text() == f"{name}\n"
        assert (tmp_path / name / "root" / "tmp" / "rllm" / "x").read_text() == f"{name}\n"
        assert (tmp_path / name / "root" / "app" / "x").read_text() == f"{name}\n"


# A background child that ignores TERM, and a foreground one: both must be gone after the timeout.
STUBBORN_TREE = """\
(trap '' TERM; exec sleep 1001) &
echo started
exec sleep 1002
"""


@requires_host_sandbox()
async def test_an_agent_timeout_kills_its_whole_process_tree(
    tmp_path: Path, storage: DirectoryStore, sandbox: HostSandbox
) -> None:
    spec_file = write_spec(
        tmp_path,
        storage,
        "hello-offline",
        agent="sleeper",
        execute=STUBBORN_TREE,
        agent_sec=1,
        preserveEnv=True,  # keep the sandbox's processes for inspection
    )

    done = await run_runner(sandbox, storage.root, spec_file, tmp_path / "work")

    assert done.returncode == 0, done.stderr
    result = trial_result(storage, "hello-offline", agent="sleeper")
    assert result.error is not None
    assert result.error.type is ErrorType.AGENT_EXECUTION_TIMEOUT
    assert sandbox.pid is not None
    left = namespace_processes(sandbox.pid)
    assert [p.argv for p in left if {"1001", "1002"} & set(p.argv)] == []
    assert any(p.pid == 1 and p.state != "Z" for p in left)  # the shim still runs


@requires_host_sandbox()
async def test_close_leaves_no_process_and_no_mount_behind(tmp_path: Path) -> None:
    base = tmp_path / "sandbox"
    base.mkdir()
    sandbox = await start_host_sandbox(base, workdir="/work/project")
    env = ShimEnvironment(sandbox.paths.control_dir)
    await env.wait_ready(20)
    # A daemon that left its command's session, as an agent's server would.
    started = await env.run("setsid sleep 1003 & echo $! > /tmp/daemon; pwd", timeout_sec=20)
    assert started.stdout == b"/work/project\n"
    assert sandbox.pid is not None
    namespace = os.readlink(f"/proc/{sandbox.pid}/ns/pid")
    await eventually(lambda: len(processes_in_namespace(namespace)) >= 2, "the daemon runs")
    # The sandbox's mounts are in its own mount namespace, never in this one.
    mountinfo = await asyncio.to_thread(Path(f"/proc/{sandbox.pid}/mountinfo").read_text)
    assert " /rollout " in mountinfo
    assert mounts_under(base) == []

    await sandbox.close()

    assert processes_in_namespace(namespace) == []
    assert mounts_under(base) == []
    assert sandbox.process.returncode is not None
    await sandbox.close()  # again: nothing to do


@requires_host_sandbox()
async def test_a_kept_sandbox_runs_on_and_describe_says_how_to_enter_it(
    tmp_path: Path, sandbox: HostSandbox
) -> None:
    await ShimEnvironment(sandbox.paths.control_dir).wait_ready(20)

    await sandbox.close(keep=True)

    assert sandbox.process.poll() is None
    description = sandbox.describe()
    enter = description.split("enter it with: ", 1)[1].split()
    inside = await asyncio.to_thread(
        subprocess.run,
        [*enter, "-c", "pwd; cat /proc/1/cmdline | tr '\\0' ' '"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.startswith("/app\n/bin/sh -c ")
    assert "rollout-shim /rollout" in inside.stdout

    await sandbox.close()

    assert sandbox.process.poll() is not None


@requires_host_sandbox()
async def test_a_sandbox_whose_mounts_fail_raises_with_its_log(tmp_path: Path) -> None:
    layout = HostRoot.create(tmp_path, "/app")
    layout.control_dir.rmdir()  # nothing to bind at /rollout

    with pytest.raises(SandboxStartFailed) as failed:
        await start_host_sandbox_from(layout)

    assert failed.value.error_type == "environment_start_failed"
    assert "ended while starting" in failed.value.message
    assert str(layout.control_dir) in failed.value.message  # mount's own error, from the log
    assert mounts_under(tmp_path) == []


async def start_host_sandbox_from(layout: HostRoot) -> HostSandbox:
    sandbox = spawn_host_sandbox(layout)
    await asyncio.to_thread(sandbox.wait_started)
    return sandbox


@pytest.mark.parametrize(
    ("workdir", "named"),
    [("app", "not an absolute path"), ("/usr/src/app", "/usr there is the host's")],
)
async def test_a_working_directory_the_sandbox_cannot_have_is_refused(
    tmp_path: Path, workdir: str, named: str
) -> None:
    with pytest.raises(SandboxStartFailed) as failed:
        await start_host_sandbox(tmp_path, workdir=workdir)
    assert named in failed.value.message


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    with nobody_directory(prefix="rollout-host-") as directory:
        yield directory


def run_as_nobody(base: Path, storage: DirectoryStore, spec_file: Path) -> dict[str, object]:
    """host_kit's trial as the user nobody: the sandbox and the runner both."""
    for path in [storage.root, *storage.root.rglob("*"), spec_file]:
        os.chown(path, NOBODY, NOBODY)
    python = nobody_python()
    assert python is not None
    done = subprocess.run(
        [*as_nobody(), python, str(HOST_KIT), str(base), str(storage.root), str(spec_file)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        cwd=base,
        env={**nobody_env(), "HOME": str(base)},
    )
    assert done.returncode == 0, done.stderr
    outcome: dict[str, object] = json.loads(done.stdout)
    return outcome


@pytest.mark.skipif(
    unprivileged_unavailable_reason() is not None, reason=unprivileged_unavailable_reason() or ""
)
def test_an_unprivileged_user_runs_the_oracle_in_a_user_namespace(nobody_dir: Path) -> None:
    (nobody_dir / "storage").mkdir()
    storage = DirectoryStore(nobody_dir / "storage")
    spec_file = write_spec(nobody_dir, storage, "hello-offline")

    outcome = run_as_nobody(nobody_dir, storage, spec_file)

    assert outcome["runner_exit"] == 0, outcome["runner_log"]
    assert outcome["sandbox_exit"] == 0
    assert outcome["leaked"] == []
    result = trial_result(storage, "hello-offline")
    assert result.error is None, result.error
    assert result.reward == 1.0
    assert mounts_under(nobody_dir) == []


@pytest.mark.skipif(
    unprivileged_unavailable_reason() is not None, reason=unprivileged_unavailable_reason() or ""
)
def test_without_root_an_isolated_agent_fails_the_setup_saying_why(nobody_dir: Path) -> None:
    (nobody_dir / "storage").mkdir()
    storage = DirectoryStore(nobody_dir / "storage")
    spec_file = write_spec(nobody_dir, storage, "hello-offline", isolateAgent=True)

    outcome = run_as_nobody(nobody_dir, storage, spec_file)

    assert outcome["runner_exit"] == 0, outcome["runner_log"]
    error = trial_result(storage, "hello-offline").error
    assert error is not None
    assert error.type is ErrorType.ENVIRONMENT_START_FAILED
    assert error.message == (
        "The environment could not be prepared: creating the agent user rollout-agent failed "
        "(exit code 2): /bin/sh: 3: cannot create /etc/passwd: Permission denied"
    )
