"""What a RolloutJob's reconciler does next, from what it sees. Pure: no I/O, no clock, no state.

`decide_job` is the job's reconcile step, as `trials.decide` is a trial's: from a `JobView` (the
job's spec as understood, its status, its trials as the index and the reconciler's own writes
have them, the trials to take a step now with their Pods, the time) it returns a `JobDecision`:
the actions to carry out in order (`jobexec.JobExecutor`), when to look again, and which trials
wait on a grace period. In this order:

1. a job being deleted gets nothing more (but for the records of its trials whose runner never
   started, `cancelled_records`, which the reconciler writes as it stops);
2. an invalid spec gets `Valid=False` and `Failed=True` conditions and a Warning event, once
   (when the status changes, so a restarted operator does not post it again), then its TTL;
3. a Completed job is done for good (like a Kubernetes Job): only its TTL is left;
4. a job whose datasets are not read yet has them read (`ResolveDatasets`); when storage
   cannot be reached the status says so and the job is looked at again in `STORAGE_RETRY_SEC`;
5. a job so accepted has its config.json written first (`WriteJobConfig`, before its first
   trial), until the reconciler knows it is in storage; the executor writes it only where
   storage has none (`rollout run` writes its own before it creates the RolloutJob, and a
   restarted operator does not know what it wrote before); a job with no-internet tasks has its
   NetworkPolicies made next (`CreateNetworkPolicies`, `netpolicy`), before any trial Pod, until
   the reconciler knows they exist;
6. the trials to look at each take their step (`trials.decide`), and the next trials are
   created in the seed's order while fewer than nConcurrentTrials are unfinished, each with its
   Pod right away; a trial that cannot run fails at once, with no Pod: its task is broken
   (task_invalid, task_not_found), the oracle has no solution to run (task_invalid), or its
   image needs a build that cannot run (`builds.plan_image`). A trial whose image is built in
   the cluster gets its Pod once the image is Ready: the RolloutImage that builds it is made
   first (`EnsureImage`; an existing one is kept, one that failed before this job began is made
   anew), and waiting trials count as unfinished. A resumed job's trials that keep their
   earlier records are finished from the start (`resume`; the reconciler lays them under the
   index), one that runs again is made with its earlier tries and after its latest try's files
   moved (`CreateTrial.keeps`), and a trial whose namesake of an earlier job of this name is
   still there is not made until it is gone (`JobView.blocked`);
7. the status, only from a settled view: a decision that writes trials leaves it to the next
   look, which the reconciler takes at once. It is worked out at most once per status interval
   unless urgent; once every trial has finished, the job's files are written to storage first
   (`WriteJobFiles`), and the next look makes the job Completed; then its TTL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.failures import BUILD_NOT_RUN
from rollout.api.plan import PlannedShard, PlannedTrial
from rollout.api.resources import JobPhase, RolloutJob, RolloutJobStatus, StorageSpec, TrialPhase
from rollout.api.results import JobResult
from rollout.api.rowrun import RowItem
from rollout.api.trial_spec import task_error
from rollout.controller.builds import (
    BuildRefused,
    BuildSettings,
    ImageBuild,
    image_manifest,
    plan_image,
)
from rollout.controller.config import OperatorConfig
from rollout.controller.cost import trial_cost
from rollout.controller.finish import job_result
from rollout.controller.gauges import TrialGauges, trial_gauges
from rollout.controller.index import (
    ImageEntry,
    PodEntry,
    RunnerStarted,
    TrialEntry,
    no_runner_started,
    pod_name_for,
)
from rollout.controller.jobspec import Invalid, JobSpec, Planned, StorageUnavailable, Unplanned
from rollout.controller.netpolicy import PolicyPlan
from rollout.controller.planner import all_finished, next_to_create, unfinished_count
from rollout.controller.prices import UnitPrices
from rollout.controller.records import OperatorRecord, TrialPlace
from rollout.controller.resume import Resumed
from rollout.controller.shards import cancelled_rows
from rollout.controller.status import (
    invalid_status,
    job_status,
    outcomes,
    runs,
    status_patch,
    storage_unavailable_status,
)
from rollout.controller.trials import (
    CreatePod,
    DeletePod,
    KeepTry,
    Nothing,
    PatchStatus,
    RetryPod,
    TrialAction,
    decide,
    fail_trial,
    trial_manifest,
)
from rollout.controller.ttl import seconds_until_expiry

STORAGE_RETRY_SEC = 10.0
"""How soon a job whose datasets could not be read (storage unreachable) is looked at again."""


MAX_CREATIONS = 2_000
"""Most trials one decision creates; the next look, at once, creates the next ones. A job of
100,000 trials at once does not hold 100,000 creations (manifests, requests, turns) in memory
together: the operator's peak, and so its resident memory after it, stays near its steady size."""


