"""The bridge's docker provider against a real engine, reached over TCP as a remote one is.

The engine is the test engine of `engine_kit` (Podman's API service where no Docker answers),
behind a loopback forwarder (`bridge_docker_kit`); without one the tests skip and say why. The
method tests share one container; the tests that stop, kill or inspect a whole container, and
the trials, start their own.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from bridge_docker_kit import engine_tls, tcp_address
from engine_kit import READY_TIMEOUT_SEC, EngineUnderTest
from runner_kit import make_spec, publish_task, trial_objects

from loopback import free_port
from rollout.api.errors import ErrorType
from rollout.api.resources import UNBUILT_IMAGE, RolloutTrialSpec
from rollout.bridge.providers.base import ProviderError, SandboxRequest, sandbox_labels
from rollout.bridge.providers.docker import DockerProvider
from rollout.bridge.providers.docker_sandbox import DockerSandbox
from rollout.storage import ObjectStore
from rollout_runner.context import RunnerOptions
from rollout_runner.environment import EnvironmentFailure, EnvironmentNotReady, FileTransferError
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import TrialReport, run_trial

pytestmark = [pytest.mark.integration, pytest.mark.engine]

KILL_GRACE_SEC = 0.3
NAMESPACE = "team-a"
LIST_PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done"
"""Each process's command line, one a line."""
ADD_NOBODY = (
    "echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd && "
    "echo 'nogroup:x:65534:' >> /etc/group"
)


def spec_for(image: str, **fields: Any) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "bridge-test",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 1,
            "image": image,
            "resources": {"cpus": "1", "memory": "256Mi", "storage": "1G"},
            "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 60},
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def request_for(
    spec: RolloutTrialSpec,
    *,
    bridge: str = "test-bridge",
    trial: str = "trial-1",
    task_dir: Path | None = None,
) -> SandboxRequest:
    labels = sandbox_labels(NAMESPACE, trial, spec.job_name, bridge)
    return SandboxRequest(NAMESPACE, trial, spec, labels, task_dir)


@pytest.fixture(scope="module")
def address(test_engine: EngineUnderTest) -> Iterator[str]:
    with tcp_address(test_engine) as tcp:
        yield tcp


@pytest.fixture
async def provider(address: str) -> AsyncIterator[DockerProvider]:
    connected = await DockerProvider.connect(address, {}, kill_grace_sec=KILL_GRACE_SEC)
    try:
        yield connected
    finally:
        await connected.aclose()


@pytest.fixture
async def own_sandbox(
    provider: DockerProvider, test_engine: EngineUnderTest
) -> AsyncIterator[DockerSandbox]:
    """A container of the test's own, ready."""
    sandbox = await provider.start(request_for(spec_for(test_engine.image)))
    try:
        await sandbox.wait_ready(READY_TIMEOUT_SEC)
        yield sandbox
    finally:
        await sandbox.terminate()


@pytest.fixture(scope="module")
def shared(address: str, test_engine: EngineUnderTest) -> Iterator[DockerSandbox]:
    """One ready container for the tests that leave it running, with a user `nobody`.

    The sandbox holds no event loop's state, so each test's loop can drive it."""

    async def start() -> tuple[DockerProvider, DockerSandbox]:
        connected = await DockerProvider.connect(address, {}, kill_grace_sec=KILL_GRACE_SEC)
        sandbox = await connected.start(request_for(spec_for(test_engine.image), trial="shared"))
        await sandbox.wait_ready(READY_TIMEOUT_SEC)
        assert (await sandbox.run(ADD_NOBODY, timeout_sec=30)).exit_code == 0
        return connected, sandbox

    connected, sandbox = asyncio.run(start())
    try:
        yield sandbox
    finally:
        asyncio.run(sandbox.terminate())
        asyncio.run(connected.aclose())


def inspect(sandbox: DockerSandbox) -> dict[str, Any]:
    attrs: dict[str, Any] = sandbox.client.api.inspect_container(sandbox.container_id)
    return attrs


# --- Commands ---------------------------------------------------------------------------------


