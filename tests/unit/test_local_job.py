"""Local mode's pure rules: which records a resumed job keeps, and which types run where."""

from __future__ import annotations

import pytest

from paths import DATA
from rollout.api.environment import EnvironmentType
from rollout.api.errors import ErrorType
from rollout.api.records import keeps_record
from rollout.api.results import TrialError, TrialResult

SEED = DATA / "seed"


def record(error: ErrorType | None, *, reward: float | None = None) -> TrialResult:
    result = TrialResult.from_json((SEED / "trial_result_error.json").read_bytes())
    return result.model_copy(
        update={
            "reward": reward,
            "error": None if error is None else TrialError(type=error, message="m"),
        }
    )


@pytest.mark.parametrize(
    ("result", "retry", "kept"),
    [
        (None, (), False),  # never ran: run it
        (record(None, reward=0.0), (), True),  # scored, even 0
        (record(ErrorType.AGENT_EXECUTION_TIMEOUT), (), True),  # the agent's failure
        (record(ErrorType.VERIFIER_FAILED), (), True),  # the task's failure
        (record(ErrorType.ENVIRONMENT_START_FAILED), (), False),  # the infrastructure's
        (record(ErrorType.INTERNAL_ERROR), (), False),
        (record(ErrorType.AGENT_EXECUTION_TIMEOUT), (ErrorType.AGENT_EXECUTION_TIMEOUT,), False),
    ],
)
def test_resume_keeps_scored_and_agent_or_task_failures_and_runs_the_rest(
    result: TrialResult | None, retry: tuple[ErrorType, ...], kept: bool
) -> None:
    assert keeps_record(result, retry) is kept


def test_local_mode_runs_docker_and_local_and_a_cluster_never_runs_local() -> None:
    assert EnvironmentType.DOCKER.refusal_locally() is None
    assert EnvironmentType.LOCAL.refusal_locally() is None
    assert "Pods need a cluster" in str(EnvironmentType.KUBERNETES.refusal_locally())
    assert "bridge" in str(EnvironmentType.MODAL.refusal_locally())
    assert "never on a cluster" in str(EnvironmentType.LOCAL.refusal_on_cluster())
    assert EnvironmentType.LOCAL.on_cluster() is EnvironmentType.LOCAL