# --- what the reconciler sees ---------------------------------------------------------------------


@dataclass(frozen=True)
class TrialLook:
    """A trial to take a step now, with its current Pod as the index has it (None: none)."""

    trial: TrialEntry
    pod: PodEntry | None = None
    pod_created: bool = False
    """The reconciler created the Pod a moment ago: its watch event is on its way."""
    pod_deleted: bool = False
    """The watch saw the Pod deleted."""
    pod_deleting: bool = False
    """The reconciler asked a moment ago for the Pod to be deleted: not again."""
    previous_pod: PodEntry | None = None
    """After a retry: the Pod of the try before, while the index still has it."""
    previous_gone_running_sec: float | None = None
    """After a retry: how long ago the try before's Pod went from the API with its runner
    running (force-deleted; None: it did not, or too long ago to be remembered)."""


@dataclass(frozen=True)
class JobView:
    """One RolloutJob as its reconciler sees it at `now`."""

    namespace: str
    uid: str
    generation: int | None
    spec: JobSpec
    status: RolloutJobStatus
    """The job's status: the watch's, or the reconciler's own patch when that is newer."""
    now: datetime
    trials: Mapping[str, TrialEntry] = field(default_factory=dict)
    """The job's trials by name: the index, with the reconciler's newer writes over it."""
    looks: Sequence[TrialLook] = ()
    deleting: bool = False
    ttl_seconds: int | None = None
    status_due_in: float = 0.0
    """Seconds until the status is due again (0 or less: due)."""
    result_uri: str | None = None
    """Where the finished job's result.json was just written (None: not yet)."""
    config_written: bool = False
    """The job's config.json is known to be in storage (this reconciler wrote or found it)."""
    policies_made: bool = False
    """The job's NetworkPolicies are known to exist (for this generation)."""
    images: Mapping[str, ImageEntry] = field(default_factory=dict)
    """The RolloutImages of the job's namespace, by name."""
    created_at: datetime | None = None
    """When the job was made: an image that failed before was another job's failure."""
    blocked: frozenset[str] = frozenset()
    """Trials not to create now: a trial of that name of an earlier job of this name (deleted,
    and replaced by this one) is still there."""
    runner_started: RunnerStarted = no_runner_started
    """Whether a trial's Pod shows its runner started (the index's Pods, asked on demand)."""


# --- what it does ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolveDatasets:
    """Read the job's datasets from storage and plan its trials (a resumed job's: and what its
    earlier run left of those not in `existing`, the trials it has)."""

    job: RolloutJob
    existing: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TrialStep:
    """Carry out one trial's step (`trials.decide`'s action); its files are at `place`."""

    trial: TrialEntry
    action: CreatePod | DeletePod | PatchStatus | RetryPod
    place: TrialPlace


@dataclass(frozen=True)
class NewTrials:
    """What every new trial of a job is made from (shared by the job's `CreateTrial`s)."""

    job: RolloutJob
    storage: StorageSpec
    namespace: str
    job_uid: str
    runner_image: str
    rows_image: str | None = None


@dataclass(frozen=True)
class CreateTrial:
    """Create a trial (an existing one is accepted) and, when it is new, its first Pod, or fail
    it at once with `failed` (it cannot run: its status and record).

    A trial whose image is built in the cluster (`build`) gets its Pod now only when the image
    is Ready already (`image`); else its Pod waits for the image (`trials.decide`).
    """

    trial: PlannedTrial
    made_from: NewTrials
    failed: PatchStatus | None = None
    build: ImageBuild | None = None
    image: ImageEntry | None = None
    earlier_tries: int = 0
    """A resumed job's trial that runs again: the tries it had."""
    items: tuple[RowItem, ...] | None = None
    """A resumed job's shard: the rows it runs (None: all)."""
    keeps: tuple[KeepTry, ...] = ()
    """Earlier tries' files to move under `retries/` before the trial is made."""

    @property
    def creates_pod(self) -> bool:
        if self.made_from.job.spec.environment.runs_on_bridge:
            return False  # a bridge runs it, in a sandbox of its own
        return self.failed is None and (self.build is None or self.image is not None)

    @property
    def name(self) -> str:
        return self.trial.name

    @property
    def pod_name(self) -> str:
        """The trial's first Pod."""
        return pod_name_for(self.trial.name, 0)

    def manifest(self) -> dict[str, Any]:
        """The RolloutTrial to create (made when created: thousands at once stay small)."""
        new = self.made_from
        return trial_manifest(
            new.job,
            self.trial,
            namespace=new.namespace,
            job_uid=new.job_uid,
            storage=new.storage,
            runner_image=new.runner_image,
            build=self.build,
            rows_image=new.rows_image,
            earlier_tries=self.earlier_tries,
            items=self.items,
        )


