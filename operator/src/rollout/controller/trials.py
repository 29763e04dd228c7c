"""RolloutTrials: the manifest of a new trial, and what to do about a trial given its Pod. Pure.

`trial_manifest` fills a RolloutTrial's spec from the RolloutJob and the task's task.toml, so that
neither the Pod renderer nor the runner ever reads the job: effective timeouts (task values after
the job's overrides and multiplier), effective resources (the job's override_cpus/memory/storage
over the task's), the image, users and working directory.

`decide` is the trial's reconcile step: from the trial (as the index has it), its Pod (or its
absence) and, for a trial whose image is built in the cluster, its RolloutImage, it returns one
action. Such a trial gets no Pod until its image is Ready: meanwhile it stays Pending, its status
says it waits (once), and a failed build fails it with the build's error and the end of its log.
The job's reconciler applies the actions; being the only writer
of a job's trials, it never races another handler over the same trial.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.failures import BUILD_NOT_RUN, FailureClass, failure_class
from rollout.api.layout import build_log_key, parse_s3_uri, retry_prefix
from rollout.api.names import LABEL_ENVIRONMENT, controller_reference
from rollout.api.plan import PlannedTrial
from rollout.api.resources import (
    API_VERSION,
    ImageReason,
    RolloutJob,
    RolloutTrial,
    StorageSpec,
    TrialConditionReason,
    TrialPhase,
)
from rollout.api.results import TrialError
from rollout.api.rowrun import RowItem
from rollout.api.trial_spec import trial_spec
from rollout.api.trials import TrialKey, trial_labels
from rollout.api.wire.termination import RunnerTimes
from rollout.controller.builds import ImageBuild
from rollout.controller.config import OperatorConfig
from rollout.controller.cost import trial_cost
from rollout.controller.index import ImageEntry, PodEntry, TrialEntry, pod_name_for
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
    waiting_for_image_status,
)


def trial_manifest(
    job: RolloutJob,
    planned: PlannedTrial,
    *,
    namespace: str,
    job_uid: str,
    storage: StorageSpec,
    runner_image: str,
    build: ImageBuild | None = None,
    rows_image: str | None = None,
    earlier_tries: int = 0,
    items: Sequence[RowItem] | None = None,
) -> dict[str, Any]:
    """The RolloutTrial to create: named, labelled and owned by its RolloutJob (`build`: its
    image is built in the cluster). A resumed job's trial that runs again: the tries it had
    (`earlier_tries`), or a shard's rows that run (`items`; None: all)."""
    job_name = job.metadata.name or job.job_name
    built = (build.pull_image, build.name) if build is not None else None
    spec = trial_spec(
        job,
        planned,
        storage=storage,
        runner_image=runner_image,
        built=built,
        rows_image=rows_image,
        items=items,
    )
    if earlier_tries:
        spec = spec.model_copy(update={"earlier_tries": earlier_tries})
    return {
        "apiVersion": API_VERSION,
        "kind": RolloutTrial.resource.kind,
        "metadata": {
            "name": planned.name,
            "namespace": namespace,
            "labels": {
                **trial_labels(job_name, planned.key, planned.name),
                LABEL_ENVIRONMENT: spec.environment_type.value,
            },
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
    due_in: float | None = None
    """Seconds until something is due for the waiting trial (its Running status): look again
    then at the latest."""


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
    has the lost try's files kept (`keep`), so that it starts from a clean place.

    A trial whose image was built in the cluster runs `image` (pinned to its digest), and its
    environment setup started when the trial was made (`setup_since`): the build was part of it.
    """

    pod_name: str
    retry: int
    keep: KeepTry | None = None
    image: str | None = None
    setup_since: datetime | None = None
    check: TryCheck | None = None
    """Whether this try ran already, its Pod gone unseen: then `check.if_ran`, not a Pod."""


@dataclass(frozen=True)
class CopyBuildLog:
    """Copy a failed build's log next to a job that waited for it (`jobs/<job>/builds/`), where
    it is not already: the build may have been asked for by another job."""

    storage: StorageSpec
    source: str
    """The log's s3:// URI."""
    key: str
    """Where this job keeps it."""


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
    runner: RunnerTimes | None = None
    """When the runner did what (its termination message's), for the operator's metrics."""
    record: OperatorRecord | None = None
    cost: RecordCost | None = None
    """The trial's cost, to be set in the result.json its runner wrote (`records.RecordCost`)."""
    build_log: CopyBuildLog | None = None
    """A failed build's log to keep beside the job first (the trial failed for it)."""


@dataclass(frozen=True)
class RetryPod:
    """The Pod was lost: record the retry and remove what is left of the old Pod. The new Pod
    follows (`CreatePod`) once the old Pod's runner can no longer upload."""

    status: dict[str, Any]
    old_pod: str | None
    retry: int


@dataclass(frozen=True)
class TryCheck:
    """A Pod about to be made for a trial whose try may have run already: its Pod made, then
    deleted while the operator was not watching (stopped, or its watch away long enough to list
    again), before the trial's status said Running (`running_status_after_sec`). Neither the
    trial nor the API remembers that Pod then; storage does, when its runner wrote anything
    (a stopped runner writes its result.json and uploads what it has):

    - a trial's first Pod (`since` set): any file at the trial's own paths written since the
      trial was made (less `trial_files.CLOCK_MARGIN`: storage's clock is not the API's);
      files of an earlier job of the same name are older;
    - a retry's Pod: a result.json there saying it is this try (`try_number`); files without
      one are the try before's, still to be kept under `retries/` (`KeepTry`).

    When it ran, the executor does `if_ran` instead of making the Pod: the lost Pod's retry
    (its files are kept by the retry's `KeepTry`), or the trial's failure past its budget."""

    storage: StorageSpec
    prefix: str
    try_number: int
    since: datetime | None
    if_ran: RetryPod | PatchStatus


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
    previous_gone_running_sec: float | None = None,
    image: ImageEntry | None = None,
    stale_before: datetime | None = None,
) -> TrialAction:
    """The next step for one trial of the job, whose files are at `place`.

    `pod` is the Pod of the trial's current attempt, None when the index has none. It may be
    missing because it was just created (`pod_requested`: its watch event is on its way), never
    created (the operator stopped in between: create it), or deleted (`pod_deleted`, or the trial
    already ran in it: the Pod was lost). `previous_pod` is the Pod of the try before, when the
    index still has it: a retry's Pod waits until that one's runner can no longer upload. One
    that went from the API with its runner running (`previous_gone_running_sec` ago: force-
    deleted, its node gone) is waited for `OLD_RUNNER_MARGIN_SEC` after it went.

    `image` is the RolloutImage of a trial whose image is built in the cluster (None while there
    is none); one that failed before `stale_before` (the job's creation) failed for another job
    and is being built again for this one.
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
            return _new_pod(
                trial,
                now=now,
                config=config,
                place=place,
                max_infra_retries=max_infra_retries,
                previous_pod=previous_pod,
                previous_gone_running_sec=previous_gone_running_sec,
                image=image,
                stale_before=stale_before,
            )
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
        running_status_after=config.running_status_after_sec,
    )


def _new_pod(
    trial: TrialEntry,
    *,
    now: datetime,
    config: OperatorConfig,
    place: TrialPlace,
    max_infra_retries: int,
    previous_pod: PodEntry | None,
    previous_gone_running_sec: float | None,
    image: ImageEntry | None,
    stale_before: datetime | None,
) -> TrialAction:
    """A trial with no Pod that has not run yet, as far as the index knows (`decide`): its Pod,
    once the try before's runner can no longer write and, for an image built in the cluster,
    once the image is Ready; made only if storage shows this try did not run (`TryCheck`)."""
    action: TrialAction
    if trial.image_build is None:
        action = _create_pod(trial, place)
    else:
        action = _when_image_ready(trial, image, place, now, config.unit_prices, stale_before)
    if not isinstance(action, CreatePod):
        return action
    waiting = _previous_runner_wait(trial, previous_pod, previous_gone_running_sec, now)
    if waiting is not None:
        return waiting
    if trial.shard:
        return action  # its rows are kept or run again row by row (`shards`): no check
    lost = act(
        trial,
        None,
        Lost(UNSEEN_LOSS),
        now=now,
        place=place,
        prices=config.unit_prices,
        max_infra_retries=max_infra_retries,
    )
    assert isinstance(lost, RetryPod | PatchStatus)
    since = trial.created_at if action.retry == 0 else None
    check = TryCheck(place.storage, place.prefix(trial.key), trial.tries, since, lost)
    return replace(action, check=check)


def act(
    trial: TrialEntry,
    pod: PodEntry | None,
    verdict: PodVerdict,
    *,
    now: datetime,
    place: TrialPlace,
    prices: UnitPrices | None,
    max_infra_retries: int,
    running_status_after: float = 0.0,
) -> TrialAction:
    """The action for a verdict on the trial's Pod (`prices`: the operator's unit prices, for
    the trial's cost). A trial's status says Running once its runner has run for
    `running_status_after` seconds: one that ends sooner is written once, with its outcome."""
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
        case Running(since=since):
            if trial.phase == TrialPhase.RUNNING:
                return Nothing()
            ran = (now - since).total_seconds() if since is not None else running_status_after
            if ran < running_status_after:
                return Nothing(waiting=True, due_in=running_status_after - ran)
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
                runner=message.runner,
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
                f"{reason} The trial's Pod was lost {trial.infra_retries + 1} times, more than "
                f"the job's "
                f"maxInfraRetries ({max_infra_retries}) allows.",
                delete_pod=pod_name if removable else None,
                reason=TrialConditionReason.INFRA_RETRIES_EXHAUSTED,
            )
    raise AssertionError(f"unknown verdict {verdict!r}")  # pragma: no cover


UNSEEN_LOSS = (
    "The trial's Pod no longer exists: it was deleted while the operator was not watching, "
    "after its runner had written files."
)
"""The loss a `TryCheck` finds."""

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


def _previous_runner_wait(
    trial: TrialEntry, previous: PodEntry | None, gone_running_sec: float | None, now: datetime
) -> Nothing | None:
    """A retry's Pod waits while the lost try's runner may still upload into the trial's prefix,
    where its files would land after they were kept, among the retry's: its Pod is still there
    (deleted with the retry; the runner gets its grace period, `runner_may_still_write`), or it
    went from the API with its runner running (force-deleted, its node gone) less than
    `OLD_RUNNER_MARGIN_SEC` ago (`gone_running_sec`). None: no wait."""
    if trial.infra_retries == 0:
        return None
    if previous is not None and runner_may_still_write(previous.body, now):
        return Nothing(waiting=True)
    if gone_running_sec is not None and gone_running_sec < OLD_RUNNER_MARGIN_SEC:
        return Nothing(waiting=True, due_in=OLD_RUNNER_MARGIN_SEC - gone_running_sec)
    return None


def _create_pod(trial: TrialEntry, place: TrialPlace, image: ImageEntry | None = None) -> CreatePod:
    """The trial's Pod for its current try; a retry's with the lost try's files kept first (once
    that try's runner can no longer upload: `_previous_runner_wait`). With the `image` built for
    it: that image, and environment setup timed from the trial's creation."""
    built: dict[str, Any] = {}
    if image is not None:
        built = {"image": image.pinned_image, "setup_since": trial.created_at}
    retry = trial.infra_retries
    if retry == 0:
        return CreatePod(trial.current_pod_name, 0, **built)
    # The try before (after the tries of earlier runs, for a resumed job's trial).
    keep = KeepTry(place.storage, place.prefix(trial.key), number=trial.earlier_tries + retry)
    return CreatePod(trial.current_pod_name, retry, keep, **built)


BUILD_ERRORS = {ImageReason.BUILD_TIMEOUT: ErrorType.ENVIRONMENT_BUILD_TIMEOUT}
"""The error of a trial whose image build failed: `environment_build_failed` but for these."""
NOT_THE_TASKS = frozenset({ImageReason.BUILD_NOT_RUN, ImageReason.REGISTRY_UNAVAILABLE})
"""Build failures that are not the Dockerfile's: the infrastructure's (`BUILD_NOT_RUN`)."""


def _when_image_ready(
    trial: TrialEntry,
    image: ImageEntry | None,
    place: TrialPlace,
    now: datetime,
    prices: UnitPrices | None,
    stale_before: datetime | None,
) -> TrialAction:
    """A trial whose image is built in the cluster: its Pod once the image is Ready, its
    failure when the build failed, else it waits (and says so, once)."""
    stale = (
        image is not None
        and image.failed
        and stale_before is not None
        and (image.completed_at is None or image.completed_at < stale_before)
    )
    if image is None or image.deleting or stale:
        return Nothing()  # the job makes it (again); its change wakes the job
    if image.ready:
        return _create_pod(trial, place, image)
    if not image.failed:
        if trial.waiting_for_image:
            return Nothing()
        return PatchStatus(waiting_for_image_status(image.name, image.pull_image, now))
    reason = image.reason or ImageReason.BUILD_FAILED
    failed = fail_trial(
        trial.key,
        place,
        BUILD_ERRORS.get(reason, ErrorType.ENVIRONMENT_BUILD_FAILED),
        f"The image of the trial's environment could not be built (RolloutImage {image.name}"
        f", {reason.value}): {image.message or 'no reason given'}",
        now,
        tries=trial.tries,
        created_at=trial.created_at,
        cost=trial_cost(trial.cost, None, prices, now=now),
        class_override=BUILD_NOT_RUN if reason in NOT_THE_TASKS else None,
        in_setup=True,
    )
    return replace(failed, build_log=_build_log_copy(image, place))


def _build_log_copy(image: ImageEntry, place: TrialPlace) -> CopyBuildLog | None:
    """The copy of a failed build's log this job keeps, unless the log is there already."""
    if image.log_uri is None or image.image_hash is None:
        return None
    key = build_log_key(place.storage.prefix, place.job_name, image.image_hash)
    try:
        bucket, source_key = parse_s3_uri(image.log_uri)
    except ValueError:
        return None
    if bucket == place.storage.bucket and source_key == key:
        return None  # this job asked for the build: its log is in place
    return CopyBuildLog(place.storage, image.log_uri, key)


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
    in_setup: bool = False,
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
        in_setup=in_setup,
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
