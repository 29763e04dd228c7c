"""One try at a trial on the bridge: its sandbox, the runner's core against it, and its status.

    claimed (Running) -> sandbox started -> rollout_runner.trial.run_trial -> final status
                       `-> a start failure: the operator's record and status for it

The runner's core is the code a trial Pod's runner runs: setup, agent, verifier, error types,
result.json, uploads. The bridge only gives it an environment (the provider's sandbox), a store
(the bridge's own credentials, as the operator writes records with its own), the agent's
Secret-backed values (read from the Secrets the trial names, as a Pod's kubelet would), and a
stop signal (the trial deleted: its job cancelled). The outcome then becomes the trial's status
through the operator's own function for a finished Pod's termination message
(`rollout.controller.trials.act`), so the job's counters, metrics and result.json treat it as
any other trial.

A try that the bridge itself abandons (the bridge is stopping) ends its sandbox and writes no
status: the trial stays Running under this bridge's claim, and the bridge's next process runs it
again (`claim.Step.RETRY`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import task_archive_key
from rollout.api.resources import RolloutJobSpec, RolloutTrialSpec, TrialConditionReason
from rollout.api.wire.spec import agent_secret_carriers
from rollout.api.wire.termination import TerminationMessage
from rollout.bridge.cost import add_costs, try_cost
from rollout.bridge.kube import BridgeApi, SecretMissing
from rollout.bridge.providers.base import (
    Provider,
    ProviderError,
    Sandbox,
    SandboxRequest,
    sandbox_labels,
)
from rollout.controller.index import TrialEntry, trial_entry
from rollout.controller.podstatus import Finished
from rollout.controller.prices import UnitPrices
from rollout.controller.records import RecordCost, TrialPlace
from rollout.controller.trial_files import keep_try, set_cost, write_record
from rollout.controller.trials import KeepTry, PatchStatus, act, fail_trial
from rollout.storage import ObjectStore
from rollout_runner.archive import extract_task_archive
from rollout_runner.context import RunnerOptions
from rollout_runner.spec import AgentEnv, resolve_agent_env
from rollout_runner.trial import run_trial

log = logging.getLogger(__name__)

WRITTEN_BY_BRIDGE = (
    "The bridge controller wrote this record: the trial's runner could not write one (its "
    "sandbox did not start, or the trial ended without its files reaching storage)."
)
DEFAULT_MAX_INFRA_RETRIES: int = RolloutJobSpec.model_fields["max_infra_retries"].default
"""A RolloutJob's default maxInfraRetries, for a trial whose spec does not carry it."""
READY_TIMEOUT_SEC = 300.0
"""How long a started sandbox may take to run its first command."""


@dataclass(frozen=True)
class TrialRef:
    """A trial as the bridge last saw it."""

    namespace: str
    name: str
    uid: str
    spec: RolloutTrialSpec
    entry: TrialEntry
    """What the operator's index knows of it: key, tries, created_at, ..."""

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> TrialRef:
        metadata = body.get("metadata") or {}
        return cls(
            namespace=str(metadata["namespace"]),
            name=str(metadata["name"]),
            uid=str(metadata.get("uid") or ""),
            spec=RolloutTrialSpec.model_validate(body.get("spec") or {}),
            entry=trial_entry(body),
        )

    @property
    def place(self) -> TrialPlace:
        return TrialPlace(self.spec.storage, self.spec.job_name, WRITTEN_BY_BRIDGE)

    @property
    def max_infra_retries(self) -> int:
        retries = self.spec.max_infra_retries
        return DEFAULT_MAX_INFRA_RETRIES if retries is None else retries

    def where(self) -> str:
        """Where its sandbox runs, for messages (never a secret: an engine's address)."""
        if self.spec.docker_host:
            return f"the Docker engine at {self.spec.docker_host}"
        return self.spec.environment_type.value


