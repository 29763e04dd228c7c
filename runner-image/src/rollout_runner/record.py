"""What happened in one trial, as the phases report it; turned into result.json at the end.

Errors are collected, not raised: each phase records what went wrong and the trial goes on to its
collection and teardown. The trial's `error` (in result.json) is the first error recorded, except
that a teardown error never displaces another one; every error recorded appears in error.txt.

The reward is kept only when every error recorded is `environment_teardown_failed`, the one error
type that by the seed's rules never affects the reward.

result.json records whose failure the trial's error is (`rollout.failure_class`: the agent's,
the task's or the infrastructure's, by `rollout.api.failures`), null without an error.

Timings: the trial starts with its environment setup, and that began before this process did.
In a trial Pod it began when the operator created the Pod (`began_at`, from
`rollout.api.wire.spec.POD_CREATED_ENV_VAR`): the seed counts the image pull, the container
start and the file copies as environment setup, and scheduling comes before them. So
`started_at` and `environment_setup_started_at` are that moment, and `environment_setup_sec` and
`total_sec` include the time from it to the runner's start, measured by the wall clock (the only
clock two processes share) and after that by the monotonic clock. A creation time later than the
runner's own start can only be clock skew between the operator's node and the trial's: it is
not used (the trial starts with the runner, and a note says so), so no duration is ever negative
or made up. Without one (a runner run by hand, or by an operator that does not set it) the trial
starts with the runner.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from rollout.api.additions import BuiltinRun, TokenUsage, TrialAdditions
from rollout.api.endpoint import EndpointEvaluation
from rollout.api.errors import ErrorType
from rollout.api.failures import failure_class
from rollout.api.results import (
    TrialDurations,
    TrialError,
    TrialResult,
    TrialTimestamps,
    format_timestamp,
)
from rollout.api.tracecontext import TraceContext
from rollout_runner.clock import Clock

log = logging.getLogger(__name__)


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
    began_at: InitVar[datetime | None] = None
    """When the trial began before this record was made (a trial Pod's creation); None: now."""
    try_number: int | None = None
    """Which try at the trial this is (its Pod's, from 1): result.json's `rollout.tries`."""
    started_at: datetime = field(init=False)
    ended_at: datetime | None = None
    total_sec: float | None = None
    reward: float | None = None
    rewards: dict[str, Any] | None = None
    """The reward's object, kept whole (a reward.json with several keys): `rollout.rewards`."""
    trace: TraceContext = field(default_factory=TraceContext)
    """The attempt's W3C trace, fresh for each record: `rollout.trace_id`; its agent gets it."""
    evaluation: EndpointEvaluation | None = None
    """An endpoint agent's own evaluation of the attempt: `rollout.evaluation`."""
    usage: TokenUsage | None = None
    """The agent's tokens (a model agent's, a script agent's usage.json): `rollout.usage`."""
    errors: list[RecordedError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Problems that are not trial errors (say, a log file that could not be read)."""
    timings: dict[Phase, PhaseTiming] = field(default_factory=dict)
    current_phase: Phase | None = None
    last_phase: Phase | None = None
    """The phase entered last, running or not: where an unexpected error happened."""

    def __post_init__(self, began_at: datetime | None) -> None:
        now = self.clock.now()
        # The trial's start on the monotonic clock: when it began before this process, earlier
        # than any reading the process made, by the wall-clock time between.
        self._started = self.clock.monotonic()
        self.started_at = now
        if began_at is None:
            return
        before = (now - began_at).total_seconds()
        if before < 0:
            note = (
                f"The trial's Pod was created at {format_timestamp(began_at)}, after the runner "
                f"started ({format_timestamp(now)}) by its own clock: the clocks of the "
                "operator's and the trial's nodes disagree, so the trial's timings start with "
                "the runner and leave out the Pod's scheduling, image pull and container start."
            )
            log.warning("%s", note)
            self.notes.append(note)
            return
        self.started_at = began_at
        self._started -= before

    @contextmanager
    def phase(self, phase: Phase) -> Iterator[None]:
        """Time `phase`; it ends when the block does, whether it returns or raises.

        Environment setup starts with the trial (see the module docstring).
        """
        if phase is Phase.ENVIRONMENT_SETUP:
            timing = PhaseTiming(started_at=self.started_at, started=self._started)
        else:
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

    def result(
        self,
        *,
        task: str,
        dataset: str,
        agent: str,
        attempt: int,
        builtin: BuiltinRun | None = None,
    ) -> TrialResult:
        """The trial's result.json (cost is null: the runner cannot know what a trial cost);
        `builtin`: the built-in agent it ran (`rollout.agent`), from its spec."""
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
                failure_class=failure_class(error.type, agent_name=agent) if error else None,
                tries=self.try_number,
                rewards=None if self.failed else self.rewards,
                trace_id=self.trace.trace_id,
                evaluation=self.evaluation,
                usage=self.usage,
                agent=builtin,
            ),
        )


def _seconds(value: float) -> float:
    # Milliseconds are plenty for a trial, and keep result.json readable.
    return round(max(value, 0.0), 3)