async def test_a_command_gets_its_env_cwd_and_separate_output_and_the_env_stays_off_argv(
    shared: DockerSandbox,
) -> None:
    secret = f"s3cr3t {secrets.token_hex(4)}\nsecond line"
    result = await shared.run(
        'echo "$TOKEN"; echo to-stderr >&2; pwd; tr "\\0" " " < /proc/$PPID/cmdline; exit 3',
        env={"TOKEN": secret},
        cwd="/tmp",
        timeout_sec=30,
    )

    assert result.exit_code == 3
    assert not result.timed_out
    lines = result.stdout.decode().split("\n")
    assert lines[:3] == [*secret.split("\n"), "/tmp"]
    assert "s3cr3t" not in lines[3]  # the wrapper's command line
    assert "sh -c" in lines[3]
    assert result.stderr == b"to-stderr\n"
    assert "s3cr3t" not in json.dumps(inspect(shared))


async def test_a_command_runs_as_the_user_named_and_an_unknown_user_is_exit_code_126(
    shared: DockerSandbox,
) -> None:
    by_name = await shared.run("id -u; id -g", user="nobody", timeout_sec=30)
    by_uid = await shared.run("id -u", user="65534", timeout_sec=30)
    default = await shared.run("id -u", timeout_sec=30)
    unknown = await shared.run("id -u", user="no-such-user", timeout_sec=30)

    assert by_name.stdout.split() == [b"65534", b"65534"], by_name
    assert by_uid.stdout == b"65534\n"
    assert default.stdout == b"0\n"
    assert unknown.exit_code == 126
    assert b"no-such-user" in unknown.stderr


@pytest.mark.parametrize(("signal_number", "exit_code"), [(9, 137), (15, 143)])
async def test_a_command_killed_by_a_signal_reports_128_plus_its_number(
    shared: DockerSandbox, signal_number: int, exit_code: int
) -> None:
    result = await shared.run(f"kill -{signal_number} $$", timeout_sec=30)

    assert (result.exit_code, result.timed_out) == (exit_code, False)


async def test_a_command_that_overruns_is_killed_with_every_process_of_its_session(
    shared: DockerSandbox,
) -> None:
    result = await shared.run(
        "echo before; sleep 300 & echo $! > /tmp/child.pid; "
        "(trap '' TERM; while :; do sleep 0.05; done) & echo $! > /tmp/stubborn.pid; sleep 300",
        user="nobody",
        timeout_sec=1,
    )

    assert result.exit_code is None
    assert result.timed_out
    assert result.stdout == b"before\n"
    assert 1 <= result.duration_sec < 60  # killed, not its 300 s (loose: CI runs two workers)
    left = await shared.run(
        "for p in $(cat /tmp/child.pid /tmp/stubborn.pid); do "
        "[ -d /proc/$p ] && grep -v '^State:.*Z' /proc/$p/status | grep ^State; done; true",
        timeout_sec=30,
    )
    assert left.stdout == b""
    # Its run directory went with it: only the listing command's own is left.
    listing = await shared.run("ls -A /.rollout-bridge", timeout_sec=30)
    assert len(listing.stdout.split()) == 1, listing


async def test_a_relative_cwd_is_under_the_working_directory_and_a_missing_one_is_126(
    shared: DockerSandbox,
) -> None:
    await shared.run("mkdir -p /sub", timeout_sec=30)

    relative = await shared.run("pwd", cwd="sub", timeout_sec=30)  # the image's WORKDIR is /
    missing = await shared.run("pwd", cwd="/no/such/dir", timeout_sec=30)

    assert relative.stdout == b"/sub\n"
    assert missing.exit_code == 126
    assert b"/no/such/dir" in missing.stderr


# --- Files ------------------------------------------------------------------------------------


async def test_files_go_in_at_their_path_with_an_owner_and_come_out_in_the_same_shape(
    shared: DockerSandbox, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a\n")
    (tree / "sub" / "b.sh").write_text("echo b\n")
    (tree / "sub" / "b.sh").chmod(0o755)
    (tree / "link").symlink_to("a.txt")
    single = tmp_path / "single.txt"
    single.write_text("one file\n")
    await shared.run("mkdir -p /data && echo kept > /data/old.txt", timeout_sec=30)

    await shared.put_files(tree, "/data", owner="nobody")
    await shared.put_files(single, "/new/dir/renamed.txt")

    listing = await shared.run(
        "cd /data && for f in old.txt a.txt sub sub/b.sh; do stat -c '%n %U %a' $f; done; "
        "readlink link; sh sub/b.sh; cat /new/dir/renamed.txt; stat -c %U /new/dir/renamed.txt",
        timeout_sec=30,
    )
    assert listing.stdout.decode().splitlines() == [
        "old.txt nobody 644",  # merged: what was there stays (and belongs to the owner now)
        "a.txt nobody 644",
        "sub nobody 755",
        "sub/b.sh nobody 755",
        "a.txt",
        "b",
        "one file",
        "root",
    ], listing

    await shared.get_files("/data", tmp_path / "out")
    await shared.get_files("/new/dir/renamed.txt", tmp_path / "copied" / "file.txt")

    out = tmp_path / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "a.txt",
        "link",
        "old.txt",
        "sub",
        "sub/b.sh",
    ]
    assert (out / "link").readlink() == Path("a.txt")
    assert (out / "sub" / "b.sh").read_text() == "echo b\n"
    assert (tmp_path / "copied" / "file.txt").read_text() == "one file\n"