class TrialRun:
    """One try at a trial; `stop()` (its trial deleted) ends it early with a record."""

    def __init__(
        self,
        trial: TrialRef,
        *,
        provider: Provider,
        api: BridgeApi,
        store: ObjectStore,
        identity: str,
        try_number: int,
        work_root: Path | None = None,
        prices: UnitPrices | None = None,
    ) -> None:
        self.trial = trial
        self.provider = provider
        self.api = api
        self.store = store
        self.identity = identity
        self.try_number = try_number
        self.work_root = work_root
        self.prices = prices
        self.began = datetime.now(UTC)
        self.stopped = asyncio.Event()
        self.abandoned = False
        self.sandbox: Sandbox | None = None
        self.start_seconds: float | None = None
        """How long the provider took to give the sandbox (None: it never did)."""
        self.outcome: dict[str, Any] | None = None
        """The final status this try wrote (None: none, such as when abandoned)."""

    def stop(self, *, abandon: bool = False) -> None:
        """End the try early: the runner records internal_error and uploads what it has. With
        `abandon` (the bridge is stopping), no status is written: the trial stays Running under
        this bridge's claim, for its next process to run again."""
        self.abandoned = self.abandoned or abandon
        self.stopped.set()

    async def run(self) -> None:
        """Run the try to its end and write the trial's status (none when abandoned); the
        sandbox is ended either way, unless the trial keeps it (preserveEnv)."""
        trial = self.trial
        began = self.began = datetime.now(UTC)
        work = Path(tempfile.mkdtemp(prefix=f"rollout-bridge-{trial.name}-", dir=self.work_root))
        try:
            try:
                agent_env = await self._agent_env()
                task_dir = await self._task_dir(work) if self.trial.spec.builds_image else None
                if not self.stopped.is_set():
                    self.sandbox = await self._start(task_dir)
            except ProviderError as err:
                if not self.abandoned:
                    await self._fail(err.error_type, err.message, in_setup=True)
                return
            if self.stopped.is_set() or self.sandbox is None:
                if not self.abandoned:
                    await self._fail(ErrorType.INTERNAL_ERROR, CANCELLED, in_setup=True)
                return
            report = await run_trial(
                trial.spec,
                self.sandbox,
                self.store,
                agent_env=agent_env,
                options=RunnerOptions(
                    work_dir=work / "runner", ready_timeout_sec=READY_TIMEOUT_SEC
                ),
                stop=self.stopped,
                began_at=began,
                try_number=self.try_number,
            )
            if self.abandoned:
                log.info("trial %s/%s abandoned: the bridge is stopping", *self._names())
                return
            message = TerminationMessage.model_validate_json(report.termination_message())
            await self._finish(message)
        finally:
            await self._end_sandbox()
            await asyncio.to_thread(shutil.rmtree, work, True)

    # --- before the runner

    async def _agent_env(self) -> AgentEnv:
        """The agent's values, its Secret-backed ones read from their Secrets (a missing one is
        the job's configuration: environment_start_failed, as a Pod's CreateContainerConfigError
        is)."""
        environ: dict[str, str] = {}
        for carrier in agent_secret_carriers(self.trial.spec.agent):
            ref = carrier.selector
            try:
                environ[carrier.variable] = await self.api.secret_value(
                    self.trial.namespace, ref.name, ref.key
                )
            except SecretMissing as err:
                if not ref.optional:
                    raise ProviderError(
                        f"The agent's env cannot be resolved: {err}",
                        ErrorType.ENVIRONMENT_START_FAILED,
                    ) from None
        try:
            return resolve_agent_env(self.trial.spec.agent, environ)
        except InvalidInput as err:
            raise ProviderError(f"The agent's env cannot be resolved: {err}") from None

    async def _task_dir(self, work: Path) -> Path:
        """The task's files, for a provider that builds its image from environment/."""
        content_hash = self.trial.spec.task_content_hash
        if content_hash is None:  # the operator fails such trials when it makes them
            raise ProviderError("The trial names no task archive", ErrorType.TASK_NOT_FOUND)
        key = task_archive_key(self.store.prefix, content_hash)
        data = await asyncio.to_thread(self.store.get_bytes, key)
        task_dir = work / "task"
        await asyncio.to_thread(extract_task_archive, data, task_dir)
        return task_dir

    async def _start(self, task_dir: Path | None) -> Sandbox:
        trial = self.trial
        labels = sandbox_labels(
            trial.namespace,
            trial.name,
            trial.spec.job_name,
            self.identity,
            preserved=trial.spec.preserve_env,
        )
        request = SandboxRequest(trial.namespace, trial.name, trial.spec, labels, task_dir)
        asked = time.monotonic()
        starting = asyncio.ensure_future(self.provider.start(request))
        try:
            sandbox = await asyncio.shield(starting)
            self.start_seconds = time.monotonic() - asked
            return sandbox
        except asyncio.CancelledError:
            # The provider goes on starting it: end what it started, then go.
            with contextlib.suppress(Exception):
                await (await starting).terminate()
            raise

    # --- after the runner

    async def _finish(self, message: TerminationMessage) -> None:
        """The trial's final status from the runner's outcome, as the operator makes it from a
        Pod's termination message (with the operator's record when the uploads failed)."""
        action = act(
            self.trial.entry,
            None,
            Finished(message, None),
            now=datetime.now(UTC),
            place=self.trial.place,
            prices=None,
            max_infra_retries=self.trial.max_infra_retries,
        )
        assert isinstance(action, PatchStatus)  # a termination message always finishes a trial
        cost = await self._cost()
        if cost is not None:
            action.status["cost"] = cost
            if action.record is not None:
                action.record.result.cost = cost
            else:  # into the runner's result.json, as the operator sets a Pod's
                key = self.trial.place.result_key(self.trial.entry.key)
                record_cost = RecordCost(self.trial.spec.storage, key, cost)
                await asyncio.to_thread(set_cost, self.store, record_cost)
        await self._apply(action)

    async def _fail(self, error_type: ErrorType, message: str, *, in_setup: bool) -> None:
        """The trial fails before (or without) the runner's outcome: the operator's record and
        status for it."""
        action = fail_trial(
            self.trial.entry.key,
            self.trial.place,
            error_type,
            message,
            datetime.now(UTC),
            cost=await self._cost(),
            tries=self.try_number,
            created_at=self.trial.entry.created_at,
            in_setup=in_setup,
        )
        await self._apply(action)

    async def _cost(self) -> float | None:
        """The trial's cost with this try's: its sandbox's life at the provider's prices, or what
        the provider reports; a try whose sandbox never started costs nothing."""
        this: float | None = None
        sandbox = self.sandbox
        if sandbox is not None:
            reported = await sandbox.reported_cost()
            resources = self.trial.spec.resources
            now = datetime.now(UTC)
            this = try_cost(
                resources, self.prices, started=self.began, ended=now, reported=reported
            )
        elif self.prices is not None:
            this = 0.0
        return add_costs(self.trial.entry.cost, this)

    async def _apply(self, action: PatchStatus) -> None:
        self.outcome = await write_outcome(self.api, self.store, self.trial, action)

    async def _end_sandbox(self) -> None:
        sandbox = self.sandbox
        if sandbox is None or self.trial.spec.preserve_env:
            if sandbox is not None:
                log.info("kept the sandbox of %s/%s: %s", *self._names(), sandbox.describe())
            return
        try:
            # Shielded: a bridge that is stopping still ends the sandbox it started.
            await asyncio.shield(sandbox.terminate())
        except Exception as err:
            log.warning("the sandbox of %s/%s was not ended: %s", *self._names(), err)

    def _names(self) -> tuple[str, str]:
        return self.trial.namespace, self.trial.name


