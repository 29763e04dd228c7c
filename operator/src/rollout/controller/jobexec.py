"""Carries out a job reconciler's decisions (`jobdecide`) against the API, storage and metrics.

The actions run in order; an error stops the rest, and the reconciler tries the whole pass again
later. Consecutive steps of distinct trials, and consecutive trial creations, run at once
(`TrialWork`, `TRIAL_WRITERS` at a time): each concerns its own trial and its own Pod; the trials
themselves are still created in the plan's order, one request after the other (`Turns`,
`kubeapi.trial_lane`), their Pods and the rest at once. Every write is idempotent (`kubeapi`),
and every write of a trial, a Pod or the job's status is remembered (`ownwrites.OwnWrites`) until
the watch shows it. `run` says what the next look must see (`Done`): trials written, the job's
datasets read, its files written, its config.json in storage.

Storage comes before the API where a trial's files are concerned: the records the operator writes
for trials whose runner could not (`records`) are written before the status patches that finish
those trials and say where they are, several at once; a lost try's files are moved under
`retries/<k>/` before the retry's Pod is created. A storage error stops the pass like any other.
Storage is also read where the API cannot say: whether a trial's try ran already, its Pod lost
while nobody watched (`trials.TryCheck`), before a Pod is made for it.

It decides nothing a decision could decide beforehand; what it does depends on a write's answer
only where the decision cannot know it:

- a trial that existed already is not given a Pod here: it is driven like any other trial;
- a gone trial (404) is left alone; its next look sees it gone;
- a trial whose Pod cannot be made from its spec (edited by hand?) fails, and the job goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
)
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.resources import JobConditionReason, RolloutJob
from rollout.controller.cost import trial_cost
from rollout.controller.datasets import DatasetProblem
from rollout.controller.finish import write_job_files
from rollout.controller.hostnames import resolve_names
from rollout.controller.index import TrialEntry, owner_uid
from rollout.controller.jobconfig import write_job_config
from rollout.controller.jobdecide import (
    CreateNetworkPolicies,
    CreateTrial,
    DeleteJob,
    EnsureImage,
    JobAction,
    PatchJobStatus,
    ReportGauges,
    ResolveDatasets,
    TrialStep,
    Warn,
    WriteJobConfig,
    WriteJobFiles,
)
from rollout.controller.jobspec import Invalid, Planned, StorageUnavailable, check_job, plan_trials
from rollout.controller.netpolicy import PolicyPlan, render_policies
from rollout.controller.ownwrites import OwnWrites
from rollout.controller.pod import render_trial_pod
from rollout.controller.records import OperatorRecord, TrialPlace
from rollout.controller.resume import plan_resume, read_earlier_files
from rollout.controller.runtime import Runtime
from rollout.controller.shards import finish_rows, keep_row_tries, shard_error, shard_items
from rollout.controller.status import status_patch
from rollout.controller.trial_files import (
    copy_build_log,
    keep_try,
    set_cost,
    try_ran,
    write_record,
)
from rollout.controller.trials import (
    CreatePod,
    DeletePod,
    PatchStatus,
    RetryPod,
    fail_trial,
)
from rollout.storage import ObjectStore, StorageError

log = logging.getLogger(__name__)

RECORD_WRITERS = 8
"""Records written at once: each is a few small requests to storage, mostly waiting."""

TRIAL_WRITERS = 16
"""Trials created (the RolloutTrial, then its Pod) or stepped at once: as many as the API
client's threads (`kubeapi.WORKERS`). One after the other, a job's trials would start no faster
than one API round trip after another (2 per trial at creation) allows, whatever the API
server's capacity."""

ORDERED_CREATIONS = 1
"""Trial creations asked for at once (`Turns`): 1 keeps DESIGN's order, each asked for after the
one before it, and the API client sends a job's trials one after the other in that order
(`kubeapi.trial_lane`), so that the trials that exist are always the plan's first ones; their
Pods are made `TRIAL_WRITERS` at a time."""

PostWarning = Callable[[str, str], None]


@dataclass(frozen=True)
class TrialWork:
    """Consecutive actions about distinct trials (their steps, or their creation), carried out
    at once (`TRIAL_WRITERS` at a time): none of them depends on another."""

    actions: tuple[TrialStep | CreateTrial, ...]


def _trial_work_grouped(
    actions: Iterable[JobAction],
) -> Iterator[JobAction | TrialWork]:
    """The actions in order, each run of consecutive trial steps and each run of consecutive
    trial creations as one `TrialWork` (a decision lists a trial at most once in each)."""
    run: list[TrialStep | CreateTrial] = []
    for action in actions:
        if run and type(action) is not type(run[0]):
            yield TrialWork(tuple(run))
            run = []
        if isinstance(action, TrialStep | CreateTrial):
            run.append(action)
        else:
            yield action
    if run:
        yield TrialWork(tuple(run))