async def test_a_link_out_of_the_tree_is_not_copied_out_and_a_missing_path_fails(
    shared: DockerSandbox, tmp_path: Path
) -> None:
    await shared.run(
        "mkdir -p /escape && echo ok > /escape/fine.txt && ln -sf /etc/passwd /escape/passwd "
        "&& ln -sf ../../../etc/group /escape/group",
        timeout_sec=30,
    )

    await shared.get_files("/escape", tmp_path / "out")
    with pytest.raises(FileTransferError, match="/no/such/path"):
        await shared.get_files("/no/such/path", tmp_path / "missing")

    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fine.txt"]
    assert not (tmp_path / "missing").exists()


async def test_a_failing_prepare_script_fails_the_transfer_and_copies_nothing(
    shared: DockerSandbox, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("x")

    with pytest.raises(FileTransferError, match=r"exit code 4\): not prepared"):
        await shared.put_files(
            tmp_path / "f.txt", "/prepared/f.txt", prepare="echo not prepared >&2; exit 4"
        )
    await shared.put_files(
        tmp_path / "f.txt", "/prepared/f.txt", prepare="mkdir -p /prepared && touch /prepared/ran"
    )

    assert (await shared.run("ls /prepared", timeout_sec=30)).stdout.split() == [b"f.txt", b"ran"]


# --- The container ----------------------------------------------------------------------------


async def test_kill_all_kills_every_process_but_the_first_and_commands_run_after(
    own_sandbox: DockerSandbox,
) -> None:
    started = await own_sandbox.run(
        "setsid sh -c 'trap \"\" TERM; sleep 300' & sleep 300 & echo started", timeout_sec=30
    )
    assert started.stdout == b"started\n"

    await own_sandbox.kill_all()

    processes = await own_sandbox.run(LIST_PROCESSES, timeout_sec=30)
    assert "sleep 300" not in processes.stdout.decode()
    assert "while :" in processes.stdout.decode()  # PID 1
    container = inspect(own_sandbox)
    assert container["State"]["Running"]
    assert container["Config"]["Labels"]["rollout.dev/bridge"] == "test-bridge"
    assert container["HostConfig"]["NanoCpus"] == 1_000_000_000
    assert container["HostConfig"]["Memory"] == 256 * 2**20


async def test_stop_ends_the_container_and_terminate_removes_it_any_number_of_times(
    own_sandbox: DockerSandbox, provider: DockerProvider
) -> None:
    await own_sandbox.stop(0)
    await own_sandbox.stop(0)

    assert not inspect(own_sandbox)["State"]["Running"]
    with pytest.raises(EnvironmentFailure, match="stopped"):
        await own_sandbox.run("true", timeout_sec=30)
    again = DockerSandbox(
        own_sandbox.client, own_sandbox.container_id, own_sandbox.name, own_sandbox.address
    )
    with pytest.raises(EnvironmentNotReady, match="not running"):
        await again.wait_ready(READY_TIMEOUT_SEC)

    await own_sandbox.terminate()
    await own_sandbox.terminate()
    await provider.terminate(own_sandbox.container_id)

    with pytest.raises(docker.errors.NotFound):
        inspect(own_sandbox)


async def test_a_container_removed_under_a_command_fails_it_as_an_environment_failure(
    own_sandbox: DockerSandbox, provider: DockerProvider
) -> None:
    running = asyncio.ensure_future(own_sandbox.run("sleep 300", timeout_sec=60))
    await asyncio.sleep(0.5)
    await provider.terminate(own_sandbox.container_id)

    with pytest.raises(EnvironmentFailure):
        await running


async def test_owned_finds_the_containers_of_one_bridge_running_or_not(
    provider: DockerProvider, test_engine: EngineUnderTest
) -> None:
    bridge = f"bridge-{secrets.token_hex(4)}"
    spec = spec_for(test_engine.image)
    mine = await provider.start(request_for(spec, bridge=bridge, trial="trial-a"))
    other = await provider.start(request_for(spec, bridge=f"{bridge}-other", trial="trial-b"))
    try:
        await mine.stop()
        owned = await provider.owned(bridge)
    finally:
        await mine.terminate()
        await other.terminate()

    assert [(o.sandbox_id, o.namespace, o.trial_name) for o in owned] == [
        (mine.sandbox_id, NAMESPACE, "trial-a")
    ]
    assert await provider.owned(bridge) == []


# --- Start errors -----------------------------------------------------------------------------


async def test_start_errors_have_the_seeds_error_types(
    provider: DockerProvider, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    task = tmp_path / "task"
    (task / "environment").mkdir(parents=True)
    token = secrets.token_hex(6)  # new content: a tag no earlier run built
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {test_engine.image}\nRUN echo {token} && exit 3\n"
    )

    bridge = f"bridge-{token}"
    tiny = spec_for(test_engine.image, resources={"cpus": "1", "memory": "1Ki", "storage": "1G"})

    absent = spec_for(f"localhost:{free_port()}/none:{token}")  # no registry listens there

    with pytest.raises(ProviderError) as pull:
        await provider.start(request_for(absent, bridge=bridge))
    with pytest.raises(ProviderError) as build:
        await provider.start(request_for(spec_for(UNBUILT_IMAGE), bridge=bridge, task_dir=task))
    with pytest.raises(ProviderError) as too_big:
        await provider.start(request_for(tiny, bridge=bridge))
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ProviderError) as unreachable:
        await DockerProvider.connect(address, {})

    assert pull.value.error_type is ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED, pull.value
    assert build.value.error_type is ErrorType.ENVIRONMENT_BUILD_FAILED, build.value
    assert token in build.value.message
    assert too_big.value.error_type is ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED, (
        too_big.value
    )
    assert unreachable.value.error_type is ErrorType.ENVIRONMENT_START_FAILED
    assert address in unreachable.value.message
    assert await provider.owned(bridge) == []  # nothing left behind


