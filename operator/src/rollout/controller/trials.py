"""RolloutTrials: the manifest of a new trial, and what to do about a trial given its Pod. Pure.

`trial_manifest` fills a RolloutTrial's spec from the RolloutJob and the task's task.toml, so that
neither the Pod renderer nor the runner ever reads the job: effective timeouts (task values after
the job's overrides and multiplier), effective resources (the job's override_cpus/memory/storage
over the task's), the image, users and working directory.

`decide` is the trial's reconcile step: from the trial (as the index has it) and its Pod (or its
absence) it returns one action. The job's reconciler applies the actions; being the only writer
of a job's trials, it never races another handler over the same trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass, failure_class
from rollout.api.layout import retry_prefix
from rollout.api.names import controller_reference
from rollout.api.plan import PlannedTrial
from rollout.api.resources import (
    API_VERSION,
    RolloutJob,
    RolloutTrial,
    StorageSpec,
    TrialConditionReason,
    TrialPhase,
)
from rollout.api.results import TrialError
from rollout.api.trial_spec import trial_spec
from rollout.api.trials import TrialKey, trial_labels
from rollout.controller.config import OperatorConfig
from rollout.controller.cost import trial_cost
from rollout.controller.index import PodEntry, TrialEntry, pod_name_for
from rollout.controller.podfields import deleted_at, runner_state
from rollout.controller.podstatus import (
    Failed,
    Finished,
    Lost,
    PodVerdict,
    Running,
    Waiting,
    classify_missing_pod,
    classify_pod,
)
from rollout.controller.prices import UnitPrices
from rollout.controller.records import (
    OperatorRecord,
    RecordCost,
    TrialPlace,
    failure_record,
    message_record,
)
from rollout.controller.trial_status import (
    failed_status,
    finished_status,
    retry_status,
    running_status,
)


def trial_manifest(
    job: RolloutJob,
    planned: PlannedTrial,
    *,
    namespace: str,
    job_uid: str,
    storage: StorageSpec,
    runner_image: str,
) -> dict[str, Any]:
    """The RolloutTrial to create: named, labelled and owned by its RolloutJob."""
    job_name = job.metadata.name or job.job_name
    spec = trial_spec(job, planned, storage=storage, runner_image=runner_image)
    return {
        "apiVersion": API_VERSION,
        "kind": RolloutTrial.resource.kind,
        "metadata": {
            "name": planned.name,
            "namespace": namespace,
            "labels": trial_labels(job_name, planned.key, planned.name),
            "ownerReferences": [controller_reference(RolloutJob.resource.kind, job_name, job_uid)],
        },
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


# --- what to do about a trial ---------------------------------------------------------------------


@dataclass(frozen=True)
class Nothing:
    """Nothing to do now (the Pod is on its way, or the trial is done)."""

    waiting: bool = False
    """True while the Pod waits in a way a grace period may end (recheck later)."""


@dataclass(frozen=True)
class KeepTry:
    """Before a trial runs again, its try `number`'s files move from the trial's prefix to
    `retries/<number>/` under it, so that the next try starts from a clean place."""

    storage: StorageSpec
    prefix: str
    number: int

    @property
    def destination(self) -> str:
        return retry_prefix(self.prefix, self.number)


@dataclass(frozen=True)
class CreatePod:
    """The trial has no Pod yet: create it (an existing one is accepted). A retry's Pod first
    has the lost try's files kept (`keep`), so that it starts from a clean place."""

    pod_name: str
    retry: int
    keep: KeepTry | None = None


@dataclass(frozen=True)
class DeletePod:
    """The trial is over; its Pod goes (unless preserveEnv)."""

    pod_name: str


@dataclass(frozen=True)
class PatchStatus:
    """Write the trial's status; a final one may also remove the Pod.

    With a `record` (the runner wrote none), the trial's result.json and error.txt are written
    first, where storage has none: the status then says where they are (`resultUri`). With a
    `cost`, the runner's result.json gets the trial's cost first (the runner cannot know it).
    """

    status: dict[str, Any]
    delete_pod: str | None = None
    final: bool = False
    durations: Mapping[str, float | None] = field(default_factory=dict)
    record: OperatorRecord | None = None
    cost: RecordCost | None = None
    """The trial's cost, to be set in the result.json its runner wrote (`records.RecordCost`)."""