class Turns:
    """Trials' creations asked for in a given order, `window` at a time, while the rest of their
    creation (their Pods, their records) runs at once: `take(name)` is entered around asking for
    the trial's creation, and waits until the one `window` places before it in the order is
    `done` (asked for, failed, or not made at all: its job is going). `at_most` starts the calls
    in order, so that one has always started, and each is `done` whatever happens to it."""

    def __init__(self, names: Iterable[str], window: int = 1) -> None:
        self._index = {name: index for index, name in enumerate(names)}
        self._done: set[int] = set()
        # Events only for the turns someone waits for: a job of 100,000 trials does not make
        # 100,000 of them at once.
        self._waiting: dict[int, asyncio.Event] = {}
        self._window = max(1, window)

    @contextlib.asynccontextmanager
    async def take(self, name: str) -> AsyncIterator[None]:
        before = self._index[name] - self._window
        if before >= 0 and before not in self._done:
            await self._waiting.setdefault(before, asyncio.Event()).wait()
        try:
            yield
        finally:
            self.done(name)

    def done(self, name: str) -> None:
        index = self._index[name]
        self._done.add(index)
        if (event := self._waiting.pop(index, None)) is not None:
            event.set()


async def at_most(calls: Iterable[Callable[[], Awaitable[None]]], limit: int) -> None:
    """Await each call, `limit` at a time, in order. After a failure no further call starts; the
    ones under way finish (each write is idempotent, and what they wrote is remembered), then
    the first failure is raised."""
    pending = iter(calls)
    failures: list[Exception] = []

    async def worker() -> None:
        for call in pending:
            if failures:
                return
            try:
                await call()
            except Exception as err:  # the first one is raised below, once the rest are done
                failures.append(err)
                return

    await asyncio.gather(*(worker() for _ in range(max(1, limit))))
    if failures:
        raise failures[0]


@dataclass
class Done:
    """What carrying out a decision changed that the job's next look must see."""

    trials_written: bool = False
    spec: Planned | Invalid | StorageUnavailable | None = None
    """The job's datasets were read: its spec as it now stands."""
    result_uri: str | None = None
    """The finished job's files were written: its result.json."""
    config_written: bool = False
    """The job's config.json is in storage (written now, or found there)."""
    policies_made: bool = False
    """The job's NetworkPolicies exist (made now, or found)."""
    blocked: set[str] = field(default_factory=set)
    """Trials not made: a trial of that name of an earlier job of this name is still there."""

    @property
    def changed(self) -> bool:
        return self.trials_written or self.spec is not None or self.result_uri is not None


