"""How a trial's errors, reward and timings become its result.json."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

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
    assert trial.model_dump(mode="json")["rollout"] == {  # no error; the attempt's own trace
        "failure_class": None,
        "trace_id": record.trace.trace_id,
    }


def test_every_record_has_a_fresh_w3c_trace() -> None:
    first, second = TrialRecord(StepClock()), TrialRecord(StepClock())
    assert first.trace.trace_id != second.trace.trace_id
    for record in (first, second):
        assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", record.trace.traceparent)
        assert record.trace.trace_id.strip("0")


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
    assert trial.model_dump(mode="json")["rollout"] == {
        "failure_class": "agent",
        "trace_id": record.trace.trace_id,
    }


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


# --- environment setup began before the runner did ------------------------------------------------


class FakeClock:
    """A clock that moves only when the test says so."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.elapsed = 100.0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return self.elapsed

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)
        self.elapsed += seconds


def test_a_pod_created_before_the_runner_started_counts_in_environment_setup() -> None:
    clock = FakeClock(START)
    created = START - timedelta(seconds=30)  # scheduling, image pull, container start
    record = TrialRecord(clock, began_at=created)
    clock.advance(2)  # the runner's own part of setup: waiting for the shim, fetching the task
    with record.phase(Phase.ENVIRONMENT_SETUP):
        clock.advance(3)
    with record.phase(Phase.AGENT_EXECUTION):
        clock.advance(10)
    record.finish()
    trial = result(record)
    assert trial.timestamps.started_at == created
    assert trial.timestamps.environment_setup_started_at == created
    assert trial.timestamps.environment_setup_ended_at == START + timedelta(seconds=5)
    assert trial.durations.environment_setup_sec == 35.0
    assert trial.timestamps.agent_execution_started_at == START + timedelta(seconds=5)
    assert trial.durations.agent_execution_sec == 10.0
    assert trial.durations.total_sec == 45.0
    assert trial.timestamps.ended_at == START + timedelta(seconds=15)
    assert record.notes == []


def test_without_a_creation_time_the_trial_starts_with_the_runner() -> None:
    clock = FakeClock(START)
    record = TrialRecord(clock)
    clock.advance(1)
    with record.phase(Phase.ENVIRONMENT_SETUP):
        clock.advance(3)
    record.finish()
    trial = result(record)
    assert trial.timestamps.started_at == START
    assert trial.timestamps.environment_setup_started_at == START
    assert trial.durations.environment_setup_sec == 4.0
    assert trial.durations.total_sec == 4.0
    assert record.notes == []


def test_a_creation_time_after_the_runners_start_is_clock_skew_and_not_used() -> None:
    clock = FakeClock(START)
    record = TrialRecord(clock, began_at=START + timedelta(seconds=7))
    with record.phase(Phase.ENVIRONMENT_SETUP):
        clock.advance(3)
    record.finish()
    trial = result(record)
    assert trial.timestamps.started_at == START
    assert trial.timestamps.environment_setup_started_at == START
    assert trial.durations.environment_setup_sec == 3.0
    assert trial.durations.total_sec == 3.0
    assert len(record.notes) == 1
    assert "2025-01-15T10:30:07Z" in record.notes[0]
    assert "clock" in record.notes[0]


def test_a_creation_time_in_another_timezone_is_the_same_moment() -> None:
    clock = FakeClock(START)
    created = (START - timedelta(seconds=30)).astimezone(timezone(timedelta(hours=2)))
    record = TrialRecord(clock, began_at=created)
    with record.phase(Phase.ENVIRONMENT_SETUP):
        clock.advance(1)
    record.finish()
    trial = result(record)
    assert trial.durations.environment_setup_sec == 31.0
    assert trial.model_dump(mode="json")["timestamps"]["started_at"] == "2025-01-15T10:29:30Z"
