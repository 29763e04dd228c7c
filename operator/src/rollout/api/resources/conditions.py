"""Status conditions of RolloutJob and RolloutTrial, their types and reasons, and how to set one.

`conditions` is a list-map keyed by `type` (one condition per type), shaped like Kubernetes'
metav1.Condition. The types and reasons the operator writes are constants here, beside the model,
so that writers and readers (the CLI, `kubectl wait --for=condition=Complete`) agree.

RolloutJob condition types:

- `Valid`: True once the spec has been checked and its datasets found in storage; False with
  reason `InvalidSpec` or `DatasetNotFound` (the message says what is wrong and where). A job that
  is not valid runs nothing and ends `Failed`.
- `Running`: True while trials are being created or run.
- `Suspended`: True while `spec.suspend` holds trials back.
- `Complete`: True when every trial has finished (trials that failed are counted, they do not
  fail the job).
- `Failed`: True when the job itself cannot run (invalid spec, missing dataset, storage).

RolloutTrial condition types:

- `PodReady`: the trial's Pod exists and runs (False with `Unschedulable`, `ImagePullFailed`...,
  and `WaitingForImage` while the image it runs is built in the cluster: no Pod yet).
- `Complete`: the runner finished and the result is in storage.
- `Failed`: the trial ended with an error (reason names it; the error type is in status.error).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import AwareDatetime, Field

from rollout.api.base import ApiModel

CONDITIONS_LIST_MAP: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}
"""Schema markers for a `conditions` field: a list-map keyed by type (server-side apply merges
conditions by type instead of replacing the list)."""


class ConditionStatus(StrEnum):
    """Whether a condition holds."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class JobConditionType(StrEnum):
    """Condition types of a RolloutJob."""

    VALID = "Valid"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    COMPLETE = "Complete"
    FAILED = "Failed"


class JobConditionReason(StrEnum):
    """Reasons of RolloutJob conditions."""

    SPEC_VALID = "SpecValid"
    INVALID_SPEC = "InvalidSpec"
    DATASET_NOT_FOUND = "DatasetNotFound"
    UNSUPPORTED_ENVIRONMENT = "UnsupportedEnvironment"
    STORAGE_UNAVAILABLE = "StorageUnavailable"
    TRIALS_RUNNING = "TrialsRunning"
    SUSPENDED_BY_SPEC = "SuspendedBySpec"
    RESUMED = "Resumed"
    ALL_TRIALS_FINISHED = "AllTrialsFinished"


class TrialConditionType(StrEnum):
    """Condition types of a RolloutTrial."""

    POD_READY = "PodReady"
    CLAIMED = "Claimed"
    """A bridge controller runs the trial (environment types other than kubernetes)."""
    COMPLETE = "Complete"
    FAILED = "Failed"


class TrialConditionReason(StrEnum):
    """Reasons of RolloutTrial conditions."""

    WAITING_FOR_IMAGE = "WaitingForImage"
    POD_CREATED = "PodCreated"
    POD_RUNNING = "PodRunning"
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    POD_DELETED = "PodDeleted"
    EVICTED = "Evicted"
    POD_LOST = "PodLost"
    INFRA_RETRIES_EXHAUSTED = "InfraRetriesExhausted"
    RUNNER_FINISHED = "RunnerFinished"
    TRIAL_ERROR = "TrialError"
    BRIDGE_CLAIMED = "BridgeClaimed"
    SANDBOX_LOST = "SandboxLost"


class Condition(ApiModel):
    """One aspect of the resource's state, as Kubernetes conditions are."""

    type: str = Field(min_length=1, description="Condition type, e.g. Complete.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field("", description="CamelCase reason for the last transition.")
    message: str = Field("", description="Human-readable details.")
    last_transition_time: AwareDatetime = Field(
        description="When the status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this condition was set for."
    )


def find_condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition of that type, if any."""
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    *,
    now: datetime | None = None,
    observed_generation: int | None = None,
) -> list[Condition]:
    """`conditions` with the one of `type_` set; the others untouched and in place.

    `lastTransitionTime` moves only when the status changes, as Kubernetes expects, so setting
    the same condition again (a new message, say) does not look like a new transition.
    """
    when = (now or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    old = find_condition(conditions, type_)
    changed_at = old.last_transition_time if old and old.status == status else when
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=changed_at,
        observed_generation=observed_generation,
    )
    if old is None:
        return [*conditions, new]
    return [new if c.type == type_ else c for c in conditions]