@dataclass(frozen=True)
class RetryPod:
    """The Pod was lost: record the retry and remove what is left of the old Pod. The new Pod
    follows (`CreatePod`) once the old Pod's runner can no longer upload."""

    status: dict[str, Any]
    old_pod: str | None
    retry: int


TrialAction = Nothing | CreatePod | DeletePod | PatchStatus | RetryPod


def decide(
    trial: TrialEntry,
    pod: PodEntry | None,
    *,
    now: datetime,
    config: OperatorConfig,
    place: TrialPlace,
    max_infra_retries: int,
    pod_requested: bool = False,
    pod_deleted: bool = False,
    previous_pod: PodEntry | None = None,
) -> TrialAction:
    """The next step for one trial of the job, whose files are at `place`.

    `pod` is the Pod of the trial's current attempt, None when the index has none. It may be
    missing because it was just created (`pod_requested`: its watch event is on its way), never
    created (the operator stopped in between: create it), or deleted (`pod_deleted`, or the trial
    already ran in it: the Pod was lost). `previous_pod` is the Pod of the try before, when the
    index still has it: a retry's Pod waits until that one's runner can no longer upload.
    """
    if not trial.runs_in_pod or trial.deleting:
        return Nothing()
    if trial.finished:
        if pod is not None and not trial.preserve_env and not pod.deleting:
            return DeletePod(pod.name)
        return Nothing()
    if pod is None:
        if pod_requested:
            return Nothing()
        if trial.phase != TrialPhase.RUNNING and not pod_deleted:
            return _create_pod(trial, previous_pod, place, now)
        verdict: PodVerdict = classify_missing_pod()
    else:
        verdict = classify_pod(pod.body, now=now, config=config)
    return act(
        trial,
        pod,
        verdict,
        now=now,
        place=place,
        prices=config.unit_prices,
        max_infra_retries=max_infra_retries,
    )


def act(
    trial: TrialEntry,
    pod: PodEntry | None,
    verdict: PodVerdict,
    *,
    now: datetime,
    place: TrialPlace,
    prices: UnitPrices | None,
    max_infra_retries: int,
) -> TrialAction:
    """The action for a verdict on the trial's Pod (`prices`: the operator's unit prices, for
    the trial's cost)."""
    pod_name = pod.name if pod is not None else trial.current_pod_name
    removable = pod is not None and not pod.deleting
    cleanup = pod_name if removable and not trial.preserve_env else None
    cost = trial_cost(trial.cost, pod.body if pod else None, prices, now=now)

    def fail(error_type: ErrorType, message: str, **how: Any) -> PatchStatus:
        return fail_trial(
            trial.key,
            place,
            error_type,
            message,
            now,
            tries=trial.tries,
            created_at=trial.created_at,
            cost=cost,
            pod=pod,
            pod_name=pod_name,
            **how,
        )

    match verdict:
        case Waiting():
            return Nothing(waiting=True)
        case Running():
            if trial.phase == TrialPhase.RUNNING:
                return Nothing()
            return PatchStatus(running_status(pod_name, now))
        case Finished(message=message) if message is not None:
            record = None
            if message.upload_error:  # the runner's result.json may be missing: the operator's
                error_class = (
                    failure_class(message.error.type, agent_name=trial.agent)
                    if message.error
                    else None
                )
                record = message_record(
                    trial.key,
                    place,
                    message,
                    tries=trial.tries,
                    failure_class=error_class,
                    pod_name=pod_name,
                    cost=cost,
                )
            status = finished_status(
                verdict, now, pod_name=pod_name, agent_name=trial.agent, cost=cost
            )
            return PatchStatus(
                status,
                delete_pod=cleanup,
                final=True,
                durations=message.durations.model_dump(by_alias=False) if message.durations else {},
                record=record,
                cost=RecordCost(place.storage, place.result_key(trial.key), cost)
                if record is None and cost is not None
                else None,
            )
        case Finished():
            message = "The runner ended without a readable termination message."
            return fail(ErrorType.INTERNAL_ERROR, message, delete_pod=cleanup)
        case Failed(error_type=error_type, message=message):
            return fail(error_type, message, delete_pod=cleanup)
        case Lost(reason=reason):
            if trial.infra_retries < max_infra_retries:
                retry = trial.infra_retries + 1
                new_pod = pod_name_for(trial.name, retry)
                return RetryPod(
                    retry_status(retry, new_pod, reason, now, cost=cost),
                    old_pod=pod_name if removable else None,
                    retry=retry,
                )
            return fail(
                ErrorType.INTERNAL_ERROR,
                f"{reason} The trial's Pod was lost {trial.tries} times, more than the job's "
                f"maxInfraRetries ({max_infra_retries}) allows.",
                delete_pod=pod_name if removable else None,
                reason=TrialConditionReason.INFRA_RETRIES_EXHAUSTED,
            )
    raise AssertionError(f"unknown verdict {verdict!r}")  # pragma: no cover