@dataclass(frozen=True)
class EnsureImage:
    """Make a RolloutImage (one of that name is kept as it is); `renew`: first delete the one
    of that uid, which failed before this job began (a failure is built again for a new job)."""

    manifest: dict[str, Any]
    renew: str | None = None

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class WriteJobConfig:
    """Write the job's config.json (its job.yaml form) where storage has none."""

    storage: StorageSpec
    job: RolloutJob


@dataclass(frozen=True)
class CreateNetworkPolicies:
    """Make the job's NetworkPolicies (`netpolicy`; existing ones are kept): the names they
    need resolved, then each created, owned by the job."""

    plan: PolicyPlan


@dataclass(frozen=True)
class WriteJobFiles:
    """Write the finished job's result.json to storage (and its data rows' seed 002 files)."""

    storage: StorageSpec
    job: RolloutJob
    result: JobResult
    shards: tuple[PlannedShard, ...] = ()


@dataclass(frozen=True)
class ReportGauges:
    gauges: TrialGauges


@dataclass(frozen=True)
class PatchJobStatus:
    status: RolloutJobStatus


@dataclass(frozen=True)
class Warn:
    """Post a Warning event on the job."""

    reason: str
    message: str


@dataclass(frozen=True)
class DeleteJob:
    """The finished job's ttlSecondsAfterFinished has passed."""

    ttl_seconds: int


JobAction = (
    ResolveDatasets
    | TrialStep
    | EnsureImage
    | CreateTrial
    | WriteJobConfig
    | CreateNetworkPolicies
    | WriteJobFiles
    | ReportGauges
    | PatchJobStatus
    | Warn
    | DeleteJob
)


@dataclass(frozen=True)
class JobDecision:
    actions: tuple[JobAction, ...] = ()
    requeue_after: float | None = None
    """Look again after this long at the latest (None: when woken)."""
    waiting: frozenset[str] = frozenset()
    """The looked-at trials whose Pods wait on a grace period (or for their Running status)."""
    due_in: float | None = None
    """Seconds until a waiting trial is due a look (None: at the grace periods' pace)."""
    status_checked: bool = False
    """The status was worked out: the next is due a status interval from now."""


# --- deciding -------------------------------------------------------------------------------------


def decide_job(view: JobView, *, config: OperatorConfig) -> JobDecision:
    """The next step for the job (see the module docstring)."""
    if view.deleting:
        return JobDecision()
    spec = view.spec
    if isinstance(spec, Invalid):
        return _invalid(view, spec)
    if view.status.phase == JobPhase.COMPLETED:
        return _expire(view, view.status)
    if isinstance(spec, Unplanned):
        return JobDecision((ResolveDatasets(spec.job, frozenset(view.trials)),))
    if isinstance(spec, StorageUnavailable):
        unavailable = storage_unavailable_status(
            view.status, message=spec.message, generation=view.generation, now=view.now
        )
        return JobDecision(_patch(view.status, unavailable), requeue_after=STORAGE_RETRY_SEC)
    steps, waiting, due_in = _trial_steps(view, spec, config)
    creations = _creations(view, spec, config)
    images = _image_actions(view, spec, creations, config)
    if creations or any(_writes_trial(step) for step in steps):
        decision = JobDecision((*steps, *images, *creations), waiting=waiting)
    elif images:
        decision = JobDecision((*steps, *images), waiting=waiting)
    else:
        decision = _status(view, spec, steps, waiting)
    decision = replace(decision, due_in=due_in)
    first: list[JobAction] = []
    if not view.config_written:
        # First: a job's trials never run without its config.json in storage.
        first.append(WriteJobConfig(spec.storage, spec.job))
    if spec.policies is not None and not view.policies_made:
        # Before any Pod: a no-internet trial never runs without its policy.
        first.append(CreateNetworkPolicies(spec.policies))
    if not first:
        return decision
    return replace(decision, actions=(*first, *decision.actions))