async def test_an_unbuilt_image_is_built_from_the_task_and_started(
    provider: DockerProvider, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    token = secrets.token_hex(6)
    (tmp_path / "environment").mkdir()
    (tmp_path / "environment" / "Dockerfile").write_text(
        f"FROM {test_engine.image}\nRUN echo {token} > /built.txt\nWORKDIR /app\n"
    )

    sandbox = await provider.start(request_for(spec_for(UNBUILT_IMAGE), task_dir=tmp_path))
    try:
        test_engine.built.append(inspect(sandbox)["Config"]["Image"])
        await sandbox.wait_ready(READY_TIMEOUT_SEC)
        result = await sandbox.run("cat /built.txt; pwd", timeout_sec=30)
    finally:
        await sandbox.terminate()

    assert result.stdout.decode().split() == [token, "/app"]


# --- Trials -----------------------------------------------------------------------------------


def trial_spec(store: ObjectStore, image: str, task: str, **fields: Any) -> RolloutTrialSpec:
    """A trial of the offline task `task` (published into `store`) in `image`, in /app."""
    content_hash = publish_task(store, task)
    return make_spec(store, task, content_hash, image=image, workdir="/app", **fields)


async def run_bridge_trial(
    provider: DockerProvider,
    spec: RolloutTrialSpec,
    store: ObjectStore,
    tmp_path: Path,
    agent_env: AgentEnv | None = None,
) -> tuple[TrialReport, dict[str, Any], str]:
    """The trial in a container of its own, as the bridge runs it: its report, and the
    container's inspection and the command lines of its processes (when it still runs: a
    trial with preserveEnv) once the trial is over."""
    sandbox = await provider.start(request_for(spec, trial=f"trial-{secrets.token_hex(3)}"))
    try:
        report = await run_trial(
            spec,
            sandbox,
            store,
            agent_env=agent_env or AgentEnv(),
            options=RunnerOptions(
                work_dir=tmp_path / "work",
                ready_timeout_sec=READY_TIMEOUT_SEC,
                upload_timeout_sec=30.0,
                housekeeping_timeout_sec=20.0,
            ),
        )
        container = inspect(sandbox)
        processes = ""
        if container["State"]["Running"]:
            listing = await sandbox.run(LIST_PROCESSES, timeout_sec=30)
            processes = listing.stdout.decode()
        return report, container, processes
    finally:
        await sandbox.terminate()


async def test_the_oracle_solves_a_task_in_a_bridge_container(
    provider: DockerProvider,
    test_engine: EngineUnderTest,
    fast_retry_store: ObjectStore,
    tmp_path: Path,
) -> None:
    spec = trial_spec(fast_retry_store, test_engine.image, "hello-offline")

    report, container, _ = await run_bridge_trial(provider, spec, fast_retry_store, tmp_path)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.upload_error is None
    objects = trial_objects(fast_retry_store, spec)
    assert json.loads(objects["result.json"])["reward"] == 1.0
    assert objects["logs/agent/oracle.log"] == b"oracle was here\n"
    assert objects["logs/verifier/reward.txt"] == b"1\n"
    assert not container["State"]["Running"]  # the trial's teardown stopped it


async def test_a_failing_verifier_is_verifier_failed(
    provider: DockerProvider,
    test_engine: EngineUnderTest,
    fast_retry_store: ObjectStore,
    tmp_path: Path,
) -> None:
    spec = trial_spec(fast_retry_store, test_engine.image, "verifier-fails-after-reward")

    report, _, _ = await run_bridge_trial(provider, spec, fast_retry_store, tmp_path)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.VERIFIER_FAILED, report.error_text
    assert report.result.reward is None
    objects = trial_objects(fast_retry_store, spec)
    assert objects["logs/verifier/reward.txt"] == b"1\n"  # written, and ignored


async def test_an_agent_that_overruns_is_agent_execution_timeout_and_leaves_no_process(
    provider: DockerProvider,
    test_engine: EngineUnderTest,
    fast_retry_store: ObjectStore,
    tmp_path: Path,
) -> None:
    token = f"tok-{secrets.token_hex(8)}"
    stubborn = "trap '' TERM; while :; do sleep 0.05; done"
    spec = trial_spec(
        fast_retry_store,
        test_engine.image,
        "hello-offline",
        agent="sleeper",
        execute=(
            f'echo "{stubborn}" > /tmp/stubborn.sh\n'
            "bash /tmp/stubborn.sh &\n"  # a child that ignores SIGTERM
            "setsid bash /tmp/stubborn.sh &\n"  # and one that left the agent's session
            'echo "started with ${#API_TOKEN} characters"; sleep 60\n'
        ),
        env=[{"name": "API_TOKEN", "value": token}],
        agent_sec=1,
        preserveEnv=True,  # keep the container's processes for inspection
    )
    agent_env = AgentEnv(values={"API_TOKEN": token}, secrets=[token])

    report, container, processes = await run_bridge_trial(
        provider, spec, fast_retry_store, tmp_path, agent_env
    )

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.AGENT_EXECUTION_TIMEOUT, report.error_text
    objects = trial_objects(fast_retry_store, spec)
    assert objects["command/stdout.txt"] == f"started with {len(token)} characters\n".encode()
    assert token not in json.dumps(container)
    assert "stubborn" not in processes
    assert "while :" in processes  # preserveEnv: the container's first process still runs


async def test_an_engine_that_verifies_tls_is_reached_with_docker_pys_certificate_variables(
    test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    """As `dockerd --tlsverify` at tcp://host:2376: the bridge's DOCKER_TLS_VERIFY and
    DOCKER_CERT_PATH (the chart's bridge.docker.tlsSecret) reach it; without a client
    certificate, or with one of another CA, no engine answers, and the trial would say where."""
    tls = engine_tls(tmp_path / "tls")
    with tcp_address(test_engine, tls.server) as address:
        verified = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tls.client_dir)}
        provider = await DockerProvider.connect(address, verified)
        try:
            sandbox = await provider.start(request_for(spec_for(test_engine.image)))
            try:
                await sandbox.wait_ready(READY_TIMEOUT_SEC)
                result = await sandbox.run("echo over-tls", timeout_sec=30)
                assert (result.exit_code, result.stdout) == (0, b"over-tls\n")
            finally:
                await sandbox.terminate()
        finally:
            await provider.aclose()
        with pytest.raises(ProviderError, match=f"no Docker engine answers at {address}"):
            await DockerProvider.connect(address, {})  # plain HTTP to a TLS port
        stranger = engine_tls(tmp_path / "stranger")  # a CA the engine does not trust
        unknown = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(stranger.client_dir)}
        with pytest.raises(ProviderError, match=f"no Docker engine answers at {address}"):
            await DockerProvider.connect(address, unknown)
