"""The seed's error types and handling rules, each caused for real in a fake container."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from runner_kit import (
    make_spec,
    new_container_dir,
    publish_task,
    run_in,
    run_in_fake_container,
    traced,
    trial_objects,
)

from fakecontainer import FakeContainer, fake_container, requires_fake_container
from rollout.api.errors import ErrorType
from rollout.api.layout import task_archive_key
from rollout.storage import ObjectStore
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.trial import TrialReport

pytestmark = [pytest.mark.integration, requires_fake_container()]

SOLVE_HELLO = 'echo "Hello, world!" > /app/hello.txt'


def assert_error(report: TrialReport, error_type: ErrorType) -> None:
    assert report.result.error is not None, "the trial has no error"
    assert report.result.error.type is error_type, report.error_text
    assert report.result.reward is None
    assert report.upload_error is None


def assert_verifier_skipped(report: TrialReport, objects: dict[str, bytes]) -> None:
    assert report.result.durations.verifier_sec is None
    assert report.result.timestamps.verifier_started_at is None
    assert not [name for name in objects if name.startswith("logs/verifier/")]


async def test_an_install_that_exits_non_zero_is_agent_install_failed(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="broken-install",
        install='echo "fetching the agent"; echo "E: no such package" >&2; exit 4',
        execute=SOLVE_HELLO,
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.AGENT_INSTALL_FAILED)
    assert report.result.error is not None
    assert report.result.error.message == "Agent install script exited with code 4"
    objects = trial_objects(fast_retry_store, spec)
    assert objects["setup/stdout.txt"] == b"fetching the agent\n"
    assert objects["setup/stderr.txt"] == b"E: no such package\n"
    # The execute script never ran, and neither did the verifier.
    assert "command/stdout.txt" not in objects
    assert report.result.durations.agent_execution_sec is None
    assert_verifier_skipped(report, objects)
    error_txt = objects["error.txt"].decode()
    assert error_txt.startswith("agent_install_failed: Agent install script exited with code 4")
    assert "E: no such package" in error_txt
    assert objects["result.json"].decode() == report.result.to_json()
    # Whose failure it is, under the project's one key after the seed's fields.
    written = json.loads(objects["result.json"])
    assert list(written)[-1] == "rollout"
    assert traced(written["rollout"]) == {"failure_class": "agent"}


async def test_an_install_that_overruns_is_agent_install_timeout(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="slow-install",
        install="echo started; sleep 60",
        execute=SOLVE_HELLO,
        install_sec=1,
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.AGENT_INSTALL_TIMEOUT)
    assert report.result.error is not None
    assert report.result.error.message == "Agent install exceeded timeout of 1 seconds"
    setup_sec = report.result.durations.agent_setup_sec
    assert setup_sec is not None
    assert 1 <= setup_sec < 30  # killed, not its 60 s (loose: CI runs two workers)
    objects = trial_objects(fast_retry_store, spec)
    assert objects["setup/stdout.txt"] == b"started\n"
    assert_verifier_skipped(report, objects)


async def test_an_agent_that_exits_non_zero_is_agent_execution_failed_and_skips_the_verifier(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # The agent even solves the task; its exit code alone fails the trial (the seed's table).
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="quitter",
        execute=f"{SOLVE_HELLO}; exit 2",
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.AGENT_EXECUTION_FAILED)
    assert report.result.error is not None
    assert report.result.error.message == "Agent execute script exited with code 2"
    assert report.result.durations.agent_setup_sec is None  # the agent has no install script
    objects = trial_objects(fast_retry_store, spec)
    assert objects["command/stdout.txt"] == b""
    assert_verifier_skipped(report, objects)
    assert traced(json.loads(objects["result.json"])["rollout"]) == {"failure_class": "agent"}


async def test_an_agent_that_overruns_is_agent_execution_timeout_and_leaves_no_process(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    stubborn = "trap '' TERM; while :; do sleep 0.05; done"
    execute = (
        f'echo "{stubborn}" > /tmp/stubborn.sh\n'
        "bash /tmp/stubborn.sh &\n"  # a child that ignores SIGTERM
        "setsid bash /tmp/stubborn.sh &\n"  # and one that left the agent's session
        "echo started; sleep 60\n"
    )
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="sleeper",
        execute=execute,
        agent_sec=1,
        preserveEnv=True,  # keep the container's processes for inspection
    )
    with fake_container(new_container_dir(tmp_path)) as container:
        report = await run_in(container, tmp_path, spec, fast_retry_store)

        assert_error(report, ErrorType.AGENT_EXECUTION_TIMEOUT)
        assert report.result.error is not None
        assert report.result.error.message == "Agent execution exceeded timeout of 1 seconds"
        left = [p for p in container.processes() if any("stubborn" in a for a in p.argv)]
        assert left == []
        # preserveEnv: the environment was not stopped, its shim still runs.
        assert any(p.pid == 1 for p in container.processes())
    objects = trial_objects(fast_retry_store, spec)
    assert objects["command/stdout.txt"] == b"started\n"
    assert_verifier_skipped(report, objects)


@pytest.mark.parametrize(
    ("task", "error_type", "message"),
    [
        (
            "verifier-fails-after-reward",
            ErrorType.VERIFIER_FAILED,
            "Verifier (bash /tests/test.sh) exited with code 3; any reward it wrote is ignored",
        ),
        (
            "verifier-no-reward",
            ErrorType.VERIFIER_REWARD_MISSING,
            "The verifier exited with code 0 but wrote no reward: neither /tmp/rllm/reward.json, "
            "/logs/verifier/reward.json nor /logs/verifier/reward.txt exists",
        ),
        (
            "verifier-reward-abc",
            ErrorType.VERIFIER_REWARD_INVALID,
            "/logs/verifier/reward.txt holds 'abc', not a number",
        ),
    ],
)
async def test_verifier_outcomes(
    tmp_path: Path, fast_retry_store: ObjectStore, task: str, error_type: ErrorType, message: str
) -> None:
    content_hash = publish_task(fast_retry_store, task)
    spec = make_spec(fast_retry_store, task, content_hash)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, error_type)
    assert report.result.error is not None
    assert report.result.error.message == message
    assert report.result.durations.verifier_sec is not None
    objects = trial_objects(fast_retry_store, spec)
    assert objects["error.txt"].decode().startswith(f"{error_type}: {message}")
    assert "logs/verifier/stdout.txt" in objects
    # The oracle ran the task's own solution: whatever failed here is the task's.
    assert traced(json.loads(objects["result.json"])["rollout"]) == {"failure_class": "task"}


async def test_a_verifier_that_fails_after_writing_reward_1_gets_no_reward(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "verifier-fails-after-reward")
    spec = make_spec(fast_retry_store, "verifier-fails-after-reward", content_hash)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.VERIFIER_FAILED)
    objects = trial_objects(fast_retry_store, spec)
    assert objects["logs/verifier/reward.txt"] == b"1\n"  # written, and ignored
    assert json.loads(objects["result.json"])["reward"] is None
    assert "the verifier crashed after writing its reward" in objects["error.txt"].decode()


async def test_a_verifier_that_overruns_is_verifier_timeout(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "verifier-hangs")
    spec = make_spec(fast_retry_store, "verifier-hangs", content_hash, verifier_sec=1)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.VERIFIER_TIMEOUT)
    assert report.result.error is not None
    assert report.result.error.message == "Verifier exceeded timeout of 1 seconds"
    verifier_sec = report.result.durations.verifier_sec
    assert verifier_sec is not None
    assert 1 <= verifier_sec < 30  # killed, not its hang (loose: CI runs two workers)
    assert (
        trial_objects(fast_retry_store, spec)["logs/verifier/stdout.txt"] == b"verifier started\n"
    )


async def test_a_shim_that_never_becomes_ready_is_environment_start_failed(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(fast_retry_store, "hello-offline", content_hash)
    with fake_container(new_container_dir(tmp_path), command=["sleep", "600"]) as container:
        report = await run_in(container, tmp_path, spec, fast_retry_store, ready_timeout_sec=1)

    assert_error(report, ErrorType.ENVIRONMENT_START_FAILED)
    assert report.result.error is not None
    assert "did not signal ready within 1s" in report.result.error.message
    durations = report.result.durations
    assert durations.environment_setup_sec is not None
    assert durations.environment_setup_sec >= 1
    assert durations.agent_setup_sec is None
    assert durations.agent_execution_sec is None
    assert durations.verifier_sec is None
    objects = trial_objects(fast_retry_store, spec)
    assert sorted(objects) == ["error.txt", "result.json"]


async def test_a_task_archive_that_is_not_there_is_task_not_found(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    spec = make_spec(fast_retry_store, "hello-offline", "0" * 64)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.TASK_NOT_FOUND)
    assert report.result.error is not None
    assert f"s3://{fast_retry_store.bucket}/tasks/{'0' * 64}.tar.gz" in report.result.error.message
    assert report.result.durations.agent_setup_sec is None
    assert report.result.durations.agent_execution_sec is None
    assert sorted(trial_objects(fast_retry_store, spec)) == ["error.txt", "result.json"]


async def test_a_spec_without_a_task_archive_is_task_invalid(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # The operator never makes a Pod for a trial of a broken task (its spec names no archive);
    # a runner given one anyway says so rather than fetching nothing.
    spec = make_spec(fast_retry_store, "hello-offline", None)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert_error(report, ErrorType.TASK_INVALID)
    assert report.result.error is not None
    assert "has no task archive" in report.result.error.message
    assert report.result.durations.agent_execution_sec is None


async def test_a_broken_task_archive_is_task_invalid_and_no_agent_runs(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = "1" * 64
    fast_retry_store.put_bytes(task_archive_key("", content_hash), b"this is not a tar.gz")
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="marker",
        execute="echo ran > /logs/agent/ran.txt",
    )
    with fake_container(new_container_dir(tmp_path)) as container:
        report = await run_in(container, tmp_path, spec, fast_retry_store)
        assert not (container.logs_dir / "agent" / "ran.txt").exists()

    assert_error(report, ErrorType.TASK_INVALID)
    assert report.result.error is not None
    assert "not a valid tar.gz" in report.result.error.message
    assert report.result.durations.agent_execution_sec is None


async def test_a_disabled_verifier_leaves_reward_and_error_null(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(fast_retry_store, "hello-offline", content_hash, verifierDisabled=True)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None
    assert report.result.reward is None
    assert report.result.timestamps.agent_execution_ended_at is not None
    objects = trial_objects(fast_retry_store, spec)
    assert_verifier_skipped(report, objects)
    assert "error.txt" not in objects


class ContainerDiesBeforeStop(ShimEnvironment):
    """The real shim, whose container is killed just before the runner asks it to stop."""

    def __init__(self, container: FakeContainer) -> None:
        super().__init__(container.control_dir, kill_grace_sec=0.3, response_timeout_sec=1)
        self.container = container

    async def stop(self, exit_code: int = 0) -> None:
        os.kill(self.container.process.pid, signal.SIGKILL)
        self.container.process.wait(10)
        await super().stop(exit_code)


async def test_a_teardown_failure_is_recorded_and_the_reward_kept(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(fast_retry_store, "hello-offline", content_hash)
    with fake_container(new_container_dir(tmp_path)) as container:
        environment = ContainerDiesBeforeStop(container)
        report = await run_in(container, tmp_path, spec, fast_retry_store, environment=environment)

    assert report.result.reward == 1.0
    assert report.result.error is not None
    assert report.result.error.type is ErrorType.ENVIRONMENT_TEARDOWN_FAILED
    assert report.result.error.message.startswith("Stopping the environment failed:")
    assert report.result.completed
    assert not report.result.failed
    objects = trial_objects(fast_retry_store, spec)
    written = json.loads(objects["result.json"])
    assert written["reward"] == 1.0
    assert traced(written["rollout"]) == {"failure_class": "infrastructure"}
    assert objects["error.txt"].decode().startswith("environment_teardown_failed: ")


class KillAllBreaks(ShimEnvironment):
    """The real shim, but killing the agent's leftovers fails in a way nobody planned for."""

    async def kill_all(self) -> None:
        raise RuntimeError("the kill-all request went astray")