CANCELLED = (
    "The trial's RolloutTrial was deleted (its job was cancelled) before its sandbox started."
)


async def write_outcome(
    api: BridgeApi, store: ObjectStore, trial: TrialRef, action: PatchStatus
) -> dict[str, Any] | None:
    """Finish a trial as the operator finishes a Pod's: its record first, where the runner left
    none (`action.record`), then its final status, tried through API failures. Returns the
    status written (None: the trial is gone)."""
    if action.record is not None:
        await asyncio.to_thread(write_record, store, action.record)
    status = {k: v for k, v in action.status.items() if k != "podName"}  # no Pod
    names = (trial.namespace, trial.name)
    if await api.patch_trial_status_surely(*names, status) is None:
        log.info("trial %s/%s is gone: its status is not written", *names)
        return None
    log.info("trial %s/%s ends %s", *names, status.get("phase"))
    return status


def lost_try(trial: TrialRef) -> tuple[KeepTry | None, int, str]:
    """A trial this bridge started before it restarted: the files of the lost try to keep, the
    retry's number (over the job's maxInfraRetries: the trial fails), and why."""
    retry = trial.entry.infra_retries + 1
    reason = "The bridge that ran the trial stopped before the trial ended."
    if retry > trial.max_infra_retries:
        return None, retry, reason
    number = trial.entry.earlier_tries + trial.entry.infra_retries + 1
    return KeepTry(trial.spec.storage, trial.place.prefix(trial.entry.key), number), retry, reason


def retries_exhausted(trial: TrialRef, reason: str) -> PatchStatus:
    """The failure of a trial lost more often than its job allows."""
    entry = trial.entry
    return fail_trial(
        entry.key,
        trial.place,
        ErrorType.INTERNAL_ERROR,
        f"{reason} The trial's sandbox was lost {entry.infra_retries + 1} times, more than the "
        f"job's maxInfraRetries ({trial.max_infra_retries}) allows.",
        datetime.now(UTC),
        cost=None,
        tries=entry.tries,
        created_at=entry.created_at,
        reason=TrialConditionReason.INFRA_RETRIES_EXHAUSTED,
    )


async def keep_lost_try(store: ObjectStore, keep: KeepTry) -> None:
    await asyncio.to_thread(keep_try, store, keep)
