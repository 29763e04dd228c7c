"""A trial's record when its runner could not write one: the operator's result.json and error.txt.

The runner writes a trial's record (`<trial>/result.json`, and `error.txt` with an error) in the
common case. Some trials end without a runner that could: the image would not pull, the Pod never
got a node or could not start, the runner died without a word, the trial's Pod was lost more
often than the job's retries allow, the image would need a build, or the runner's uploads failed.
For those the operator writes the record itself, from what it knows: the error it decided (the
same one the trial's status gets), the times it saw (the Pod's creation, the end), the tries, and
for a runner whose uploads failed, the outcome from its termination message.

Pure: `failure_record` and `message_record` build an `OperatorRecord`; `jobexec` writes it with
`put_new` (an object already there, the runner's or an earlier write's, is kept) before the status
patch that finishes the trial and carries `resultUri`. So a record is written once, across
operator restarts too, and costs no API write of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.api.additions import TrialAdditions
from rollout.api.failures import FailureClass
from rollout.api.layout import ERROR_TXT, RESULT_JSON, s3_uri, trial_prefix
from rollout.api.records import failed_result, record_error_text
from rollout.api.resources import StorageSpec
from rollout.api.results import TrialDurations, TrialError, TrialResult, TrialTimestamps
from rollout.api.trials import TrialKey
from rollout.api.wire.termination import TerminationMessage
from rollout.controller.podfields import created_at as pod_created_at
from rollout.controller.podfields import runner_started

WRITTEN_BY_OPERATOR = (
    "The operator wrote this record: the trial's runner could not write one (it never ran, or "
    "it ended without its files reaching storage)."
)


@dataclass(frozen=True)
class TrialPlace:
    """Where a job's trials keep their files: the job's storage and its name there."""

    storage: StorageSpec
    job_name: str
    written_by: str = WRITTEN_BY_OPERATOR
    """error.txt's note on who wrote a record there (the bridge's records say so)."""

    def prefix(self, trial: TrialKey) -> str:
        """`<prefix>/jobs/<job>/<agent>/<dataset>/<task>__<n>/`."""
        return trial_prefix(
            self.storage.prefix or "",
            self.job_name,
            trial.agent,
            trial.dataset,
            trial.task,
            trial.attempt,
        )

    def result_key(self, trial: TrialKey) -> str:
        """The key of the trial's result.json."""
        return self.prefix(trial) + RESULT_JSON

    def result_uri(self, trial: TrialKey) -> str:
        """The s3:// URI of the trial's result.json."""
        return s3_uri(self.storage.bucket, self.result_key(trial))


@dataclass(frozen=True)
class RecordCost:
    """The cost of a trial whose runner wrote its result.json: the runner cannot know it (the
    Pod's start on its node and the prices are the operator's), so the operator sets it there."""

    storage: StorageSpec
    result_key: str
    cost: float


@dataclass(frozen=True)
class OperatorRecord:
    """The files the operator writes for a trial: result.json, and error.txt with an error."""

    storage: StorageSpec
    prefix: str
    result: TrialResult
    error_text: str | None

    @property
    def result_key(self) -> str:
        return self.prefix + RESULT_JSON

    @property
    def error_key(self) -> str:
        return self.prefix + ERROR_TXT

    @property
    def result_uri(self) -> str:
        return s3_uri(self.storage.bucket, self.result_key)


def failure_record(
    trial: TrialKey,
    place: TrialPlace,
    *,
    tries: int,
    created_at: datetime | None,
    error: TrialError,
    failure_class: FailureClass,
    pod: Mapping[str, Any] | None,
    pod_name: str | None,
    ended_at: datetime,
    cost: float | None = None,
    in_setup: bool = False,
) -> OperatorRecord:
    """The record of a trial that ended without its runner's: `error` at `ended_at`.

    The trial started when its (current) Pod was created, or, with no Pod known, when the trial
    was (`created_at`); it was in environment setup throughout while the runner never ran (or,
    `in_setup`, while it waited for its image to be built, with no Pod yet).
    """
    result = failed_result(
        trial,
        started=pod_created_at(pod) or created_at or ended_at,
        ended=ended_at,
        in_setup=in_setup or (pod is not None and not runner_started(pod)),
        error=error,
        failure_class=failure_class,
        tries=tries,
        cost=cost,
    )
    return OperatorRecord(
        place.storage,
        place.prefix(trial),
        result,
        error_text(place, trial, error, tries=tries, pod_name=pod_name),
    )


def message_record(
    trial: TrialKey,
    place: TrialPlace,
    message: TerminationMessage,
    *,
    tries: int,
    failure_class: FailureClass | None,
    pod_name: str,
    cost: float | None = None,
) -> OperatorRecord:
    """The record of a trial whose runner finished but whose files did not all reach storage:
    the outcome from its termination message (which says why the uploads failed)."""
    result = TrialResult(
        task_name=trial.task,
        dataset_name=trial.dataset,
        agent_name=trial.agent,
        attempt=trial.attempt,
        reward=message.reward,
        cost=cost,
        error=message.error,
        durations=message.durations or TrialDurations(),
        timestamps=message.timestamps or TrialTimestamps(),
        rollout=TrialAdditions(failure_class=failure_class, tries=tries),
    )
    text = None
    if message.error is not None:  # error.txt only with an error, as the seed has it
        uploads = f"The runner's uploads failed: {message.upload_error}"
        text = error_text(
            place,
            trial,
            message.error,
            tries=tries,
            pod_name=pod_name,
            notes=[uploads] if message.upload_error else [],
        )
    return OperatorRecord(place.storage, place.prefix(trial), result, text)


def error_text(
    place: TrialPlace,
    trial: TrialKey,
    error: TrialError,
    *,
    tries: int,
    pod_name: str | None,
    notes: Sequence[str] = (),
) -> str:
    """error.txt as the operator writes it: the error, the trial, its Pod and tries, and who
    wrote it (the runner's error.txt has the same first lines)."""
    details = [f"Pod: {pod_name}"] if pod_name else []
    if tries > 1:
        details.append(f"Tries: {tries} (the earlier ones' files are under retries/)")
    return record_error_text(
        place.job_name, trial, error, details=details, notes=notes, written_by=place.written_by
    )
