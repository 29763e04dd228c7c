"""The bridge's reconciler: which trials it runs, how many at once, and what it does at start.

The bridge's watch (`watch.TrialWatch`) hands every event of a bridge trial to `Bridge.observe`,
and after each listing every unfinished one to `Bridge.resync`; the bridge keeps, per provider,
the runs under way and the trials waiting for a slot (the provider's limit,
`BridgeSettings.limits`), in the order it saw them. A slot that frees starts
the next waiting trial. Claims and the steps a trial can take are `claim`'s; a run is `runs`'.

A trial the bridge lost (its previous process started it, then stopped) first has its sandbox
ended, found by the labels naming the trial and this bridge, then runs again as an
infrastructure retry (`claim.Step.RETRY`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from rollout.bridge import claim
from rollout.bridge.claim import Step
from rollout.bridge.kube import BridgeApi, ClaimOutcome, SecretMissing
from rollout.bridge.metrics import BridgeMetrics
from rollout.bridge.providers.base import Provider, ProviderError
from rollout.bridge.providers.registry import Providers, provider_key
from rollout.bridge.runs import (
    TrialRef,
    TrialRun,
    keep_lost_try,
    lost_try,
    retries_exhausted,
    write_outcome,
)
from rollout.bridge.settings import BridgeSettings
from rollout.controller.buckets import StoreCache
from rollout.controller.trial_status import claimed_status
from rollout.storage import ObjectStore, RetryPolicy

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name) of a trial."""


def key_of(body: Mapping[str, Any]) -> Key:
    metadata = body.get("metadata") or {}
    return (str(metadata.get("namespace")), str(metadata.get("name")))


SWEEP_SEC = 300.0
"""How often the bridge looks for containers of its own that no run of its holds."""
RETAKE_SEC = 30.0
"""How long after a failed attempt to take a trial the bridge tries again."""
STOP_GRACE_SEC = 60.0
"""How long a stopping bridge waits for its runs to end their sandboxes and upload what they
have (the chart's terminationGracePeriodSeconds is longer)."""


