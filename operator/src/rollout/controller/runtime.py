"""What the operator's handlers share, kept in kopf's memo: configuration, API client, stores,
the dataset cache, the registry credentials, metrics, and the wake-up calls between event
handlers and job reconcilers.

Each RolloutJob has one reconciler (a kopf daemon) that sleeps until something about the job
changes. The event handlers of jobs, trials and trial Pods only `wake` it: many events in a burst
wake it once, and it then looks at everything at once (the index is already up to date: the
operator's watches index an event before they call the handler). A RolloutImage's change wakes
the jobs whose trials wait for it: each job's reconciler says which images it waits for
(`wait_for_images`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from rollout.api.resources import LABEL_JOB, RolloutJob, RolloutTrial
from rollout.api.trials import label_value
from rollout.controller.buckets import StoreCache
from rollout.controller.config import OperatorConfig
from rollout.controller.datasets import DatasetResolver
from rollout.controller.index import owner_name, owner_uid
from rollout.controller.kubeapi import KubeApi
from rollout.controller.metrics import OperatorMetrics
from rollout.controller.podfields import runner_state
from rollout.controller.registry import DockerConfig
from rollout.controller.watches import (
    PodsIndex,
    TrialsIndex,
    Watch,
    pods_index,
    stop_watches,
    trials_index,
)

DELETED_POD_MEMORY_SEC = 600.0
"""How long a Pod's deletion is remembered: long enough for its trial's reconciler to see it."""


class Waker:
    """Wakes a job's reconciler; any number of pokes before it wakes count as one.

    A poke names the trial that changed (a trial or its Pod), or none when the job itself did
    (its reconciler notices a new spec by itself); the reconciler then looks again at the named
    trials only (`take_dirty`), or at all of them after a poke about `everything`.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._dirty: set[str] = set()
        self._everything = True  # the first pass looks at every trial

    def poke(self, trial: str | None = None, *, everything: bool = False) -> None:
        if everything:
            self._everything = True
        elif trial is not None:
            self._dirty.add(trial)
        self._event.set()

    def take_dirty(self) -> set[str] | None:
        """The trials poked since the last call; None when everything is to be looked at."""
        dirty, everything = self._dirty, self._everything
        self._dirty, self._everything = set(), False
        return None if everything else dirty

    async def wait(self, timeout: float | None, stopped: kopf.DaemonStopped) -> None:  # noqa: ASYNC109
        """Until poked, stopped, or `timeout` seconds (None: no timeout) have passed."""
        if not self._event.is_set() and not stopped:
            poked = asyncio.ensure_future(self._event.wait())
            stop = asyncio.ensure_future(_stopped(stopped))
            try:
                await asyncio.wait(
                    {poked, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for task in (poked, stop):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        self._event.clear()


async def _stopped(stopped: kopf.DaemonStopped) -> None:
    await stopped.wait()


class Runtime:
    """The operator's shared state (one per operator process, in kopf's memo as `runtime`)."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        api: KubeApi,
        metrics: OperatorMetrics,
        stores: StoreCache | None = None,
        datasets: DatasetResolver | None = None,
        registry_config: DockerConfig | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.metrics = metrics
        self.stores = stores or StoreCache(config.storage, config.storage_credentials)
        self.datasets = datasets or DatasetResolver()
        self.registry_config = registry_config
        """The operator's own registry credentials, for looking images up (None: anonymous)."""
        self.trials: TrialsIndex = trials_index()
        """RolloutTrials by their job's uid, as the operator's watches keep them."""
        self.pods: PodsIndex = pods_index()
        """Trial Pods by (namespace, trial name), as the operator's watches keep them."""
        self.watches: list[Watch] = []
        self._wakers: dict[tuple[str, str], Waker] = {}
        self._deleted_pods: dict[tuple[str, str, str], tuple[float, bool]] = {}
        """Recently deleted trial Pods: when (monotonic), and whether their runner ran then."""
        self._image_waiters: dict[tuple[str, str], set[str]] = {}

    def close(self) -> None:
        stop_watches(self.watches)
        self.api.close()

    # --- waking job reconcilers

    def waker(self, namespace: str, job_name: str) -> Waker:
        """A new waker for a job's reconciler (keyed like the job's `rollout.dev/job` label).

        Always a new one: a job deleted and made again under the same name gets a reconciler of
        its own, which the old one's `forget_job` must not take away.
        """
        waker = self._wakers[(namespace, label_value(job_name))] = Waker()
        return waker

    def forget_job(self, namespace: str, job_name: str, waker: Waker) -> None:
        """Drop a job's waker (only this one: a job of the same name may have a new one)."""
        key = (namespace, label_value(job_name))
        if self._wakers.get(key) is waker:
            del self._wakers[key]
            self.wait_for_images(namespace, job_name, ())

    def wait_for_images(self, namespace: str, job_name: str, images: Iterable[str]) -> None:
        """Say which RolloutImages a job's trials wait for now (replacing what it said before):
        a change of one of them wakes the job."""
        job = label_value(job_name)
        wanted = {(namespace, image) for image in images}
        for key in [k for k, jobs in self._image_waiters.items() if job in jobs]:
            if key not in wanted:
                self._image_waiters[key].discard(job)
                if not self._image_waiters[key]:
                    del self._image_waiters[key]
        for key in wanted:
            self._image_waiters.setdefault(key, set()).add(job)

    def wake_image_waiters(self, namespace: str, image: str) -> None:
        """A RolloutImage changed: wake every job whose trials wait for it."""
        for job in self._image_waiters.get((namespace, image), ()):
            self.wake_all(namespace, job)

    def wake(self, namespace: str, job_label: str, trial: str | None = None) -> None:
        """Wake the reconciler of the job whose `rollout.dev/job` label is `job_label`, for one
        of its trials or (None) for the job as a whole."""
        waker = self._wakers.get((namespace, job_label))
        if waker is not None:
            waker.poke(trial)

    def wake_all(self, namespace: str, job_label: str) -> None:
        """Wake a job's reconciler to look at every one of its trials."""
        waker = self._wakers.get((namespace, job_label))
        if waker is not None:
            waker.poke(everything=True)

    def wake_every_job(self) -> None:
        """Wake every job's reconciler to look at all its trials (after events were missed)."""
        for waker in self._wakers.values():
            waker.poke(everything=True)

    def wake_for(self, body: Mapping[str, Any], trial: str | None) -> None:
        """Wake the job a trial or a trial Pod belongs to (by label; a trial also by owner)."""
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        label = (metadata.get("labels") or {}).get(LABEL_JOB)
        owner = owner_name(body, RolloutJob.resource.kind)
        jobs = {str(label)} if label else set()
        if owner:
            jobs.add(label_value(owner))
        for job in jobs:
            if trial is None:  # a Pod that names no trial: look at them all
                self.wake_all(namespace, job)
            else:
                self.wake(namespace, job, trial)

    # --- Pods that went away

    def note_pod_deleted(self, body: Mapping[str, Any]) -> None:
        """Remember that a trial Pod was deleted, so that its trial is retried, not recreated,
        and whether its runner was still running then (`deleted_running_ago`)."""
        metadata = body.get("metadata") or {}
        trial_uid = owner_uid(body, RolloutTrial.resource.kind) or ""
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), trial_uid)
        now = time.monotonic()
        self._deleted_pods.pop(key, None)
        # A Pod whose phase is over ran its containers to their end (an evicted one among them).
        phase = (body.get("status") or {}).get("phase")
        running = phase not in ("Succeeded", "Failed") and "running" in runner_state(body)
        # Insertion order is age order: the oldest come first.
        self._deleted_pods[key] = (now, running)
        cutoff = now - DELETED_POD_MEMORY_SEC
        while self._deleted_pods:
            oldest, (at, _) = next(iter(self._deleted_pods.items()))
            if at >= cutoff:
                break
            del self._deleted_pods[oldest]

    def pod_deleted(self, namespace: str, pod_name: str, trial_uid: str) -> bool:
        return (namespace, pod_name, trial_uid) in self._deleted_pods

    def deleted_running_ago(self, namespace: str, pod_name: str, trial_uid: str) -> float | None:
        """Seconds since a trial Pod went from the API while it showed its runner running (force-
        deleted, or its node gone: a kubelet stopping a Pod lets it go once its containers
        ended), whose runner may be uploading still; None for any other Pod."""
        at, running = self._deleted_pods.get((namespace, pod_name, trial_uid), (0.0, False))
        return time.monotonic() - at if running else None