CANCELLED = (
    "The trial's RolloutJob was deleted (the job was cancelled) before the trial's runner started."
)


def cancelled_records(
    spec: JobSpec,
    trials: Mapping[str, TrialEntry],
    now: datetime,
    prices: UnitPrices | None,
    runner_started: RunnerStarted = no_runner_started,
) -> list[OperatorRecord | None]:
    """The records of a deleted job's trials that no runner will write: those whose runner has
    not started (a running runner is stopped with its Pod, or by the bridge that claimed the
    trial, and writes its own), as their status or their Pod says."""
    if not isinstance(spec, Planned):
        return []
    place = TrialPlace(spec.storage, spec.job.job_name)
    records: list[OperatorRecord | None] = []
    for trial in trials.values():
        if trial.finished or runs(trial, runner_started):
            continue
        if trial.shard:
            planned = spec.plan.by_name.get(trial.name)
            if planned is not None and planned.shard is not None:
                items = [
                    RowItem(id=t.key.task, attempt=t.key.attempt) for t in planned.shard.trials
                ]
                records += cancelled_rows(place, trial, items, message=CANCELLED, now=now)
            continue
        failed = fail_trial(
            trial.key,
            place,
            ErrorType.INTERNAL_ERROR,
            CANCELLED,
            now,
            cost=trial_cost(trial.cost, None, prices, now=now),
            tries=trial.tries,
            created_at=trial.created_at,
        )
        records.append(failed.record)
    return records


def _patch(known: RolloutJobStatus, desired: RolloutJobStatus) -> tuple[JobAction, ...]:
    """A status patch when the status changes."""
    return (PatchJobStatus(desired),) if status_patch(desired) != status_patch(known) else ()


def _expire(
    view: JobView, status: RolloutJobStatus, actions: tuple[JobAction, ...] = ()
) -> JobDecision:
    """`actions`, then the job's deletion once its TTL has passed (else a look then)."""
    due = seconds_until_expiry(view.ttl_seconds, status.ended_at, view.now)
    if due is None:
        return JobDecision(actions)
    if due > 0:
        return JobDecision(actions, requeue_after=due)
    assert view.ttl_seconds is not None  # a time is due only with a TTL
    return JobDecision((*actions, DeleteJob(view.ttl_seconds)))


def _invalid(view: JobView, invalid: Invalid) -> JobDecision:
    desired = invalid_status(
        view.status,
        reason=invalid.reason,
        message=invalid.message,
        generation=view.generation,
        now=view.now,
    )
    if not _patch(view.status, desired):
        return _expire(view, view.status)
    # Only when the status changes: a restarted operator does not post the event again.
    return _expire(
        view, desired, (Warn(invalid.reason.value, invalid.message), PatchJobStatus(desired))
    )


def _trial_steps(
    view: JobView, planned: Planned, config: OperatorConfig
) -> tuple[list[TrialStep], frozenset[str], float | None]:
    """Each looked-at trial's step, which of them wait (on a grace period, or for their
    Running status), and how soon one of them is due a look (None: no sooner than usual)."""
    steps: list[TrialStep] = []
    waiting: set[str] = set()
    due: list[float] = []
    place = TrialPlace(planned.storage, planned.job.job_name)
    for look in view.looks:
        trial = look.trial
        if trial.finished and (not trial.runs_in_pod or look.pod is None):
            continue  # the common case of a finished trial: nothing left to clean up
        if (orphaned := _orphaned(view, planned, look, config, place)) is not None:
            steps.append(TrialStep(trial, orphaned, place))
            continue
        action = decide(
            trial,
            look.pod,
            now=view.now,
            config=config,
            place=place,
            max_infra_retries=planned.job.spec.max_infra_retries,
            pod_requested=look.pod_created,
            pod_deleted=look.pod_deleted,
            previous_pod=look.previous_pod,
            previous_gone_running_sec=look.previous_gone_running_sec,
            image=view.images.get(trial.image_build) if trial.image_build else None,
            stale_before=view.created_at,
        )
        if look.pod_deleting:
            action = _without_pod_deletion(action)
        if isinstance(action, Nothing):
            if action.waiting:
                waiting.add(trial.name)
            if action.due_in is not None:
                due.append(action.due_in)
        else:
            steps.append(TrialStep(trial, action, place))
    return steps, frozenset(waiting), min(due, default=None)


