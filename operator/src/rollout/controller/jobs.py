"""The reconciler of one RolloutJob: a loop, run as the job's kopf daemon, that drives the job.

Each pass looks at the job and does what is due, in three parts, the way a trial is driven
(`trials.decide`):

- it observes (`JobView`): the job's spec as understood for its generation (`jobspec`), its status,
  its trials as the index has them with its own recent writes laid over them (`ownwrites`), and
  the trials to take a step now with their Pods (`pacing`);
- it decides (`jobdecide.decide_job`, pure): write the job's config.json, create these trials,
  take these trials' steps, write the job's files, patch its status, delete it for its TTL, look
  again then;
- it acts (`jobexec.JobExecutor`). When that changed what it sees (trials written, datasets read,
  the job's files written), it looks again at once, in the same pass: the status is only ever
  worked out from a settled view.

A pass's trial steps are decided from what it saw when it began; what changes while it acts
(a Pod that finishes meanwhile) wakes the reconciler again, and the next pass follows at once.

The reconciler is the only writer of its job's trials, so no two handlers race over a trial. It
is woken by the event handlers (`runtime.Waker`), which say which trials changed, and sleeps
otherwise (`pacing.Pacer` says what is due when).

It acts on the index, which the operator's watches fill from their first listing before kopf
starts any daemon (`watches`), so a restarted operator knows every existing trial first; its own
writes are remembered until their watch events arrive, so it never acts twice on a stale view.
Names are deterministic and creates accept 409: stopping the operator at any moment and starting
it again neither duplicates nor loses a trial.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import ChainMap
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from rollout.api.resources import JobPhase, RolloutJobStatus
from rollout.controller.index import ImageEntry, TrialEntry, find_pod, pod_name_for
from rollout.controller.jobdecide import JobView, TrialLook, cancelled_records, decide_job
from rollout.controller.jobexec import JobExecutor, PostWarning
from rollout.controller.jobspec import JobSpec, Planned, StorageUnavailable, parse_job
from rollout.controller.ownwrites import OwnWrites
from rollout.controller.pacing import RESYNC_SEC, Pacer, recheck_delay
from rollout.controller.podfields import runner_started, timestamp
from rollout.controller.runtime import Runtime
from rollout.controller.ttl import ttl_after_finished
from rollout.controller.watches import PodsIndex, TrialsIndex

log = logging.getLogger(__name__)

BLOCKED_RETRY_SEC = 2.0
"""How soon a trial whose creation found an earlier job's trial of its name is tried again."""

MAX_LOOKS = 6
"""Most looks in one pass (datasets read, trials written, more trials created, files written,
status); a pass still unsettled after them is followed by the next at once."""

ImagesIndex = Mapping[tuple[str, str], Iterable[ImageEntry]]


