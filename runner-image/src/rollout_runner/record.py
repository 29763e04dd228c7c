"""What happened in one trial, as the phases report it; turned into result.json at the end.

Errors are collected, not raised: each phase records what went wrong and the trial goes on to its
collection and teardown. The trial's `error` (in result.json) is the first error recorded, except
that a teardown error never displaces another one; every error recorded appears in error.txt.

The reward is kept only when every error recorded is `environment_teardown_failed`, the one error
type that by the seed's rules never affects the reward.

result.json records whose failure the trial's error is (`rollout.failure_class`: the agent's,
the task's or the infrastructure's, by `rollout.api.failures`), null without an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from rollout.api.additions import TrialAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import failure_class
from rollout.api.results import TrialDurations, TrialError, TrialResult, TrialTimestamps
from rollout_runner.clock import Clock


class Phase(StrEnum):
    """The timed phases of result.json (`<phase>_sec`, `<phase>_started_at`, ...)."""

    ENVIRONMENT_SETUP = "environment_setup"
    AGENT_SETUP = "agent_setup"
    AGENT_EXECUTION = "agent_execution"
    VERIFIER = "verifier"


@dataclass
class PhaseTiming:
    started_at: datetime
    started: float
    ended_at: datetime | None = None
    duration_sec: float | None = None


@dataclass(frozen=True)
class RecordedError:
    """One error: its type and message (for result.json) and detail for error.txt only."""

    type: ErrorType
    message: str
    phase: str | None = None
    detail: str = ""


@dataclass
class TrialRecord:
    """The trial's timings, errors and reward, filled in by the phases."""

    clock: Clock
    started_at: datetime = field(init=False)
    ended_at: datetime | None = None
    total_sec: float | None = None
    reward: float | None = None
    errors: list[RecordedError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Problems that are not trial errors (say, a log file that could not be read)."""
    timings: dict[Phase, PhaseTiming] = field(default_factory=dict)
    current_phase: Phase | None = None
    last_phase: Phase | None = None
    """The phase entered last, running or not: where an unexpected error happened."""

    def __post_init__(self) -> None:
        self.started_at = self.clock.now()
        self._started = self.clock.monotonic()

    @contextmanager
    def phase(self, phase: Phase) -> Iterator[None]:
        """Time `phase`; it ends when the block does, whether it returns or raises."""
        timing = PhaseTiming(started_at=self.clock.now(), started=self.clock.monotonic())
        self.timings[phase] = timing
        self.current_phase = self.last_phase = phase
        try:
            yield
        finally:
            timing.ended_at = self.clock.now()
            timing.duration_sec = _seconds(self.clock.monotonic() - timing.started)
            self.current_phase = None

    def fail(self, error_type: ErrorType, message: str, detail: str = "") -> None:
        phase = self.current_phase.value if self.current_phase else None
        self.errors.append(RecordedError(error_type, message, phase, detail))

    @property
    def failed(self) -> bool:
        """An error other than a teardown error: later phases must not run."""
        return any(e.type is not ErrorType.ENVIRONMENT_TEARDOWN_FAILED for e in self.errors)

    @property
    def error(self) -> RecordedError | None:
        """The trial's error in result.json (see the module docstring)."""
        for error in self.errors:
            if error.type is not ErrorType.ENVIRONMENT_TEARDOWN_FAILED:
                return error
        return self.errors[0] if self.errors else None

    def finish(self) -> None:
        if self.ended_at is None:
            self.ended_at = self.clock.now()
            self.total_sec = _seconds(self.clock.monotonic() - self._started)

    def result(self, *, task: str, dataset: str, agent: str, attempt: int) -> TrialResult:
        """The trial's result.json (cost is null: the runner cannot know what a trial cost)."""
        error = self.error

        def timing(phase: Phase) -> PhaseTiming | None:
            return self.timings.get(phase)

        def sec(phase: Phase) -> float | None:
            t = timing(phase)
            return t.duration_sec if t else None

        def start(phase: Phase) -> datetime | None:
            t = timing(phase)
            return t.started_at if t else None

        def end(phase: Phase) -> datetime | None:
            t = timing(phase)
            return t.ended_at if t else None

        return TrialResult(
            task_name=task,
            dataset_name=dataset,
            agent_name=agent,
            attempt=attempt,
            reward=None if self.failed else self.reward,
            cost=None,
            error=TrialError(type=error.type, message=error.message) if error else None,
            durations=TrialDurations(
                total_sec=self.total_sec,
                environment_setup_sec=sec(Phase.ENVIRONMENT_SETUP),
                agent_setup_sec=sec(Phase.AGENT_SETUP),
                agent_execution_sec=sec(Phase.AGENT_EXECUTION),
                verifier_sec=sec(Phase.VERIFIER),
            ),
            timestamps=TrialTimestamps(
                started_at=self.started_at,
                environment_setup_started_at=start(Phase.ENVIRONMENT_SETUP),
                environment_setup_ended_at=end(Phase.ENVIRONMENT_SETUP),
                agent_setup_started_at=start(Phase.AGENT_SETUP),
                agent_setup_ended_at=end(Phase.AGENT_SETUP),
                agent_execution_started_at=start(Phase.AGENT_EXECUTION),
                agent_execution_ended_at=end(Phase.AGENT_EXECUTION),
                verifier_started_at=start(Phase.VERIFIER),
                verifier_ended_at=end(Phase.VERIFIER),
                ended_at=self.ended_at,
            ),
            rollout=TrialAdditions(
                failure_class=failure_class(error.type, agent_name=agent) if error else None
            ),
        )


def _seconds(value: float) -> float:
    # Milliseconds are plenty for a trial, and keep result.json readable.
    return round(max(value, 0.0), 3)