OLD_RUNNER_MARGIN_SEC = 15.0
"""How long past its Pod's deletion time a lost try's runner is still waited for."""


def runner_may_still_write(pod: Mapping[str, Any], now: datetime) -> bool:
    """Whether a lost Pod's runner may still be writing the trial's files: it runs, and its Pod
    is not deleted yet, or its deletion time (the end of its grace period, which the runner uses
    to upload what it has) is less than `OLD_RUNNER_MARGIN_SEC` ago. A runner on a node that no
    longer answers shows as running for ever: the margin bounds the wait for it."""
    if "running" not in runner_state(pod):
        return False
    deletion = deleted_at(pod)
    return deletion is None or (now - deletion).total_seconds() < OLD_RUNNER_MARGIN_SEC


def _create_pod(
    trial: TrialEntry, previous: PodEntry | None, place: TrialPlace, now: datetime
) -> CreatePod | Nothing:
    """The trial's Pod for its current try; a retry's only once the lost try's runner can no
    longer upload into the trial's prefix (its Pod is deleted with it, and the runner gets its
    grace period), with that try's files kept first."""
    retry = trial.infra_retries
    if retry == 0:
        return CreatePod(trial.current_pod_name, 0)
    if previous is not None and runner_may_still_write(previous.body, now):
        return Nothing(waiting=True)
    keep = KeepTry(place.storage, place.prefix(trial.key), number=retry)  # the try before
    return CreatePod(trial.current_pod_name, retry, keep)


def fail_trial(
    trial: TrialKey,
    place: TrialPlace,
    error_type: ErrorType,
    message: str,
    now: datetime,
    *,
    cost: float | None,
    tries: int = 1,
    created_at: datetime | None = None,
    pod: PodEntry | None = None,
    pod_name: str | None = None,
    delete_pod: str | None = None,
    reason: str | None = None,
    class_override: FailureClass | None = None,
) -> PatchStatus:
    """The trial fails without an outcome from its runner: its final status, and the record
    (result.json, error.txt) the operator writes for it first (`cost`: what it cost, None
    without prices)."""
    error = TrialError(type=error_type, message=message)
    error_class = class_override or failure_class(error_type, agent_name=trial.agent)
    record = failure_record(
        trial,
        place,
        tries=tries,
        created_at=created_at,
        error=error,
        failure_class=error_class,
        pod=pod.body if pod is not None else None,
        pod_name=pod_name,
        ended_at=now,
        cost=cost,
    )
    status = failed_status(
        error_type,
        message,
        now,
        pod_name=pod_name,
        agent_name=trial.agent,
        reason=reason,
        class_override=error_class,
        result_uri=record.result_uri,
        cost=cost,
    )
    return PatchStatus(status, delete_pod=delete_pod, final=True, record=record)