class JobExecutor:
    """Carries out the actions of one RolloutJob's reconciler."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        namespace: str,
        name: str,
        uid: str,
        writes: OwnWrites,
        post_warning: PostWarning,
        leaving: Callable[[], bool],
    ) -> None:
        self.runtime = runtime
        self.api = runtime.api
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.where = f"RolloutJob {namespace}/{name}"
        self.writes = writes
        self.post_warning = post_warning
        self.leaving = leaving

    async def run(self, actions: Iterable[JobAction], *, now: datetime) -> Done:
        """Carry out `actions` in order (`now`: the time they were decided at)."""
        actions = list(actions)
        await self._write_records(actions)
        done = Done()
        for action in _trial_work_grouped(actions):
            match action:
                case ResolveDatasets(job=job, existing=existing):
                    done.spec = await self.resolve(job, existing)
                case TrialWork(actions=work):
                    if await self._trial_work(work, now, done.blocked):
                        done.trials_written = True
                case EnsureImage():
                    if not self.leaving():
                        await self._ensure_image(action)
                case WriteJobConfig(storage=storage, job=job):
                    await write_job_config(self.runtime.stores.for_spec(storage), job)
                    done.config_written = True
                case CreateNetworkPolicies(plan=plan):
                    await self._create_network_policies(plan)
                    done.policies_made = True
                case WriteJobFiles(storage=storage, job=job, result=result, shards=shards):
                    store = self.runtime.stores.for_spec(storage)
                    written = await write_job_files(store, job, result, shards)
                    done.result_uri = written.result_uri
                case ReportGauges(gauges=gauges):
                    self.runtime.metrics.jobs.report(self.uid, gauges.by_phase, gauges.active)
                case PatchJobStatus(status=status):
                    patched = await self.api.patch_job_status(
                        self.namespace, self.name, status_patch(status)
                    )
                    if patched is not None:
                        self.writes.job_status_written(patched)
                case Warn(reason=reason, message=message):
                    self.post_warning(reason, message)
                    log.warning("%s cannot run: %s", self.where, message)
                case DeleteJob(ttl_seconds=ttl):
                    log.info(
                        "%s finished %d s ago; ttlSecondsAfterFinished deletes it", self.where, ttl
                    )
                    await self.api.delete_job(self.namespace, self.name)
                    self.writes.job_deleted = True
        return done

    # --- trials at once

    async def _trial_work(
        self, work: Iterable[TrialStep | CreateTrial], now: datetime, blocked: set[str]
    ) -> bool:
        """Carry out trial steps or creations, `TRIAL_WRITERS` at a time; True when a trial was
        written. Creations blocked by an earlier job's trial of the same name go in `blocked`."""
        written = False

        async def one(action: TrialStep | CreateTrial) -> None:
            nonlocal written
            if isinstance(action, TrialStep):
                if await self._trial_step(action.trial, action.action, action.place, now):
                    written = True
            else:
                try:
                    # Before each: the job may go while its trials are created.
                    if self.leaving():
                        return
                    if await self._create_trial(action, now, turns.take(action.name)):
                        written = True
                    else:
                        blocked.add(action.name)
                finally:
                    turns.done(action.name)

        work = list(work)
        creations = [action.name for action in work if isinstance(action, CreateTrial)]
        turns = Turns(creations, ORDERED_CREATIONS)
        await at_most([functools.partial(one, action) for action in work], TRIAL_WRITERS)
        return written

    # --- the job's datasets

    async def resolve(
        self, job: RolloutJob, existing: Collection[str] = ()
    ) -> Planned | Invalid | StorageUnavailable:
        """Read the job's datasets from storage and plan its trials; for a resumed job, read
        what its earlier run left of the trials it has not made (`existing`: those it has)."""
        storage = check_job(job, self.runtime.config.storage, self.where)
        if isinstance(storage, Invalid):
            return storage
        store = self.runtime.stores.for_spec(storage)
        try:
            datasets = await self.runtime.datasets.resolve(job.spec.datasets, store)
        except DatasetProblem as err:
            return Invalid(JobConditionReason.DATASET_NOT_FOUND, f"{self.where}: {err.message}")
        except StorageError as err:
            return StorageUnavailable(f"Object storage cannot be reached; retrying: {err}")
        planned = plan_trials(job, self.name, datasets, storage, self.where)
        if not isinstance(planned, Planned) or not job.spec.resume:
            return planned
        place = TrialPlace(storage, job.job_name)
        try:
            earlier = await asyncio.to_thread(
                read_earlier_files, store, place, planned.plan, existing
            )
        except StorageError as err:
            return StorageUnavailable(f"Object storage cannot be reached; retrying: {err}")
        resumed = plan_resume(
            planned.plan,
            place,
            earlier,
            namespace=self.namespace,
            retry=job.spec.retry_errors,
        )
        log.info(
            "%s resumes: %d trials keep their records, %d run again after earlier tries",
            self.where,
            resumed.kept_count,
            len(resumed.reruns) + sum(len(keeps) for keeps in resumed.row_keeps.values()),
        )
        return replace(planned, resumed=resumed)

    # --- the job's NetworkPolicies

    async def _create_network_policies(self, plan: PolicyPlan) -> None:
        """Resolve the names the policies need, then create each (an existing one is kept)."""
        rendered = render_policies(
            plan,
            job_name=self.name,
            job_uid=self.uid,
            namespace=self.namespace,
            addresses=await resolve_names(plan.names),
        )
        for policy in rendered.policies:
            if await self.api.create_network_policy(self.namespace, policy):
                log.info("%s: created NetworkPolicy %s", self.where, policy["metadata"]["name"])
        for warning in rendered.warnings:
            self.post_warning("NetworkPolicy", warning)
            log.warning("%s: %s", self.where, warning)

    # --- trials' files in storage

    async def _write_records(self, actions: list[JobAction]) -> None:
        """Write what storage must have before these actions' status patches: the records of
        the trials they finish without their runner's, and the cost in their runners'."""
        # A shard's rows are recorded when it finishes (`_finish`), not as the shard itself.
        steps = [
            action.action
            for action in actions
            if isinstance(action, TrialStep)
            and isinstance(action.action, PatchStatus)
            and not action.trial.shard
        ]
        # A failed build's log first: a record that points at it finds it there.
        logs = {step.build_log.key: step.build_log for step in steps if step.build_log}
        await self._in_threads(
            [
                (self.runtime.stores.for_spec(log.storage), copy_build_log, log)
                for log in logs.values()
            ]
        )
        await self.write_records(step.record for step in steps)
        costs = [step.cost for step in steps if step.cost is not None]
        await self._in_threads(
            [(self.runtime.stores.for_spec(cost.storage), set_cost, cost) for cost in costs]
        )

    async def write_records(self, records: Iterable[OperatorRecord | None]) -> None:
        """Write trials' records (None: none to write), a few at a time (each is a HEAD and a
        conditional PUT or two)."""
        await self._in_threads(
            [(self.runtime.stores.for_spec(r.storage), write_record, r) for r in records if r]
        )

    async def _in_threads(self, calls: list[tuple[ObjectStore, Callable[..., Any], Any]]) -> None:
        """`fn(store, item)` for each call, `RECORD_WRITERS` at a time (boto3 blocks)."""
        limit = asyncio.Semaphore(RECORD_WRITERS)

        async def one(store: ObjectStore, fn: Callable[..., Any], item: Any) -> None:
            async with limit:
                await asyncio.to_thread(fn, store, item)

        await asyncio.gather(*(one(*call) for call in calls))

    # --- trials and their Pods

    async def _trial_step(
        self,
        trial: TrialEntry,
        step: CreatePod | DeletePod | PatchStatus | RetryPod,
        place: TrialPlace,
        now: datetime,
    ) -> bool:
        """Carry out one trial's step; True when the trial was written."""
        name = trial.name
        match step:
            case CreatePod(pod_name=pod_name, retry=retry, keep=keep, check=check):
                body = await self.api.get_trial(self.namespace, name)
                if body is None:
                    return False
                if check is not None and await asyncio.to_thread(
                    try_ran, self.runtime.stores.for_spec(check.storage), check
                ):
                    # Its Pod was made and lost while nobody watched: its files say so.
                    log.info("%s: trial %s ran before, its Pod gone", self.where, name)
                    if isinstance(check.if_ran, PatchStatus):
                        await self.write_records([check.if_ran.record])
                    return await self._trial_step(trial, check.if_ran, place, now)
                if keep is not None:
                    # The lost try's files move first; interrupted, the next look moves the
                    # rest (the new Pod does not exist yet, so nothing of it is moved). A
                    # shard's are its rows' (those it runs again).
                    store = self.runtime.stores.for_spec(keep.storage)
                    if trial.shard:
                        items = shard_items(body)
                        await asyncio.to_thread(
                            keep_row_tries, store, place, trial, items, keep.number
                        )
                    else:
                        await asyncio.to_thread(keep_try, store, keep)
                return await self._create_pod(
                    body,
                    trial,
                    place,
                    pod_name,
                    retry,
                    now,
                    image=step.image,
                    setup_since=step.setup_since,
                )
            case DeletePod(pod_name=pod_name):
                await self._delete_pod(pod_name)
                return False
            case PatchStatus():
                # Its record, if any, is in storage already (`_write_records`).
                return await self._finish(trial, step, place, now)
            case RetryPod():
                # The retry is recorded first: a restart in between creates the new Pod instead
                # of retrying again. The new Pod follows at a later look (`CreatePod`).
                patched = await self.api.patch_trial_status(self.namespace, name, step.status)
                if patched is None:
                    return False
                self.writes.trial_written(patched)
                log.info("%s: trial %s lost its Pod; retry %d", self.where, name, step.retry)
                if step.old_pod:
                    await self._delete_pod(step.old_pod)
                return True

    async def _finish(
        self, trial: TrialEntry, step: PatchStatus, place: TrialPlace, now: datetime
    ) -> bool:
        """Patch a trial's status (its record is in storage); True when the trial was written.
        A finished shard's status gets its rows' outcomes (`shards`)."""
        name = trial.name
        status = step.status
        if trial.shard and step.final:
            rows = await self._finish_rows(trial, step, place, now)
            if rows is None:
                return False
            status = {**status, "rows": rows}
        patched = await self.api.patch_trial_status(self.namespace, name, status)
        if patched is None:
            return False
        done = self.writes.trial_written(patched)
        if step.final:
            error = done.error_type.value if done.error_type else None
            phase = done.phase.value if done.phase else ""
            kind = done.failure_class.value if done.failure_class else None
            self.runtime.metrics.trial_finished(phase, error, step.durations, kind, step.runner)
        if step.delete_pod:
            await self._delete_pod(step.delete_pod)
        return True

    async def _finish_rows(
        self, trial: TrialEntry, step: PatchStatus, place: TrialPlace, now: datetime
    ) -> list[dict[str, Any]] | None:
        """A finished shard's rows (each recorded in storage), for its status; None when the
        shard is gone."""
        body = await self.api.get_trial(self.namespace, trial.name)
        if body is None:
            return None
        store = self.runtime.stores.for_spec(place.storage)
        outcomes = await asyncio.to_thread(
            finish_rows,
            store,
            place,
            trial,
            shard_items(body),
            error=shard_error(step.status),
            now=now,
            pod_name=trial.pod_name,
        )
        return [o.model_dump(mode="json", exclude_none=True) for o in outcomes]

    async def _create_pod(
        self,
        body: Mapping[str, Any],
        trial: TrialEntry,
        place: TrialPlace,
        pod_name: str,
        retry: int,
        now: datetime,
        *,
        image: str | None = None,
        setup_since: datetime | None = None,
    ) -> bool:
        """Create the trial's Pod; True when instead the trial was failed (no Pod can be made).

        `image`: the image built for it (pinned); `setup_since`: when its environment setup
        began, if before now (it waited for that image)."""
        config = self.runtime.config
        try:
            pod = render_trial_pod(
                body,
                config=config,
                pod_name=pod_name,
                retry=retry,
                created_at=setup_since or datetime.now(UTC),
                image=image,
            )
        except (InvalidInput, ValueError) as err:
            # Our own trial spec cannot be rendered (edited by hand?): the trial fails, the job
            # goes on.
            failed = fail_trial(
                trial.key,
                place,
                ErrorType.INTERNAL_ERROR,
                f"The trial's Pod cannot be made: {err}",
                now,
                tries=trial.tries,
                created_at=trial.created_at,
                cost=trial_cost(trial.cost, None, config.unit_prices, now=now),
            )
            if not trial.shard:
                await self.write_records([failed.record])
            return await self._finish(trial, failed, place, now)
        self.writes.pods_created.add(pod_name)
        await self.api.create_pod(self.namespace, pod)
        return False

    async def _delete_pod(self, pod_name: str) -> None:
        self.writes.pods_deleted.add(pod_name)
        await self.api.delete_pod(self.namespace, pod_name)

    async def _create_trial(
        self,
        create: CreateTrial,
        now: datetime,
        turn: contextlib.AbstractAsyncContextManager[object] | None = None,
    ) -> bool:
        """Create the trial (and its first Pod, or its failure); False when a trial of that
        name belongs to another RolloutJob: an earlier job of this name, still being deleted.
        `turn`: entered around the trial's own request (the plan's order, `Turns`)."""
        if create.keeps:
            # A resumed job's trial: its earlier try's files move under retries/ first (run
            # again after a restart, the move finds nothing left to move).
            store = self.runtime.stores.for_spec(create.made_from.storage)
            await self._in_threads([(store, keep_try, keep) for keep in create.keeps])
        async with turn or contextlib.nullcontext():
            # Asked for now (its task runs before the next trial's is even made): the API
            # client sends trials' creations one after the other, in the order asked for.
            creating = asyncio.ensure_future(
                self.api.create_trial(self.namespace, create.manifest())
            )
        body, created = await creating
        if not created and owner_uid(body, RolloutJob.resource.kind) != self.uid:
            # Not ours: the job makes it once that one is gone (`jobs`, BLOCKED_RETRY_SEC).
            log.info(
                "%s: trial %s of an earlier job of this name is still there",
                self.where,
                create.name,
            )
            return False
        trial = self.writes.trial_written(body)
        if not created:
            return True  # an existing trial is driven like any other
        if create.failed is not None:
            place = TrialPlace(create.made_from.storage, create.made_from.job.job_name)
            if not trial.shard:
                await self.write_records([create.failed.record])
            await self._finish(trial, create.failed, place, now)
            return True
        if not create.creates_pod:
            return True  # its image is being built: its Pod waits for it (`trials.decide`)
        place = TrialPlace(create.made_from.storage, create.made_from.job.job_name)
        image = create.image.pinned_image if create.image is not None else None
        await self._create_pod(body, trial, place, create.pod_name, 0, now, image=image)
        return True

    async def _ensure_image(self, ensure: EnsureImage) -> None:
        """Make the RolloutImage (an existing one is kept); a stale failed one goes first."""
        if ensure.renew is not None and await self.api.delete_image(
            self.namespace, ensure.name, ensure.renew
        ):
            log.info(
                "%s: RolloutImage %s failed before; building it again", self.where, ensure.name
            )
        _, created = await self.api.create_image(self.namespace, ensure.manifest)
        if created:
            log.info("%s: made RolloutImage %s", self.where, ensure.name)
