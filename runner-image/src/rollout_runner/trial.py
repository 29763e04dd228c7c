"""One trial from start to finish: the phases in order, then collection, teardown and uploads.

    environment setup -> agent (install, execute | oracle) -> verifier      (phases/, in order)
                                          `-> uploads of setup/ and command/ begin
    then, in a `finally`:  gather /logs -> teardown -> result.json -> uploads (result.json last)

Each phase records its errors in the `TrialRecord` and later phases skip themselves when an error
has been recorded, so the order of the seed's rules lives in the phases: a failed setup runs
nothing else, an agent error skips the verifier, a teardown error keeps the reward. Anything
unexpected becomes `internal_error`, and the trial still produces its result.json and uploads
what it has. So does a stop request (SIGTERM: the Pod is being deleted), which cancels the
phase that is running.

The core takes its environment, its storage and its clock as parameters; `rollout_runner.main`
only builds them from the command line.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from rollout.api.errors import ErrorType
from rollout.api.layout import RESULT_JSON, job_prefix, trial_path
from rollout.api.resources import RolloutTrialSpec
from rollout.api.results import TrialResult
from rollout.api.wire import termination
from rollout.api.wire.termination import RunnerTimes
from rollout.storage import Store
from rollout_runner.clock import SYSTEM_CLOCK, Clock
from rollout_runner.context import RunnerOptions, TrialContext
from rollout_runner.environment import Environment
from rollout_runner.phases import agent, collect, setup, teardown, verifier
from rollout_runner.record import TrialRecord
from rollout_runner.redact import Redactor
from rollout_runner.spec import AgentEnv

log = logging.getLogger(__name__)


def trial_names(spec: RolloutTrialSpec, store: Store | None = None) -> list[str]:
    """The names the project made for a trial: never scrubbed, even where a secret matches a
    part of one (see `rollout_runner.redact`)."""
    path = trial_path(spec.agent.name, spec.dataset_name, spec.task_name, spec.attempt)
    names = [
        spec.job_name,
        *path.parts,  # agent, dataset, <task>__<n>
        spec.task_name,
        f"{spec.job_name}/{path}",  # error.txt's "Trial:" line
        spec.storage.bucket,
        spec.storage.prefix or "",
    ]
    if store is not None:
        prefix = job_prefix(store.prefix, spec.job_name) + f"{path}/"
        names += [prefix, store.uri(prefix + RESULT_JSON)]
    return names


T = TypeVar("T")


@dataclass(frozen=True)
class TrialReport:
    """What the runner reports about a trial it ran."""

    result: TrialResult
    result_uri: str
    error_text: str | None
    """error.txt's content, when the trial has an error."""
    uploaded: list[str]
    upload_error: str | None

    def termination_message(self, runner: RunnerTimes | None = None) -> bytes:
        return termination.render(
            termination.from_result(
                self.result,
                result_uri=self.result_uri,
                upload_error=self.upload_error,
                runner=runner,
            )
        )


async def run_trial(
    spec: RolloutTrialSpec,
    environment: Environment,
    store: Store,
    *,
    agent_env: AgentEnv,
    options: RunnerOptions,
    clock: Clock = SYSTEM_CLOCK,
    stop: asyncio.Event | None = None,
    began_at: datetime | None = None,
    try_number: int | None = None,
) -> TrialReport:
    """Run the trial `spec` in `environment` and store its files; never raises for the trial.

    Setting `stop` cancels the running phase (recorded as internal_error) and goes on to
    collection, teardown and uploads. `began_at` is when the environment's setup began before
    this call (a trial Pod's creation): the trial's timings start there (`TrialRecord`);
    `try_number` is which try at the trial this is (its Pod's), None when unknown.
    """
    await asyncio.to_thread(options.work_dir.mkdir, parents=True, exist_ok=True)
    ctx = TrialContext(
        spec=spec,
        environment=environment,
        store=store,
        clock=clock,
        options=options,
        agent_env=agent_env,
        redactor=Redactor([*agent_env.secrets, *store.secrets()], keep=trial_names(spec, store)),
        record=TrialRecord(clock, began_at=began_at, try_number=try_number),
    )
    log.info(
        "trial %s/%s/%s/%s__%d starts",
        spec.job_name,
        spec.agent.name,
        spec.dataset_name,
        spec.task_name,
        spec.attempt,
    )
    uploads = collect.Uploads(ctx)
    try:
        await _run_phases(ctx, stop, uploads)
    finally:
        logs = await _guarded(ctx, collect.gather_logs(ctx), "gathering /logs") or []
        await _guarded(ctx, teardown.run(ctx), "teardown")
        ctx.record.finish()
        result = collect.trial_result(ctx)
        error = collect.error_text(ctx)
        outputs, final = await asyncio.to_thread(
            collect.stage_trial_files, ctx, result, error, uploads.keys
        )
        outcome = await uploads.finish([*outputs, *logs, *final])
    _log_outcome(ctx, result)
    return TrialReport(
        result=result,
        result_uri=store.uri(ctx.trial_prefix + RESULT_JSON),
        error_text=error,
        uploaded=outcome.uploaded,
        upload_error=outcome.error,
    )


async def _run_phases(
    ctx: TrialContext, stop: asyncio.Event | None, uploads: collect.Uploads
) -> None:
    phases = asyncio.create_task(_phases(ctx, uploads))
    if stop is None:
        await phases
        return
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({phases, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not phases.done():
        log.warning("asked to stop: cancelling the running phase")
        phases.cancel()
    await phases


async def _phases(ctx: TrialContext, uploads: collect.Uploads) -> None:
    try:
        await setup.run(ctx)
        await agent.run(ctx)
        await _upload_outputs(ctx, uploads)
        await verifier.run(ctx)
    except asyncio.CancelledError:
        ctx.record.fail(
            ErrorType.INTERNAL_ERROR,
            f"The runner was stopped during {_phase_name(ctx)} (SIGTERM: the Pod is going away)",
        )
    except Exception as err:
        log.exception("unexpected error during %s", _phase_name(ctx))
        ctx.record.fail(
            ErrorType.INTERNAL_ERROR,
            f"Unexpected error during {_phase_name(ctx)}: {type(err).__name__}: {err}",
            traceback.format_exc(),
        )


async def _upload_outputs(ctx: TrialContext, uploads: collect.Uploads) -> None:
    """Start uploading setup/ and command/, which nothing after the agent changes, while the
    verifier runs. A file that cannot be staged now is staged (or fails) at the end."""
    try:
        uploads.start(await asyncio.to_thread(collect.stage_outputs, ctx))
    except OSError as err:
        log.warning("the agent's output is uploaded at the end: %s", err)


async def _guarded(ctx: TrialContext, step: Awaitable[T], what: str) -> T | None:
    """Await a collection step; a bug in it must not cost the trial its result.json."""
    try:
        return await step
    except Exception as err:
        log.exception("unexpected error while %s", what)
        ctx.record.notes.append(f"{what} failed unexpectedly: {type(err).__name__}: {err}")
        return None


def _phase_name(ctx: TrialContext) -> str:
    phase = ctx.record.current_phase or ctx.record.last_phase
    return phase.value if phase else "the trial"


def _log_outcome(ctx: TrialContext, result: TrialResult) -> None:
    if result.error is not None:
        log.warning("trial ends with %s: %s", result.error.type, result.error.message)
    log.info("trial ends: reward %s, %.1fs", result.reward, result.durations.total_sec or 0.0)
