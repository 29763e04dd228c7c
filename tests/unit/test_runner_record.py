"""How a trial's errors, reward and timings become its result.json."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rollout.api.errors import ErrorType
from rollout.api.results import TrialResult
from rollout_runner.record import Phase, TrialRecord

START = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


class StepClock:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.ticks = 0

    def now(self) -> datetime:
        self.ticks += 1
        return START + timedelta(seconds=self.ticks)

    def monotonic(self) -> float:
        self.ticks += 1
        return float(self.ticks)


def result(record: TrialRecord) -> TrialResult:
    return record.result(task="t", dataset="d", agent="a", attempt=2)


def test_phases_are_timed_and_unrun_ones_stay_null() -> None:
    record = TrialRecord(StepClock())
    with record.phase(Phase.ENVIRONMENT_SETUP):
        pass
    with record.phase(Phase.VERIFIER):
        record.reward = 0.5
    record.finish()
    trial = result(record)
    assert trial.reward == 0.5
    assert trial.error is None
    assert trial.cost is None
    assert trial.durations.environment_setup_sec == 2.0  # monotonic read at start and end
    assert trial.durations.agent_setup_sec is None
    assert trial.durations.agent_execution_sec is None
    assert trial.timestamps.agent_setup_started_at is None
    assert trial.timestamps.started_at is not None
    assert trial.timestamps.ended_at is not None
    assert trial.timestamps.started_at < trial.timestamps.verifier_started_at  # type: ignore[operator]
    assert trial.attempt == 2
    assert trial.model_dump(mode="json")["rollout"] == {"failure_class": None}  # no error


def test_an_error_records_the_phase_it_happened_in_and_drops_the_reward() -> None:
    record = TrialRecord(StepClock())
    with record.phase(Phase.VERIFIER):
        record.reward = 1.0
        record.fail(ErrorType.VERIFIER_FAILED, "exit 3")
    record.finish()
    assert record.errors[0].phase == "verifier"
    trial = result(record)
    assert trial.reward is None
    assert trial.error is not None
    assert trial.error.type is ErrorType.VERIFIER_FAILED
    assert trial.model_dump(mode="json")["rollout"] == {"failure_class": "agent"}


def test_a_teardown_error_keeps_the_reward() -> None:
    record = TrialRecord(StepClock())
    record.reward = 1.0
    record.fail(ErrorType.ENVIRONMENT_TEARDOWN_FAILED, "stop failed")
    assert not record.failed
    trial = result(record)
    assert trial.reward == 1.0
    assert trial.error is not None
    assert trial.error.type is ErrorType.ENVIRONMENT_TEARDOWN_FAILED
    assert trial.completed


def test_a_teardown_error_never_displaces_the_trials_error() -> None:
    record = TrialRecord(StepClock())
    record.fail(ErrorType.ENVIRONMENT_TEARDOWN_FAILED, "stop failed")
    record.fail(ErrorType.AGENT_EXECUTION_TIMEOUT, "too slow")
    record.fail(ErrorType.INTERNAL_ERROR, "later")
    error = record.error
    assert error is not None
    assert error.type is ErrorType.AGENT_EXECUTION_TIMEOUT
    assert result(record).failed
