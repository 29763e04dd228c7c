"""The reconciler of one RolloutJob: a loop, run as the job's kopf daemon, that drives the job.

Each pass (`step`) looks at the job, its trials and their Pods as the index has them and does
what is due, in this order:

1. check the spec (an invalid job gets `Valid=False` and `Failed=True` conditions, a Warning
   event, and nothing else) and resolve its datasets from their manifests in storage;
2. drive every trial of the job that is under way: create its Pod when it has none, mark it
   Running, record its outcome from the Pod (and remove the Pod), or retry it in a new Pod when
   the old one was lost (`trials.decide`);
3. create the next trials in the seed's order while fewer than nConcurrentTrials are unfinished,
   each with its Pod right away (a trial whose image would need a build fails at once);
4. once every trial has finished, write config.json and result.json to storage; then patch the
   job's status, at most once per `status_interval_sec` unless its phase changes;
5. a finished job with ttlSecondsAfterFinished is deleted when its time comes.

The reconciler is the only writer of its job's trials, so no two handlers race over a trial. It
is woken by the event handlers (`runtime.Waker`), which say which trials changed, and sleeps
otherwise; a pass looks again at those trials only (and at Pods waiting on a grace period when
it is time), and at every trial on its first pass and every RESYNC_SEC. The job's status (an
O(trials) computation) is worked out at most once per status interval unless its phase changes.

It acts on the index, which kopf fills from the initial listing before any daemon starts, so a
restarted operator knows every existing trial first; its own writes are remembered (`_overlay`)
until their watch events arrive, so it never acts twice on a stale view. Names are deterministic
and creates accept 409: stopping the operator at any moment and starting it again neither
duplicates nor loses a trial.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from pydantic import ValidationError

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.problems import validation_problems
from rollout.api.resources import (
    JobConditionReason,
    JobPhase,
    RolloutJob,
    RolloutJobStatus,
    StorageSpec,
    TrialPhase,
)
from rollout.controller.buckets import NoStorage, job_storage_spec
from rollout.controller.datasets import DatasetProblem
from rollout.controller.finish import job_result, write_job_files
from rollout.controller.index import (
    PodEntry,
    TrialEntry,
    find_pod,
    newer,
    pod_name_for,
    trial_entry,
)
from rollout.controller.planner import (
    JobPlan,
    PlannedTrial,
    all_finished,
    next_to_create,
    plan_job,
    unfinished_count,
)
from rollout.controller.pod import render_trial_pod
from rollout.controller.runtime import Runtime
from rollout.controller.status import (
    invalid_status,
    job_status,
    outcomes,
    status_patch,
    storage_unavailable_status,
    trial_counts,
)
from rollout.controller.trial_status import failed_status
from rollout.controller.trials import (
    CreatePod,
    DeletePod,
    Nothing,
    PatchStatus,
    RetryPod,
    TrialAction,
    decide,
    image_build_message,
    trial_manifest,
)
from rollout.storage import ObjectStore, StorageError

log = logging.getLogger(__name__)

RESYNC_SEC = 60.0
"""Longest sleep between two passes, even when nothing wakes the reconciler."""
ERROR_BACKOFF_SEC = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses after a failed pass (API or storage errors), growing while failures repeat."""
STORAGE_RETRY_SEC = 10.0
OVERLAY_TTL_SEC = 300.0
"""How long the reconciler trusts its own write over an index that has not caught up."""
PENDING_WRITE_TTL_SEC = 30.0
"""How long a Pod it created (or deleted) may take to appear in (or leave) the index."""

PostWarning = Callable[[str, str], None]
TrialsIndex = Mapping[str, Iterable[TrialEntry]]
PodsIndex = Mapping[tuple[str, str], Iterable[PodEntry]]


def plain(value: Any) -> Any:
    """A kopf body (mapping views over the raw object) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def parse_status(raw: Any) -> RolloutJobStatus:
    """The job's status as the model; an unreadable status counts as none."""
    try:
        return RolloutJobStatus.model_validate(plain(raw or {}))
    except ValidationError:
        return RolloutJobStatus()