ORPHANED = (
    "The trial waits for an image that is no longer built: its RolloutImage {name} is gone (or "
    "failed for an earlier job), and the operator's build settings have changed since the trial "
    "was made (its builder, platform or registry), so it cannot be made again as it was. Run "
    "the job again."
)


def _orphaned(
    view: JobView, planned: Planned, look: TrialLook, config: OperatorConfig, place: TrialPlace
) -> PatchStatus | None:
    """The failure of a trial waiting for an image that is gone and that this operator would
    not make again under that name (its settings changed meanwhile); None otherwise."""
    trial = look.trial
    if trial.image_build is None or trial.finished or look.pod is not None:
        return None
    if trial.phase == TrialPhase.RUNNING or look.pod_created:
        return None
    image = view.images.get(trial.image_build)
    lost = image is None or (image.failed and _failed_before(image, view.created_at))
    if not lost or _remade(view, planned, trial, config.builds) is not None:
        return None
    return fail_trial(
        trial.key,
        place,
        ErrorType.ENVIRONMENT_BUILD_FAILED,
        ORPHANED.format(name=trial.image_build),
        view.now,
        tries=trial.tries,
        created_at=trial.created_at,
        cost=trial_cost(trial.cost, None, config.unit_prices, now=view.now),
        class_override=BUILD_NOT_RUN,
        in_setup=True,
    )


def _remade(
    view: JobView, planned: Planned, trial: TrialEntry, settings: BuildSettings | None
) -> tuple[ImageBuild, PlannedTrial] | None:
    """The build that makes a waiting trial's RolloutImage again, under its name; None when
    this operator's settings would name it otherwise (or build nothing)."""
    planned_trial = planned.plan.by_name.get(trial.name)
    if planned_trial is None or settings is None:
        return None
    build = plan_image(
        planned_trial,
        force_build=planned.job.spec.environment.force_build,
        settings=settings,
        job_uid=view.uid,
    )
    if isinstance(build, ImageBuild) and build.name == trial.image_build:
        return build, planned_trial
    return None


def _without_pod_deletion(action: TrialAction) -> TrialAction:
    """The action without deleting the trial's current Pod (its deletion is on its way)."""
    match action:
        case DeletePod():
            return Nothing()
        case PatchStatus(delete_pod=str()):
            return replace(action, delete_pod=None)
        case RetryPod(old_pod=str()):
            return replace(action, old_pod=None)
    return action


def _writes_trial(step: TrialStep) -> bool:
    """Whether the step changes the trial (its status), which a later look must see."""
    return isinstance(step.action, PatchStatus | RetryPod)


def _creations(view: JobView, planned: Planned, config: OperatorConfig) -> list[CreateTrial]:
    """The next trials in the plan's order, as many as free slots allow (none when suspended)."""
    job = planned.job
    chosen = next_to_create(
        planned.plan,
        lambda name: name in view.trials or name in view.blocked,
        unfinished=unfinished_count(planned.plan, view.trials),
        concurrency=job.spec.n_concurrent_trials,
        suspended=job.spec.suspend,
        at_most=MAX_CREATIONS,
    )
    if not chosen:
        return []
    new = NewTrials(
        job,
        planned.storage,
        namespace=view.namespace,
        job_uid=view.uid,
        runner_image=job.spec.runner_image or config.runner_image,
        rows_image=config.rows_image,
    )
    place = TrialPlace(planned.storage, job.job_name)
    resumed = planned.resumed or Resumed()
    creations: list[CreateTrial] = []
    for trial in chosen:
        failed, build = _at_creation(view, job, place, trial, config)
        ready = view.images.get(build.name) if build is not None else None
        image = ready if ready is not None and ready.ready else None
        rerun = resumed.reruns.get(trial.name)
        creations.append(
            CreateTrial(
                trial,
                new,
                failed,
                build,
                image,
                earlier_tries=rerun.earlier_tries if rerun is not None else 0,
                items=resumed.row_items.get(trial.name),
                keeps=resumed.keeps(trial.name),
            )
        )
    return creations


