"""A RolloutTrial's status, as the trial's reconcile step (`rollout.controller.trials.decide`)
writes it: running, failed before its runner could report, finished (from the runner's
termination message), or restarted after its Pod was lost; and as the bridge writes it once it
has claimed a trial (`claimed_status`). Pure: each returns the merge patch.

A status with an error carries its class (`failureClass`), decided by `rollout.api.failures` as
the runner decides it for the trial's result.json.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass, failure_class
from rollout.api.resources import (
    Condition,
    ConditionStatus,
    RolloutTrialStatus,
    TrialConditionReason,
    TrialConditionType,
    TrialPhase,
)
from rollout.api.results import TrialError
from rollout.controller.podstatus import Finished, pod_phase_for_status


def _condition(
    type_: TrialConditionType, status: ConditionStatus, reason: str, message: str, now: datetime
) -> Condition:
    return Condition(
        type=type_.value,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now.replace(microsecond=0),
    )


def _dump(status: RolloutTrialStatus) -> dict[str, Any]:
    # Only what was set: a merge patch keeps the rest (e.g. infraRetries after a retry).
    return status.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


def running_status(pod_name: str, now: datetime) -> dict[str, Any]:
    """The trial's status once its runner runs."""
    return _dump(
        RolloutTrialStatus(
            phase=TrialPhase.RUNNING,
            pod_name=pod_name,
            conditions=[
                _condition(
                    TrialConditionType.POD_READY,
                    ConditionStatus.TRUE,
                    TrialConditionReason.POD_RUNNING,
                    f"Pod {pod_name} runs the trial.",
                    now,
                )
            ],
        )
    )


def claimed_status(
    identity: str, where: str, now: datetime, *, retry: int = 0, reason: str = ""
) -> dict[str, Any]:
    """The status of a trial the bridge `identity` runs on `where` (`retry`: its
    infrastructure retry, after `reason`; the count is left alone on a first try)."""
    message = f"Bridge {identity} runs the trial on {where}."
    if retry:
        message = f"{reason} Retry {retry}: {message}"
    return _dump(
        RolloutTrialStatus(
            phase=TrialPhase.RUNNING,
            infra_retries=retry,
            conditions=[
                _condition(
                    TrialConditionType.CLAIMED,
                    ConditionStatus.TRUE,
                    TrialConditionReason.BRIDGE_CLAIMED,
                    message,
                    now,
                )
            ],
        )
    )


def waiting_for_image_status(image: str, reference: str, now: datetime) -> dict[str, Any]:
    """The trial's status while the image it runs is built in the cluster (it has no Pod)."""
    return _dump(
        RolloutTrialStatus(
            phase=TrialPhase.PENDING,
            conditions=[
                _condition(
                    TrialConditionType.POD_READY,
                    ConditionStatus.FALSE,
                    TrialConditionReason.WAITING_FOR_IMAGE,
                    f"Waiting for its image {reference} (RolloutImage {image}).",
                    now,
                )
            ],
        )
    )


_FAILURE_REASONS = {
    ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED: TrialConditionReason.IMAGE_PULL_FAILED,
    ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED: TrialConditionReason.UNSCHEDULABLE,
}


def failed_status(
    error_type: ErrorType,
    message: str,
    now: datetime,
    *,
    pod_name: str | None,
    agent_name: str,
    reason: str | None = None,
    class_override: FailureClass | None = None,
    result_uri: str | None = None,
    cost: float | None = None,
) -> dict[str, Any]:
    """A trial that failed without an outcome from its runner (the Pod or the operator says why).

    `class_override` replaces the table's class where the operator knows better (`BUILD_NOT_RUN`);
    `result_uri` is the record the operator wrote for it (`rollout.controller.records`).
    """
    why = reason or _FAILURE_REASONS.get(error_type, TrialConditionReason.TRIAL_ERROR)
    return _dump(
        RolloutTrialStatus(
            phase=TrialPhase.FAILED,
            error=TrialError(type=error_type, message=message),
            failure_class=class_override or failure_class(error_type, agent_name=agent_name),
            result_uri=result_uri,
            cost=cost,
            pod_name=pod_name,
            conditions=[
                _condition(
                    TrialConditionType.FAILED,
                    ConditionStatus.TRUE,
                    why,
                    f"{error_type}: {message}",
                    now,
                )
            ],
        )
    )


def finished_status(
    verdict: Finished, now: datetime, *, pod_name: str, agent_name: str, cost: float | None = None
) -> dict[str, Any]:
    """The trial's status from its runner's termination message (which it must have: a runner
    without one failed, `trials.fail_trial`)."""
    message = verdict.message
    if message is None:
        raise ValueError("finished_status needs the runner's termination message")
    phase = pod_phase_for_status(verdict)
    error = message.error
    note = f" (uploads incomplete: {message.upload_error})" if message.upload_error else ""
    if phase == TrialPhase.SUCCEEDED:
        finished = f"The trial finished with reward {message.reward}"
        if message.rows is not None:  # a shard of data rows
            rows = message.rows
            finished = (
                f"The shard finished: {rows.get('recorded', 0)} of {rows.get('total', 0)} rows "
                f"recorded, {rows.get('scored', 0)} scored, {rows.get('failed', 0)} failed"
            )
        condition = _condition(
            TrialConditionType.COMPLETE,
            ConditionStatus.TRUE,
            TrialConditionReason.RUNNER_FINISHED,
            f"{finished}{note}.",
            now,
        )
    else:
        assert error is not None  # pod_phase_for_status fails a message only for its error
        condition = _condition(
            TrialConditionType.FAILED,
            ConditionStatus.TRUE,
            TrialConditionReason.TRIAL_ERROR,
            f"{error.type}: {error.message}{note}",
            now,
        )
    return _dump(
        RolloutTrialStatus(
            phase=phase,
            reward=message.reward,
            cost=cost,
            error=error,
            failure_class=failure_class(error.type, agent_name=agent_name) if error else None,
            durations=message.durations,
            timestamps=message.timestamps,
            result_uri=message.result_uri,
            pod_name=pod_name,
            conditions=[condition],
        )
    )


def retry_status(
    retries: int, new_pod: str, reason: str, now: datetime, *, cost: float | None = None
) -> dict[str, Any]:
    """Back to Pending in a new Pod after the old one was lost (`cost`: the tries' so far)."""
    return _dump(
        RolloutTrialStatus(
            phase=TrialPhase.PENDING,
            pod_name=new_pod,
            infra_retries=retries,
            cost=cost,
            conditions=[
                _condition(
                    TrialConditionType.POD_READY,
                    ConditionStatus.FALSE,
                    TrialConditionReason.POD_LOST,
                    f"{reason} Retry {retries} runs in Pod {new_pod}.",
                    now,
                )
            ],
        )
    )