class InvalidJob(Exception):
    """The job cannot run as specified: the reason (a condition reason) and what is wrong."""

    def __init__(self, reason: JobConditionReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class JobReconciler:
    """Drives one RolloutJob (see the module docstring)."""

    def __init__(
        self,
        runtime: Runtime,
        body: Mapping[str, Any],
        *,
        trials: TrialsIndex,
        pods: PodsIndex,
        post_warning: PostWarning,
    ) -> None:
        metadata = body["metadata"]
        self.runtime = runtime
        self.config = runtime.config
        self.api = runtime.api
        self.body = body  # kopf's live view: always the latest object seen by the watch
        self.namespace = str(metadata["namespace"])
        self.name = str(metadata["name"])
        self.uid = str(metadata["uid"])
        self.where = f"RolloutJob {self.namespace}/{self.name}"
        self.trials_index = trials
        self.pods_index = pods
        self.post_warning = post_warning

        self._generation: int | None = None
        self._job: RolloutJob | None = None
        self._invalid: InvalidJob | None = None
        self._plan: JobPlan | None = None
        self._storage: StorageSpec | None = None
        self._store: ObjectStore | None = None
        self._known_status = RolloutJobStatus()
        self._known_rv: str | None = None
        self._status_checked = -math.inf
        self._dirty: set[str] | None = None  # trials to look at this pass; None: every one
        self._full_pass_at = -math.inf
        self._waiting: set[str] = set()  # trials whose Pod waits on a grace period
        self._recheck_at = math.inf
        self._overlay: dict[str, tuple[TrialEntry, float]] = {}
        self._pods_requested: dict[str, float] = {}
        self._pods_deleting: dict[str, float] = {}
        self._failures = 0
        self._stopped: kopf.DaemonStopped | None = None

    # --- the loop

    async def run(self, stopped: kopf.DaemonStopped) -> None:
        """Reconcile until the job is deleted or the operator stops."""
        self._stopped = stopped
        waker = self.runtime.waker(self.namespace, self.name)
        try:
            while not stopped:
                dirty = waker.take_dirty()
                if dirty is None or self._dirty is None:
                    self._dirty = None
                else:
                    self._dirty |= dirty
                delay = await self._pass()
                if stopped:
                    break
                await waker.wait(RESYNC_SEC if delay is None else min(delay, RESYNC_SEC), stopped)
        finally:
            self.runtime.forget_job(self.namespace, self.name, waker)
            self.runtime.metrics.jobs.forget(self.uid)

    async def _pass(self) -> float | None:
        begun = time.monotonic()
        try:
            delay = await self.step()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # any failure: log it, back off, try the whole pass again
            self._failures += 1
            delay = ERROR_BACKOFF_SEC[min(self._failures, len(ERROR_BACKOFF_SEC)) - 1]
            self.runtime.metrics.reconcile_errors.labels(kind=type(err).__name__).inc()
            log.warning("%s: reconcile failed, retrying in %.1f s: %r", self.where, delay, err)
            # What was dirty is kept (not cleared below) for the next pass.
        else:
            self._failures = 0
            self._dirty = set()
        finally:
            self.runtime.metrics.reconcile_duration.observe(time.monotonic() - begun)
        return delay

    async def step(self) -> float | None:
        """One pass; returns when to look again at the latest (None: when woken)."""
        now = datetime.now(UTC)
        if self._leaving():
            return None  # the job is being deleted: nothing more is created or patched
        self._refresh_known()
        generation = self.body["metadata"].get("generation")
        if generation != self._generation:
            self._reset(generation)
        if self._invalid is not None:
            return await self._report_invalid(self._invalid, now)
        job = self._job
        assert job is not None  # _reset parsed it
        if self._completed():
            return await self._expire(now)
        if self._plan is None:
            try:
                await self._make_plan(job)
            except InvalidJob as invalid:
                self._invalid = invalid
                return await self._report_invalid(invalid, now)
            except StorageError as err:
                unavailable = storage_unavailable_status(
                    self._known_status,
                    message=f"Object storage cannot be reached; retrying: {err}",
                    generation=self._generation,
                    now=now,
                )
                await self._patch_status(unavailable)
                return STORAGE_RETRY_SEC
        waiting = await self._drive_trials(job, now)
        await self._create_trials(job, now)
        delay = await self._update_status(job, now)
        if self._completed():
            return await self._expire(now)
        if waiting:
            delay = _earliest(delay, max(self._recheck_at - time.monotonic(), 0.0))
        return delay

    def _leaving(self) -> bool:
        """The job is being deleted or the operator stops: start nothing new."""
        deleting = bool(self.body["metadata"].get("deletionTimestamp"))
        return deleting or bool(self._stopped)

    def _completed(self) -> bool:
        """A Completed job is done for good (like a Kubernetes Job): only its TTL is left."""
        return self._known_status.phase == JobPhase.COMPLETED

    # --- the job's spec and plan

    def _reset(self, generation: int | None) -> None:
        self._generation = generation
        self._dirty = None  # a new spec: look at every trial
        self._plan = self._job = self._invalid = None
        raw = {key: plain(self.body.get(key)) for key in ("apiVersion", "kind", "metadata", "spec")}
        try:
            self._job = RolloutJob.model_validate(raw)
        except ValidationError as err:
            problems = validation_problems(err, self.where, RolloutJob)
            self._invalid = InvalidJob(
                JobConditionReason.INVALID_SPEC, "; ".join(str(p) for p in problems)
            )

    async def _make_plan(self, job: RolloutJob) -> None:
        if refusal := job.spec.environment.type.refusal_on_cluster():
            # Its trials would wait forever for a bridge controller that does not exist yet.
            raise InvalidJob(
                JobConditionReason.UNSUPPORTED_ENVIRONMENT,
                f"{self.where}: spec.environment.type is {refusal}",
            )
        try:
            storage = job_storage_spec(job.spec.storage, self.config.storage)
        except NoStorage as err:
            raise InvalidJob(JobConditionReason.INVALID_SPEC, f"{self.where}: {err}") from None
        store = self.runtime.stores.for_spec(storage)
        try:
            datasets = await self.runtime.datasets.resolve(job.spec.datasets, store)
        except DatasetProblem as err:
            raise InvalidJob(
                JobConditionReason.DATASET_NOT_FOUND, f"{self.where}: {err.message}"
            ) from None
        try:
            plan = plan_job(
                self.name, [a.name for a in job.spec.agents], datasets, job.spec.n_attempts
            )
        except ValueError as err:
            raise InvalidJob(JobConditionReason.INVALID_SPEC, f"{self.where}: {err}") from None
        self._plan, self._storage, self._store = plan, storage, store

    async def _report_invalid(self, invalid: InvalidJob, now: datetime) -> float | None:
        desired = invalid_status(
            self._known_status,
            reason=invalid.reason,
            message=invalid.message,
            generation=self._generation,
            now=now,
        )
        if status_patch(desired) != status_patch(self._known_status):
            # Only when the status changes: a restarted operator does not post it again.
            self.post_warning(invalid.reason.value, invalid.message)
            log.warning("%s cannot run: %s", self.where, invalid.message)
            await self._patch_status(desired)
        return await self._expire(now)

    # --- trials

    def _view(self) -> dict[str, TrialEntry]:
        """The job's trials by name: the index, with our own newer writes laid over it."""
        trials = {entry.name: entry for entry in self.trials_index.get(self.uid, ())}
        clock = time.monotonic()
        for name, (mine, at) in list(self._overlay.items()):
            indexed = trials.get(name)
            if indexed is not None and (
                indexed.resource_version == mine.resource_version
                or newer(indexed.resource_version, mine.resource_version)
            ):
                del self._overlay[name]  # the watch has caught up
            elif clock - at > OVERLAY_TTL_SEC:
                del self._overlay[name]
            else:
                trials[name] = mine
        return trials

    def _remember(self, body: Mapping[str, Any]) -> TrialEntry:
        entry = trial_entry(body)
        self._overlay[entry.name] = (entry, time.monotonic())
        return entry

    def _pending(self, writes: dict[str, float], name: str) -> bool:
        at = writes.get(name)
        if at is None:
            return False
        if time.monotonic() - at > PENDING_WRITE_TTL_SEC:
            del writes[name]
            return False
        return True

    def _to_look_at(self) -> list[str]:
        """The trials this pass looks at: the dirty ones and, when their time has come, those
        whose Pods wait on a grace period; every trial on a full pass (the first, after a new
        spec or an error, and every RESYNC_SEC)."""
        assert self._plan is not None
        clock = time.monotonic()
        if self._dirty is None or clock - self._full_pass_at >= RESYNC_SEC:
            self._full_pass_at = clock
            return [t.name for t in self._plan.trials]
        names = set(self._dirty)
        if clock >= self._recheck_at:
            names |= self._waiting
        return [name for name in names if name in self._plan.names]

    async def _drive_trials(self, job: RolloutJob, now: datetime) -> bool:
        """Take the started trials one step; True if some Pod waits on a grace period."""
        trials = self._view()
        for name in self._to_look_at():
            entry = trials.get(name)
            self._waiting.discard(name)
            if entry is None or (entry.finished and not entry.runs_in_pod):
                continue
            pod_name = entry.current_pod_name
            pod = find_pod(self.pods_index.get((self.namespace, entry.name), ()), pod_name)
            if pod is not None:
                self._pods_requested.pop(pod_name, None)
            elif entry.finished:
                continue  # the common case of a finished trial: nothing left to clean up
            action = decide(
                entry,
                pod,
                now=now,
                config=self.config,
                max_infra_retries=job.spec.max_infra_retries,
                pod_requested=self._pending(self._pods_requested, pod_name),
                pod_deleted=self.runtime.pod_deleted(self.namespace, pod_name, entry.uid),
            )
            if isinstance(action, Nothing):
                if action.waiting:
                    self._waiting.add(name)
            else:
                await self._apply(entry, action, now)
        clock = time.monotonic()
        if not self._waiting:
            self._recheck_at = math.inf
        elif self._recheck_at == math.inf or clock >= self._recheck_at:
            self._recheck_at = clock + self._recheck_delay()
        return bool(self._waiting)

    async def _apply(self, entry: TrialEntry, action: TrialAction, now: datetime) -> None:
        match action:
            case CreatePod(pod_name=pod_name, retry=retry):
                trial = await self.api.get_trial(self.namespace, entry.name)
                if trial is not None:
                    await self._create_pod(trial, pod_name, retry, now)
            case DeletePod(pod_name=pod_name):
                await self._delete_pod(pod_name)
            case PatchStatus():
                patched = await self.api.patch_trial_status(
                    self.namespace, entry.name, action.status
                )
                if patched is None:
                    return
                done = self._remember(patched)
                if action.final:
                    error = done.error_type.value if done.error_type else None
                    phase = done.phase.value if done.phase else ""
                    self.runtime.metrics.trial_finished(phase, error, action.durations)
                if action.delete_pod:
                    await self._delete_pod(action.delete_pod)
            case RetryPod():
                # The retry is recorded first: a restart in between then creates the new Pod
                # instead of retrying again.
                patched = await self.api.patch_trial_status(
                    self.namespace, entry.name, action.status
                )
                if patched is None:
                    return
                self._remember(patched)
                log.info(
                    "%s: trial %s lost its Pod; retry %d", self.where, entry.name, action.retry
                )
                if action.old_pod:
                    await self._delete_pod(action.old_pod)
                await self._create_pod(patched, action.new_pod, action.retry, now)

    async def _create_pod(
        self, trial: Mapping[str, Any], pod_name: str, retry: int, now: datetime
    ) -> None:
        try:
            pod = render_trial_pod(trial, config=self.config, pod_name=pod_name, retry=retry)
        except (InvalidInput, ValueError) as err:
            # Our own trial spec cannot be rendered (edited by hand?): the trial fails, the job
            # goes on.
            status = failed_status(
                ErrorType.INTERNAL_ERROR,
                f"The trial's Pod cannot be made: {err}",
                now,
                pod_name=None,
            )
            name = str(trial["metadata"]["name"])
            patched = await self.api.patch_trial_status(self.namespace, name, status)
            if patched is not None:
                self._remember(patched)
            return
        self._pods_requested[pod_name] = time.monotonic()
        await self.api.create_pod(self.namespace, pod)

    async def _delete_pod(self, pod_name: str) -> None:
        if self._pending(self._pods_deleting, pod_name):
            return
        self._pods_deleting[pod_name] = time.monotonic()
        await self.api.delete_pod(self.namespace, pod_name)

    async def _create_trials(self, job: RolloutJob, now: datetime) -> None:
        assert self._plan is not None
        trials = self._view()
        chosen = next_to_create(
            self._plan,
            trials.__contains__,
            unfinished=unfinished_count(self._plan, trials),
            concurrency=job.spec.n_concurrent_trials,
            suspended=job.spec.suspend,
        )
        for planned in chosen:
            if self._leaving():  # checked before each: the job may go while trials are created
                return
            await self._create_trial(job, planned, now)

    async def _create_trial(self, job: RolloutJob, planned: PlannedTrial, now: datetime) -> None:
        assert self._storage is not None
        manifest = trial_manifest(
            job,
            planned,
            namespace=self.namespace,
            job_uid=self.uid,
            storage=self._storage,
            runner_image=job.spec.runner_image or self.config.runner_image,
        )
        body, created = await self.api.create_trial(self.namespace, manifest)
        entry = self._remember(body)
        if not created or not job.spec.environment.type.runs_as_pods:
            return  # an existing trial is driven like any other; the bridge runs the others
        message = image_build_message(
            planned.key.task, planned.task.config, force_build=job.spec.environment.force_build
        )
        if message is not None:
            status = failed_status(ErrorType.ENVIRONMENT_BUILD_FAILED, message, now, pod_name=None)
            patched = await self.api.patch_trial_status(self.namespace, entry.name, status)
            if patched is not None:
                self._remember(patched)
                self.runtime.metrics.trial_finished(
                    TrialPhase.FAILED.value, ErrorType.ENVIRONMENT_BUILD_FAILED.value, {}
                )
            return
        await self._create_pod(body, pod_name_for(entry.name, 0), 0, now)

    def _recheck_delay(self) -> float:
        """How soon to look again at Pods that wait: a fraction of the shortest grace period."""
        grace = min(self.config.unschedulable_grace_sec, self.config.image_pull_grace_sec)
        return min(max(grace / 4, 0.05), 15.0)

    # --- the job's status

    def _refresh_known(self) -> None:
        """Take the status from the live body unless our own last patch is newer."""
        rv = str(self.body["metadata"].get("resourceVersion") or "")
        if self._known_rv is None or (rv != self._known_rv and newer(rv, self._known_rv)):
            self._known_status = parse_status(self.body.get("status"))
            self._known_rv = rv

    def _status_urgent(self, job: RolloutJob, done: bool) -> bool:
        """Whether the status must be looked at now rather than at the next interval: a new
        phase (started, suspended or resumed, all trials finished) or a new generation."""
        known = self._known_status
        return (
            done
            or known.phase in (None, JobPhase.PENDING, JobPhase.FAILED)
            or known.observed_generation != self._generation
            or job.spec.suspend != (known.phase == JobPhase.SUSPENDED)
        )

    async def _update_status(self, job: RolloutJob, now: datetime) -> float | None:
        """Compute the status (at most once per status interval unless urgent) and patch it
        when it changed; finish the job (its files in storage) once every trial has ended."""
        assert self._plan is not None
        assert self._store is not None
        trials = self._view()
        done = all_finished(self._plan, trials)
        wait = self._status_checked + self.config.status_interval_sec - time.monotonic()
        if wait > 0 and not self._status_urgent(job, done):
            return wait
        self._status_checked = time.monotonic()
        result_uri: str | None = None
        if done:
            moment = now.replace(microsecond=0)
            result = job_result(
                job,
                outcomes(self._plan, trials),
                started_at=self._known_status.started_at or moment,
                ended_at=moment,
            )
            result_uri = (await write_job_files(self._store, job, result)).result_uri
        desired = job_status(
            plan=self._plan,
            trials=trials,
            previous=self._known_status,
            generation=self._generation,
            suspended=job.spec.suspend,
            metrics=[m.type for m in job.spec.metrics],
            now=now,
            result_uri=result_uri,
        )
        self._report_gauges(trials)
        await self._patch_status(desired)
        return None

    def _report_gauges(self, trials: Mapping[str, TrialEntry]) -> None:
        assert self._plan is not None
        running, finished = trial_counts(self._plan, trials)
        succeeded = sum(
            1
            for t in self._plan.trials
            if (e := trials.get(t.name)) and e.phase == TrialPhase.SUCCEEDED
        )
        self.runtime.metrics.jobs.report(
            self.uid,
            {
                TrialPhase.PENDING.value: len(self._plan) - running - finished,
                TrialPhase.RUNNING.value: running,
                TrialPhase.SUCCEEDED.value: succeeded,
                TrialPhase.FAILED.value: finished - succeeded,
            },
            active=unfinished_count(self._plan, trials),
        )

    async def _patch_status(self, desired: RolloutJobStatus) -> None:
        """Patch the status if it differs from what the job has."""
        patch = status_patch(desired)
        if patch == status_patch(self._known_status):
            return
        patched = await self.api.patch_job_status(self.namespace, self.name, patch)
        if patched is not None:
            self._known_status = parse_status(patched.get("status"))
            self._known_rv = str((patched.get("metadata") or {}).get("resourceVersion") or "")

    async def _expire(self, now: datetime) -> float | None:
        """Delete a finished job whose ttlSecondsAfterFinished has passed; else when it will."""
        ttl = (self.body.get("spec") or {}).get("ttlSecondsAfterFinished")
        ended = self._known_status.ended_at
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0 or ended is None:
            return None
        due = (ended + timedelta(seconds=ttl) - now).total_seconds()
        if due > 0:
            return due
        log.info("%s finished %d s ago; ttlSecondsAfterFinished deletes it", self.where, ttl)
        await self.api.delete_job(self.namespace, self.name)
        return None


def _earliest(*delays: float | None) -> float | None:
    known = [d for d in delays if d is not None]
    return min(known) if known else None