def _at_creation(
    view: JobView,
    job: RolloutJob,
    place: TrialPlace,
    trial: PlannedTrial,
    config: OperatorConfig,
) -> tuple[PatchStatus | None, ImageBuild | None]:
    """A new trial's failure when it cannot run (seed 000: "For task_invalid and task_not_found
    errors, no container is started"; or its image needs a build that cannot run), else the
    image build it waits for (None: its image is pulled)."""
    if trial.shard is not None:
        return None, None  # rows run in their dataset's image, or the runner's: nothing to build
    cost = trial_cost(None, None, config.unit_prices, now=view.now)  # nothing ran: 0 with prices
    if (error := task_error(trial)) is not None:
        return fail_trial(trial.key, place, error.type, error.message, view.now, cost=cost), None
    if job.spec.environment.runs_on_bridge:
        return None, None  # the bridge's provider pulls or builds the image where it runs
    plan = plan_image(
        trial,
        force_build=job.spec.environment.force_build,
        settings=config.builds,
        job_uid=view.uid,
    )
    if isinstance(plan, BuildRefused):
        failed = fail_trial(
            trial.key,
            place,
            ErrorType.ENVIRONMENT_BUILD_FAILED,
            plan.message,
            view.now,
            cost=cost,
            class_override=plan.failure_class,
        )
        return failed, None
    return None, plan


def _image_actions(
    view: JobView, planned: Planned, creations: Sequence[CreateTrial], config: OperatorConfig
) -> list[EnsureImage]:
    """The RolloutImages to make: those of the trials made now, and those of the trials looked
    at whose image is gone or failed before this job began."""
    settings = config.builds
    if settings is None:
        return []
    wanted: dict[str, tuple[ImageBuild, PlannedTrial]] = {}
    for creation in creations:
        if creation.build is not None and creation.failed is None:
            wanted.setdefault(creation.build.name, (creation.build, creation.trial))
    for look in view.looks:
        trial = look.trial
        if trial.image_build is None or trial.finished or trial.image_build in wanted:
            continue
        if (remade := _remade(view, planned, trial, settings)) is not None:
            wanted[trial.image_build] = remade
    actions: list[EnsureImage] = []
    for name, (build, first) in wanted.items():
        found = view.images.get(name)
        stale = found is not None and found.failed and _failed_before(found, view.created_at)
        if found is not None and (found.deleting or not stale):
            continue
        manifest = image_manifest(
            build,
            first,
            job=planned.job,
            job_uid=view.uid,
            namespace=view.namespace,
            storage=planned.storage,
            settings=settings,
        )
        actions.append(EnsureImage(manifest, renew=found.uid if found is not None else None))
    return actions


def _failed_before(image: ImageEntry, moment: datetime | None) -> bool:
    """Whether a failed image failed before `moment` (the job's start): another job's failure."""
    if moment is None:
        return False
    return image.completed_at is None or image.completed_at < moment


def _status_urgent(view: JobView, job: RolloutJob, done: bool) -> bool:
    """Whether the status must be looked at now rather than at the next interval: a new phase
    (started, suspended or resumed, all trials finished) or a new generation."""
    known = view.status
    return (
        done
        or known.phase in (None, JobPhase.PENDING, JobPhase.FAILED)
        or known.observed_generation != view.generation
        or job.spec.suspend != (known.phase == JobPhase.SUSPENDED)
    )


def _status(
    view: JobView, planned: Planned, steps: list[TrialStep], waiting: frozenset[str]
) -> JobDecision:
    """The job's status from a settled view (with the steps that change no trial)."""
    job, plan = planned.job, planned.plan
    resumed = planned.resumed or Resumed()
    done = all_finished(plan, view.trials)
    if view.status_due_in > 0 and not _status_urgent(view, job, done):
        return JobDecision(tuple(steps), requeue_after=view.status_due_in, waiting=waiting)
    if done and view.result_uri is None:
        moment = view.now.replace(microsecond=0)
        result = job_result(
            job,
            outcomes(plan, view.trials, resumed.kept_rows),
            started_at=view.status.started_at or moment,
            ended_at=moment,
        )
        files = WriteJobFiles(planned.storage, job, result, plan.shards)
        return JobDecision((*steps, files), waiting=waiting, status_checked=True)
    desired = job_status(
        plan=plan,
        trials=view.trials,
        previous=view.status,
        generation=view.generation,
        suspended=job.spec.suspend,
        metrics=[m.type for m in job.spec.metrics],
        now=view.now,
        result_uri=view.result_uri if done else None,
        kept_rows=resumed.kept_rows,
        kept=resumed.kept_count,
        runner_started=view.runner_started,
    )
    gauges = trial_gauges(plan, view.trials, view.runner_started)
    actions = (*steps, ReportGauges(gauges), *_patch(view.status, desired))
    if desired.phase == JobPhase.COMPLETED:
        decision = _expire(view, desired, actions)
    else:
        decision = JobDecision(actions)
    return replace(decision, waiting=waiting, status_checked=True)