class JobReconciler:
    """Drives one RolloutJob (see the module docstring)."""

    def __init__(
        self,
        runtime: Runtime,
        body: Mapping[str, Any],
        *,
        trials: TrialsIndex,
        pods: PodsIndex,
        images: ImagesIndex | None = None,
        post_warning: PostWarning,
    ) -> None:
        metadata = body["metadata"]
        config = runtime.config
        self.runtime = runtime
        self.body = body  # kopf's live view: always the latest object seen by the watch
        self.namespace = str(metadata["namespace"])
        self.name = str(metadata["name"])
        self.uid = str(metadata["uid"])
        self.where = f"RolloutJob {self.namespace}/{self.name}"
        self.trials_index = trials
        self.pods_index = pods
        self.images_index: ImagesIndex = images if images is not None else {}
        self.created_at = timestamp(metadata.get("creationTimestamp"))
        self.writes = OwnWrites()
        self.pacer = Pacer(
            status_interval_sec=config.status_interval_sec, recheck_sec=recheck_delay(config)
        )
        self.executor = JobExecutor(
            runtime,
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            writes=self.writes,
            post_warning=post_warning,
            leaving=self._leaving,
        )
        self._generation: int | None = None
        self._spec: JobSpec | None = None  # the spec as understood for `_generation`
        # Once in storage, for good (every generation): config.json is the job as submitted.
        self._config_written = False
        self._policies_made = False  # per generation: a new one may need other policies
        # Trials whose namesake of an earlier job of this name was still there, and since when.
        self._blocked: dict[str, float] = {}
        self._stopped: kopf.DaemonStopped | None = None

    # --- the loop

    async def run(self, stopped: kopf.DaemonStopped) -> None:
        """Reconcile until the job is deleted or the operator stops."""
        self._stopped = stopped
        waker = self.runtime.waker(self.namespace, self.name)
        try:
            while not stopped:
                self.pacer.poked(waker.take_dirty())
                delay = await self._pass()
                if stopped:
                    break
                await waker.wait(RESYNC_SEC if delay is None else min(delay, RESYNC_SEC), stopped)
            if self.body["metadata"].get("deletionTimestamp"):
                await self._farewell()
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
            delay = self.pacer.failed()
            self.runtime.metrics.reconcile_errors.labels(kind=type(err).__name__).inc()
            log.warning("%s: reconcile failed, retrying in %.1f s: %r", self.where, delay, err)
        else:
            self.pacer.succeeded()
        finally:
            self.runtime.metrics.reconcile_duration.observe(time.monotonic() - begun)
        return delay

    async def step(self) -> float | None:
        """One pass: look, decide, act, until what it sees settles; returns when to look again
        at the latest (None: when woken)."""
        now = datetime.now(UTC)
        if self._leaving():
            return None  # the job is being deleted: nothing more is created or patched
        spec = self._current_spec()
        looked = False  # the trials due a step have been looked at (once per pass)
        recheck: float | None = None
        result_uri: str | None = None
        for _ in range(MAX_LOOKS):
            status = self.writes.job_status(self.body)
            trials = self._trials(spec)
            self._wait_for_images(trials)
            names: list[str] | None = None
            if not looked and isinstance(spec, Planned) and status.phase != JobPhase.COMPLETED:
                # Only a job whose trials go on takes trial steps: no need to gather them else.
                names, looked = self.pacer.to_look_at(spec.plan), True
            view = self._view(spec, status, trials, names or (), now, result_uri)
            decision = decide_job(view, config=self.runtime.config)
            if decision.status_checked:
                self.pacer.status_checked()
            done = await self.executor.run(decision.actions, now=now)
            if names is not None:
                recheck = self.pacer.looked(names, decision.waiting, decision.due_in)
            if done.spec is not None:
                spec = done.spec
                if not isinstance(spec, StorageUnavailable):  # that one is tried again next pass
                    self._spec = spec
            result_uri = done.result_uri or result_uri
            self._config_written = self._config_written or done.config_written
            self._policies_made = self._policies_made or done.policies_made
            self._blocked.update(dict.fromkeys(done.blocked, time.monotonic()))
            if not done.changed:
                retry = BLOCKED_RETRY_SEC if self._blocked else None
                return _earliest(decision.requeue_after, recheck, retry)
        return 0.0  # still unsettled: the next pass follows at once

    async def _farewell(self) -> None:
        """The job is deleted (cancelled): its trials whose runner never started get their
        records now, as nobody else will write them. Within kopf's time for a stopping daemon;
        a failure is logged, not retried (the job is going)."""
        spec = self._spec
        if spec is None:
            return
        trials = self.writes.trials(self.trials_index.get(self.uid, ()))
        prices = self.runtime.config.unit_prices
        records = cancelled_records(spec, trials, datetime.now(UTC), prices, self._runner_started)
        if not records:
            return
        try:
            await self.executor.write_records(records)
        except Exception as err:  # the job is going: say so, and go
            log.warning(
                "%s: deleted; its trials' records could not be written: %r", self.where, err
            )
        else:
            log.info(
                "%s: deleted; wrote the records of %d trials not started", self.where, len(records)
            )

    def _leaving(self) -> bool:
        """The job is being deleted (or we asked for it) or the operator stops: start nothing
        new."""
        deleting = bool(self.body["metadata"].get("deletionTimestamp")) or self.writes.job_deleted
        return deleting or bool(self._stopped)

    # --- what it sees

    def _current_spec(self) -> JobSpec:
        """The spec as understood for the job's generation; a new one is parsed afresh and its
        every trial looked at."""
        generation = self.body["metadata"].get("generation")
        if self._spec is None or generation != self._generation:
            self._generation = generation
            self._spec = parse_job(self.body, self.where)
            self._policies_made = False
            self.pacer.everything()
        return self._spec

    def _view(
        self,
        spec: JobSpec,
        status: RolloutJobStatus,
        trials: Mapping[str, TrialEntry],
        look_at: Iterable[str],
        now: datetime,
        result_uri: str | None,
    ) -> JobView:
        return JobView(
            namespace=self.namespace,
            uid=self.uid,
            generation=self._generation,
            spec=spec,
            status=status,
            now=now,
            trials=trials,
            looks=[look for name in look_at if (look := self._look(trials.get(name)))],
            deleting=bool(self.body["metadata"].get("deletionTimestamp")),
            ttl_seconds=ttl_after_finished(self.body.get("spec")),
            status_due_in=self.pacer.status_due_in(),
            result_uri=result_uri,
            config_written=self._config_written,
            policies_made=self._policies_made,
            images=NamespaceImages(self.images_index, self.namespace),
            created_at=self.created_at,
            blocked=self._still_blocked(),
            runner_started=self._runner_started,
        )

    def _runner_started(self, trial: TrialEntry) -> bool:
        """Whether the trial's current Pod shows its runner started, as the index has it."""
        pods = self.pods_index.get((self.namespace, trial.name), ())
        pod = find_pod(pods, trial.current_pod_name)
        return pod is not None and runner_started(pod.body)

    def _still_blocked(self) -> frozenset[str]:
        """The trials not to create now (`_blocked`), until BLOCKED_RETRY_SEC has passed."""
        if not self._blocked:
            return frozenset()
        since = time.monotonic() - BLOCKED_RETRY_SEC
        self._blocked = {name: at for name, at in self._blocked.items() if at > since}
        return frozenset(self._blocked)

    def _trials(self, spec: JobSpec) -> Mapping[str, TrialEntry]:
        """The job's trials: the index with our own newer writes over it, over a resumed job's
        trials that keep their earlier run's records (`resume`)."""
        trials = self.writes.trials(self.trials_index.get(self.uid, ()))
        if isinstance(spec, Planned) and spec.resumed is not None and spec.resumed.kept:
            return ChainMap(trials, spec.resumed.kept)
        return trials

    def _wait_for_images(self, trials: Mapping[str, TrialEntry]) -> None:
        """Tell the runtime which RolloutImages this job's trials wait for: their changes wake
        the job."""
        waited = {t.image_build for t in trials.values() if t.image_build and not t.finished}
        self.runtime.wait_for_images(self.namespace, self.name, waited)

    def _look(self, trial: TrialEntry | None) -> TrialLook | None:
        """A trial with its current Pod, as the index and our own recent writes have them."""
        if trial is None:
            return None
        pod_name = trial.current_pod_name
        pods = list(self.pods_index.get((self.namespace, trial.name), ()))
        pod = find_pod(pods, pod_name)
        previous = None
        previous_gone: float | None = None
        if trial.infra_retries > 0:
            previous_name = pod_name_for(trial.name, trial.infra_retries - 1)
            previous = find_pod(pods, previous_name)
            if previous is None:
                previous_gone = self.runtime.deleted_running_ago(
                    self.namespace, previous_name, trial.uid
                )
        if pod is not None:
            self.writes.pods_created.discard(pod_name)  # the watch has caught up
        return TrialLook(
            trial,
            pod,
            pod_created=pod_name in self.writes.pods_created,
            pod_deleted=self.runtime.pod_deleted(self.namespace, pod_name, trial.uid),
            pod_deleting=pod_name in self.writes.pods_deleted,
            previous_pod=previous,
            previous_gone_running_sec=previous_gone,
        )


class NamespaceImages(Mapping[str, ImageEntry]):
    """The RolloutImages of one namespace by name, looked up in the index on demand (the index
    holds every namespace's, and a job asks for a few)."""

    def __init__(self, index: ImagesIndex, namespace: str) -> None:
        self._index = index
        self._namespace = namespace

    def __getitem__(self, name: str) -> ImageEntry:
        entries = list(self._index.get((self._namespace, name), ()))
        if not entries:
            raise KeyError(name)
        return entries[-1]

    def __iter__(self) -> Iterator[str]:
        return (name for namespace, name in self._index if namespace == self._namespace)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _earliest(*delays: float | None) -> float | None:
    known = [d for d in delays if d is not None]
    return min(known) if known else None
