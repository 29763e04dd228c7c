"""A trial's record written by someone other than its runner: the operator, when the runner never
ran or its files did not reach storage, and local mode, when a trial's sandbox did not start or
its runner died. Pure builders of the seed's result.json and of error.txt, so that both writers
give such a trial the same fields and the same first lines as the runner's own record.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from rollout.api.additions import TrialAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.results import TrialDurations, TrialError, TrialResult, TrialTimestamps
from rollout.api.trials import TrialKey


def keeps_record(result: TrialResult | None, retry: Collection[ErrorType] = ()) -> bool:
    """Whether a trial's record stays when its job is resumed, or its shard runs again: it was
    scored, or failed for a reason of the agent's or the task's and not with an error type in
    `retry` (the ones the user names). No record, or an infrastructure failure: run it again."""
    if result is None:
        return False
    if result.error is None:
        return True
    if result.error.type in retry:
        return False
    return result.failure_class is not FailureClass.INFRASTRUCTURE


def tries_so_far(record: TrialResult | None, *, own_files: bool, kept: int) -> int:
    """How many tries a trial that runs again (resumed) has had: `kept`, the highest number
    under its `retries/`, and, when files are at the trial's own paths, the try they are from
    (its record's `rollout.tries`; one more than `kept` at least), which then moves to
    `retries/<that number>/`. Its next try is this plus one."""
    if not own_files:
        return kept
    done = (record.rollout.tries if record is not None and record.rollout else None) or 1
    return max(done, kept + 1)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max((end - start).total_seconds(), 0.0), 3)


def failed_result(
    trial: TrialKey,
    *,
    started: datetime,
    ended: datetime,
    in_setup: bool,
    error: TrialError,
    failure_class: FailureClass,
    tries: int | None,
    cost: float | None = None,
) -> TrialResult:
    """The result.json of a trial that ended with `error` and no record of its runner's.

    `in_setup`: the runner never started, so the whole trial was environment setup (scheduling,
    image pull or build, container start); once it ran, which phases it went through is the
    runner's to say, and only the trial's own start and end are given.
    """
    started = min(started, ended)
    setup_started, setup_ended = (started, ended) if in_setup else (None, None)
    return TrialResult(
        task_name=trial.task,
        dataset_name=trial.dataset,
        agent_name=trial.agent,
        attempt=trial.attempt,
        reward=None,
        cost=cost,
        error=error,
        durations=TrialDurations(
            total_sec=_seconds(started, ended),
            environment_setup_sec=_seconds(setup_started, setup_ended),
        ),
        timestamps=TrialTimestamps(
            started_at=started,
            environment_setup_started_at=setup_started,
            environment_setup_ended_at=setup_ended,
            ended_at=ended,
        ),
        rollout=TrialAdditions(failure_class=failure_class, tries=tries),
    )


def record_error_text(
    job_name: str,
    trial: TrialKey,
    error: TrialError,
    *,
    details: Sequence[str] = (),
    notes: Sequence[str] = (),
    written_by: str,
) -> str:
    """error.txt: the error, the trial, `details` (its Pod, its tries...), then `notes` and who
    wrote it (the runner's error.txt has the same first lines)."""
    lines = [
        f"{error.type}: {error.message}",
        "",
        f"Trial: {job_name}/{trial.agent}/{trial.dataset}/{trial.task}__{trial.attempt}",
        *details,
        "",
        *notes,
        written_by,
    ]
    return "\n".join(lines) + "\n"