async def test_anything_unexpected_is_internal_error_and_the_trial_is_still_stored(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(fast_retry_store, "hello-offline", content_hash)
    with fake_container(new_container_dir(tmp_path)) as container:
        environment = KillAllBreaks(container.control_dir, kill_grace_sec=0.3)
        report = await run_in(container, tmp_path, spec, fast_retry_store, environment=environment)

    assert_error(report, ErrorType.INTERNAL_ERROR)
    assert report.result.error is not None
    assert report.result.error.message == (
        "Unexpected error during agent_execution: RuntimeError: the kill-all request went astray"
    )
    objects = trial_objects(fast_retry_store, spec)
    assert_verifier_skipped(report, objects)  # the agent's processes may still be running
    error_txt = objects["error.txt"].decode()
    assert "Traceback (most recent call last)" in error_txt
    assert objects["command/stdout.txt"] == b"solved\n"


async def test_a_storage_key_inside_the_jobs_name_leaves_the_name_alone(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    """On a cluster, an access key `bars` turned error.txt's `Trial: bars-smoke/...` into
    `Trial: ***-smoke/...`: names the project made are never scrubbed, secrets elsewhere are."""
    key = fast_retry_store.secrets()[0]  # the access key id
    job = f"{key}-smoke"
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(
        fast_retry_store,
        "hello-offline",
        content_hash,
        agent="leaky",
        execute=f'echo "using {key}"; exit 3',
        jobName=job,
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)
    assert_error(report, ErrorType.AGENT_EXECUTION_FAILED)
    objects = trial_objects(fast_retry_store, spec)
    error_txt = objects["error.txt"].decode()
    assert f"Trial: {job}/leaky/offline/hello-offline__1" in error_txt
    assert objects["command/stdout.txt"].decode() == "using ***\n"
    result = json.loads(objects["result.json"])
    assert key not in json.dumps(result).replace(job, "")