class Bridge:
    """One bridge process's runs and waiting trials."""

    def __init__(
        self,
        settings: BridgeSettings,
        api: BridgeApi,
        providers: Providers,
        *,
        work_root: Path | None = None,
        metrics: BridgeMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics or BridgeMetrics(CollectorRegistry())
        self.api = api
        self.providers = providers
        self.work_root = work_root
        if work_root is not None:
            work_root.mkdir(parents=True, exist_ok=True)
        # Uploads get the runner's own retry policy (minutes), not the operator's (seconds).
        self.stores = StoreCache(settings.storage, settings.storage_credentials, RetryPolicy())
        self.runs: dict[Key, tuple[TrialRun | None, asyncio.Task[None]]] = {}
        self.waiting: dict[str, OrderedDict[Key, Mapping[str, Any]]] = {}
        self._slots: dict[Key, str] = {}
        self._closing = False
        self._sweeping: asyncio.Task[None] | None = None
        self._stopping: set[Key] = set()
        """Trials deleted while this process takes them: their run stops as soon as it exists."""
        self.started: list[Key] = []
        """The trials whose sandbox this process started a try at, in order (a trial twice:
        twice), for the logs and for tests of the claim protocol."""

    @property
    def identity(self) -> str:
        return self.settings.identity

    # --- events

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """Take note of a trial's latest state (from the watch) and act on it."""
        key = key_of(body)
        run = self.runs.get(key)
        step = claim.decide(body, self.identity, running_here=run is not None)
        if deleted or step is Step.STOP:
            self._forget(key)
            if run is not None:
                log.info("trial %s/%s deleted: stopping its run", *key)
                self._stopping.add(key)
                if run[0] is not None:
                    run[0].stop()
            return
        if step is Step.IGNORE:
            if run is None:
                self._forget(key)
            return
        try:
            slot = provider_key(TrialRef.of(body).spec)
        except (ValidationError, KeyError) as err:
            log.warning("trial %s/%s cannot be read: %s", *key, err)
            return
        queue = self.waiting.setdefault(slot, OrderedDict())
        queue[key] = body
        self._fill(slot)

    def resync(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """After a listing (the watch's first, or one after it missed events): look at every
        unfinished trial listed. A trial waiting here that the listing no longer has was
        deleted, finished or claimed by another bridge meanwhile: it waits no more."""
        listed: set[Key] = set()
        for body in bodies:
            listed.add(key_of(body))
            self.observe(body)
        for queue in self.waiting.values():
            for key in [key for key in queue if key not in listed]:
                del queue[key]
        self._count_waiting()

    def _forget(self, key: Key) -> None:
        for queue in self.waiting.values():
            queue.pop(key, None)
        self._count_waiting()

    def _count_waiting(self) -> None:
        counts: dict[str, int] = {}
        for slot, queue in self.waiting.items():
            kind = slot.split()[0]
            counts[kind] = counts.get(kind, 0) + len(queue)
        for kind, count in counts.items():
            self.metrics.waiting.labels(kind).set(count)

    def _active(self, slot: str) -> int:
        return sum(1 for s in self._slots.values() if s == slot)

    def _fill(self, slot: str) -> None:
        """Start waiting trials of `slot` while it has room."""
        queue = self.waiting.get(slot)
        limit = self.settings.limit(slot.split()[0])
        while queue and not self._closing and self._active(slot) < limit:
            key, body = queue.popitem(last=False)
            if key in self.runs:
                continue
            self._slots[key] = slot
            task = asyncio.create_task(self._take(key, body), name=f"bridge {key[0]}/{key[1]}")
            self.runs[key] = (None, task)
            task.add_done_callback(partial(self._done, key))
        self._count_waiting()

    def _done(self, key: Key, _: object = None) -> None:
        self.runs.pop(key, None)
        self._stopping.discard(key)
        slot = self._slots.pop(key, None)
        if slot is not None:
            self._fill(slot)

    # --- one trial

    async def _take(self, key: Key, body: Mapping[str, Any]) -> None:
        """Claim the trial if it is nobody's, then run it (again, if this bridge lost it)."""
        try:
            current = await self._claimed(key, body)
            if current is None:
                return
            step = claim.decide(current, self.identity, running_here=False)
            trial = TrialRef.of(current)
            now = datetime.now(UTC)
            store = self.stores.for_spec(trial.spec.storage)
            if step is Step.RETRY:
                await self._end_lost_sandboxes(trial)
                keep, retry, reason = lost_try(trial)
                if keep is None:
                    await self._exhausted(trial, store, reason)
                    return
                await keep_lost_try(store, keep)
                status = claimed_status(
                    self.identity, trial.where(), now, retry=retry, reason=reason
                )
                trial = TrialRef.of(
                    {**current, "status": {**(current.get("status") or {}), **status}}
                )
            elif step is Step.START:
                status = claimed_status(self.identity, trial.where(), now)
            else:
                return
            if await self.api.patch_trial_status(key[0], key[1], status) is None:
                return  # deleted meanwhile
            await self._run(trial, store)
        except asyncio.CancelledError:
            raise
        except Exception:
            # An API server that stays away (or a bug): the trial stays as it is, and is taken
            # again a little later (the body is stale then: a claim reads the trial again).
            log.exception(
                "trial %s/%s: the bridge could not take it; again in %ss", *key, RETAKE_SEC
            )
            if not self._closing:
                asyncio.get_running_loop().call_later(RETAKE_SEC, self._retake, body)

    def _retake(self, body: Mapping[str, Any]) -> None:
        if not self._closing:
            self.observe(body)

    async def _claimed(self, key: Key, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The trial once this bridge's claim is on it (the body to go on with), or None when
        it is another's or gone. A claim that meets a newer version reads the trial again."""
        current: Mapping[str, Any] | None = body
        for _ in range(5):
            if current is None:
                return None
            step = claim.decide(current, self.identity, running_here=False)
            if step in (Step.START, Step.RETRY):
                return current
            if step is not Step.CLAIM:
                return None
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            outcome = await self.api.claim_trial(key[0], key[1], version, self.identity)
            if outcome is ClaimOutcome.GONE:
                return None
            current = await self.api.get_trial(*key)
            if outcome is ClaimOutcome.CLAIMED and current is not None:
                log.info("claimed trial %s/%s", *key)
                kind = str((current.get("spec") or {}).get("environmentType") or "")
                self.metrics.claimed.labels(kind).inc()
        log.warning("trial %s/%s kept changing while being claimed: left for later", *key)
        return None

    async def _run(self, trial: TrialRef, store: ObjectStore) -> None:
        key: Key = (trial.namespace, trial.name)
        try:
            provider = await self._provider(trial)
        except ProviderError as err:
            provider = _Unavailable(err)
        run = TrialRun(
            trial,
            provider=provider,
            api=self.api,
            store=store,
            identity=self.identity,
            try_number=trial.entry.tries,
            work_root=self.work_root,
            prices=self.settings.unit_prices.get(trial.spec.environment_type.value),
        )
        task = self.runs[key][1]
        self.runs[key] = (run, task)
        if key in self._stopping:  # deleted while being claimed: no sandbox, the record only
            run.stop()
        self.started.append(key)
        kind = trial.spec.environment_type.value
        retry = "true" if trial.entry.infra_retries else "false"
        self.metrics.tries.labels(kind, retry).inc()
        with self.metrics.runs.labels(kind).track_inprogress():
            await run.run()
        if run.start_seconds is not None:
            self.metrics.sandbox_start.labels(kind).observe(run.start_seconds)
        if run.outcome is not None:
            error = (run.outcome.get("error") or {}).get("type") or ""
            self.metrics.finished.labels(kind, run.outcome.get("phase") or "", error).inc()

    async def _provider(self, trial: TrialRef) -> Provider:
        """The trial's provider, signed in with its job's provider Secret where it names one
        (read now: a Secret updated since gives a provider of its own); ProviderError."""
        spec = trial.spec
        if spec.provider_secret is None:
            return await self.providers.for_trial(spec)
        try:
            data, version = await self.api.secret_data(trial.namespace, spec.provider_secret)
        except SecretMissing as err:
            raise ProviderError(f"the job's provider Secret cannot be read: {err}") from None
        account = f"{trial.namespace}/{spec.provider_secret}@{version}"
        return await self.providers.for_trial(spec, credentials=data, account=account)

    async def _end_lost_sandboxes(self, trial: TrialRef) -> None:
        """End the sandboxes a lost try left (a bridge killed mid-trial leaves its sandbox)."""
        try:
            provider = await self._provider(trial)
            for owned in await provider.owned(self.identity):
                if owned.of_trial(trial.namespace, trial.name):
                    log.info("ending sandbox %s of a lost try", owned.sandbox_id)
                    await provider.terminate(owned.sandbox_id)
        except ProviderError as err:
            log.warning("the lost try's sandbox could not be looked for: %s", err.message)

    async def _exhausted(self, trial: TrialRef, store: ObjectStore, reason: str) -> None:
        await write_outcome(self.api, store, trial, retries_exhausted(trial, reason))

    # --- leftovers

    def start_sweeping(self) -> None:
        """Sweep now (the engines of `BridgeSettings.docker_hosts`: a restarted bridge clears
        what its previous process left of trials deleted since), then every SWEEP_SEC."""
        self._sweeping = asyncio.create_task(self._sweep_forever(), name="bridge sweep")

    async def _sweep_forever(self) -> None:
        for address in self.settings.docker_hosts:
            try:
                await self.providers.for_docker_host(address)
            except ProviderError as err:
                log.warning("not swept: %s", err.message)
        while True:
            await self.sweep()
            await asyncio.sleep(SWEEP_SEC)

    async def sweep(self) -> int:
        """End every sandbox labelled with this bridge's identity on the engines it knows that
        no run of this process holds and that is not kept (preserveEnv): what a bridge killed
        mid-trial left, or a sandbox that could not be removed when its trial ended. Only one
        process runs under an identity, so no other run holds them. Returns how many."""
        ended = 0
        for provider in self.providers.connected():
            try:
                owned = await provider.owned(self.identity)
            except ProviderError as err:
                log.warning("not swept: %s", err.message)
                continue
            for sandbox in owned:
                if sandbox.preserved or any(sandbox.of_trial(*key) for key in self.runs):
                    continue
                try:
                    await provider.terminate(sandbox.sandbox_id)
                except ProviderError as err:
                    log.warning("a leftover sandbox was not ended: %s", err.message)
                    continue
                log.info(
                    "ended leftover sandbox %s (trial %s)", sandbox.sandbox_id, sandbox.trial_name
                )
                self.metrics.swept.labels(provider.name).inc()
                ended += 1
        return ended

    # --- the end

    async def close(self) -> None:
        """Stop taking trials, abandon the runs under way (their sandboxes ended, no status:
        the next process runs them again) and release the providers."""
        self._closing = True
        if self._sweeping is not None:
            self._sweeping.cancel()
            await asyncio.gather(self._sweeping, return_exceptions=True)
        for run, _ in list(self.runs.values()):
            if run is not None:
                run.stop(abandon=True)
        tasks = [task for _, task in self.runs.values()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_GRACE_SEC)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.providers.aclose()


class _Unavailable(Provider):
    """The provider of a trial that the bridge cannot reach or does not have: starting its
    sandbox fails the trial with the reason (never a traceback)."""

    name = "unavailable"

    def __init__(self, error: ProviderError) -> None:
        self.error = error

    async def start(self, request: Any) -> Any:
        raise self.error

    async def owned(self, bridge: str) -> list[Any]:
        return []

    async def terminate(self, sandbox_id: str) -> None:
        return

    async def aclose(self) -> None:
        return
