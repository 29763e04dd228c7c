"""task.toml's [environment.env] reaches the agent's and the verifier's commands, with the real
runner and the real shim: `${VAR}`s from the agent's env, and each command's own env over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_kit import make_spec, publish_task, run_in_fake_container, trial_objects

from fakecontainer import requires_fake_container
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore
from rollout_runner.spec import AgentEnv

pytestmark = [pytest.mark.integration, requires_fake_container()]

TASK = "task-env"
PRINT_ENV = (
    'printf \'GREETING=%s\\nSHARED=%s\\nFROM_JOB=%s\\n\' "$GREETING" "$SHARED" "$FROM_JOB" '
    "> /logs/agent/env.txt"
)


async def test_the_agent_and_the_verifier_see_the_task_env(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash, agent="printer", execute=PRINT_ENV)
    agent_env = AgentEnv(values={"JOB_VALUE": "42", "SHARED": "agent"})
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store, agent_env=agent_env)

    assert report.result.error is None, report.error_text
    objects = trial_objects(fast_retry_store, spec)
    # The agent's own env wins over the task's; the verifier's [verifier.env] wins over it.
    assert objects["logs/agent/env.txt"] == (
        b"GREETING=hello from the task\nSHARED=agent\nFROM_JOB=job said 42\n"
    )
    assert objects["logs/verifier/env.txt"] == (
        b"GREETING=hello from the task\nSHARED=verifier\nFROM_JOB=job said 42\n"
    )


async def test_the_oracle_sees_the_task_env_under_its_solution_env(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash)
    agent_env = AgentEnv(values={"JOB_VALUE": "7", "SHARED": "oracle agent"})
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store, agent_env=agent_env)

    assert report.result.error is None, report.error_text
    assert trial_objects(fast_retry_store, spec)["logs/agent/env.txt"] == (
        b"GREETING=hello from the task\nSHARED=solution\nFROM_JOB=job said 7\n"
    )


async def test_a_variable_the_agent_does_not_set_is_task_invalid_before_the_agent_runs(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash, agent="printer", execute=PRINT_ENV)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.TASK_INVALID
    assert report.result.error.message == (
        "The task's environment is invalid: task 'task-env': task.toml: environment.env.FROM_JOB: "
        "takes ${JOB_VALUE}, which agent 'printer' does not set: give JOB_VALUE in the agent's "
        "env (job.yaml: `JOB_VALUE: ${JOB_VALUE}`)"
    )
    assert report.result.timestamps.agent_execution_started_at is None
    assert "logs/agent/env.txt" not in trial_objects(fast_retry_store, spec)
