"""A shard of a data dataset from start to finish: its rows, one after another, in one
environment (`rollout.api.rowrun`).

    rows already recorded (a shard that runs again): kept, not run again
    shard setup:   wait for the environment, fetch the rows archive, create the agent user
                   (isolate_agents), prepare /logs, the agent's install (once)
    each row:      `rollout_runner.row` (instruction, answer, score, the row's files)
    teardown:      tell the environment to exit (unless preserveEnv)

A shard's Pod may die halfway (a node lost); its trial then runs again in a new Pod, and this
runner keeps every row whose result.json is in storage and was scored, or failed for a reason
of the agent's or the task's (`rollout.api.records.keeps_record`): only rows with no record or
an infrastructure failure run again. A row's files are complete once its result.json is there,
since result.json is written last.

A shard whose setup fails (the environment never started, the rows archive is missing, the
install failed) records that error for each of its rows, so that every row still has its
trial directory. A stop request (SIGTERM) ends the row that is running with internal_error and
leaves the rows after it without a record, for the next try; during the shard's setup (the
install, say) it ends the setup and leaves every row without a record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import RESULT_JSON, trial_prefix
from rollout.api.records import keeps_record
from rollout.api.resources import RolloutTrialSpec
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowrun import RowItem, ShardRows
from rollout.api.wire import termination
from rollout.api.wire.termination import RunnerTimes
from rollout.storage import ObjectNotFound, StorageError, Store
from rollout_runner.clock import SYSTEM_CLOCK, Clock
from rollout_runner.context import ISOLATED_AGENT_USER, RunnerOptions, TrialContext
from rollout_runner.environment import Environment, EnvironmentFailure
from rollout_runner.isolation import create_agent_user_script
from rollout_runner.phases import agent, setup, teardown
from rollout_runner.record import Phase, TrialRecord
from rollout_runner.redact import Redactor
from rollout_runner.row import RowReport, RowRun, record_unrun, run_row
from rollout_runner.rowdata import RowData, unpack_rows
from rollout_runner.spec import AgentEnv
from rollout_runner.threads import in_daemon_thread
from rollout_runner.trial import trial_names

log = logging.getLogger(__name__)


@dataclass
class ShardReport:
    """What the runner reports about a shard: each row's outcome, in the shard's order."""

    spec: RolloutTrialSpec
    results: dict[tuple[str, int], TrialResult] = field(default_factory=dict)
    kept: int = 0
    """Rows recorded by an earlier try and kept."""
    upload_errors: list[str] = field(default_factory=list)
    error: TrialError | None = None
    """Why the shard itself failed (its setup), if it did."""

    def termination_message(self, runner: RunnerTimes | None = None) -> bytes:
        rows = self.spec.rows
        assert rows is not None
        scored = sum(1 for r in self.results.values() if r.reward is not None)
        failed = sum(1 for r in self.results.values() if r.reward is None and r.error)
        fields: dict[str, Any] = termination.from_result(
            None,
            result_uri=None,
            upload_error="; ".join(self.upload_errors[:3]) if self.upload_errors else None,
            runner=runner,
        )
        if self.error is not None:
            fields["error"] = self.error.model_dump(mode="json")
        fields["rows"] = {
            "total": len(rows.items),
            "recorded": len(self.results),
            "kept": self.kept,
            "scored": scored,
            "failed": failed,
        }
        return termination.render(fields)


async def run_shard(
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
    evaluator_key: str | None = None,
) -> ShardReport:
    """Run the shard `spec` (its `rows`) in `environment`; never raises for a row."""
    shard = spec.rows
    if shard is None:
        raise ValueError("run_shard needs a shard's spec (spec.rows)")
    secrets = [*agent_env.secrets, *store.secrets(), *([evaluator_key] if evaluator_key else [])]
    redactor = Redactor(secrets, keep=[*trial_names(spec, store), *(i.id for i in shard.items)])
    record = TrialRecord(clock, began_at=began_at, try_number=try_number)
    base = TrialContext(
        spec=spec,
        environment=environment,
        store=store,
        clock=clock,
        options=options,
        agent_env=agent_env,
        redactor=redactor,
        record=record,
    )
    report = ShardReport(spec)
    # Only a shard's later try can find rows of its own already recorded.
    earlier = (
        await in_daemon_thread(lambda: _earlier_records(store, spec, shard))
        if try_number is not None and try_number > 1
        else {}
    )
    report.results.update(earlier)
    report.kept = len(earlier)
    todo = [item for item in shard.items if (item.id, item.attempt) not in earlier]
    log.info(
        "shard %s: %d rows, %d kept from an earlier try",
        spec.task_name,
        len(shard.items),
        len(earlier),
    )
    if todo:
        await _run_rows(base, shard, todo, report, stop, try_number, evaluator_key)
    await _guarded_teardown(base)
    return report


async def _run_rows(
    base: TrialContext,
    shard: ShardRows,
    todo: list[RowItem],
    report: ShardReport,
    stop: asyncio.Event | None,
    try_number: int | None,
    evaluator_key: str | None,
) -> None:
    setup_done = asyncio.create_task(_setup(base))
    if not await _finished_unless_stopped(setup_done, stop):
        log.warning("asked to stop during the shard's setup: its rows are left for its next try")
        if base.environment_ready:  # the install may have left processes behind
            await agent.kill_leftovers(base)
        return
    rows = setup_done.result()
    run = RowRun(shard, base.options.work_dir / "rows", evaluator_key)
    for number, item in enumerate(todo):
        if stop is not None and stop.is_set():
            log.warning(
                "asked to stop: %d rows of the shard are left for its next try", len(todo) - number
            )
            return
        first = number == 0
        # A row's own try when the spec says (a resumed local job), else the shard's.
        row_try = item.try_number if item.try_number is not None else try_number
        ctx = _row_context(base, item, first=first, try_number=row_try)
        row = rows.get(item.id) if rows is not None else None
        if base.record.failed or row is None:
            if not base.record.failed:
                ctx.record.fail(
                    ErrorType.TASK_NOT_FOUND,
                    f"Row {item.id!r} is not in the rows archive of dataset "
                    f"{base.spec.dataset_name!r}",
                )
            outcome = await record_unrun(ctx, run, item, row)
        else:
            outcome = await _run_stoppable(ctx, run, row, first, stop)
        report.results[(item.id, item.attempt)] = outcome.result
        if outcome.upload_error:
            report.upload_errors.append(f"row {item.id}: {outcome.upload_error}")
    if (error := base.record.error) is not None:
        report.error = TrialError(type=error.type, message=base.redactor.text(error.message))


async def _cancel_on_stop(task: asyncio.Task[Any], stop: asyncio.Event | None) -> None:
    """Wait until `task` is done or `stop` is set, and then cancel it if it is not done (it may
    go on a moment, recording what it was doing)."""
    if stop is None:
        return
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not task.done():
        task.cancel()


async def _finished_unless_stopped(task: asyncio.Task[Any], stop: asyncio.Event | None) -> bool:
    """Wait for `task`, which a stop request cancels: whether it finished."""
    await _cancel_on_stop(task, stop)
    if task.cancelling():  # cancelled for the stop request: wait for it to wind up
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    await task
    return True


async def _run_stoppable(
    ctx: TrialContext, run: RowRun, row: RowData, first: bool, stop: asyncio.Event | None
) -> RowReport:
    """Run a row; a stop request cancels it, and the row records that (`run_row`)."""
    task = asyncio.create_task(run_row(ctx, run, row, prepared=first))
    await _cancel_on_stop(task, stop)
    return await task


def _row_context(
    base: TrialContext, item: RowItem, *, first: bool, try_number: int | None
) -> TrialContext:
    """A row's own context: the shard's spec with the row's task name and attempt. The first
    row's record starts with the shard and holds its setup (and install) timings and errors;
    a row after it starts now."""
    spec = base.spec.model_copy(update={"task_name": item.id, "attempt": item.attempt})
    shard_record = base.record
    if first or shard_record.failed:
        record = TrialRecord(base.clock, began_at=shard_record.started_at, try_number=try_number)
        record.timings.update(shard_record.timings)
        record.errors.extend(shard_record.errors)
        record.notes.extend(shard_record.notes)
    else:
        record = TrialRecord(base.clock, try_number=try_number)
    work_dir = base.options.work_dir / "row"
    options = RunnerOptions(
        work_dir=work_dir,
        logs_dir=base.options.logs_dir,
        ready_timeout_sec=base.options.ready_timeout_sec,
        upload_timeout_sec=base.options.upload_timeout_sec,
        housekeeping_timeout_sec=base.options.housekeeping_timeout_sec,
    )
    ctx = TrialContext(
        spec=spec,
        environment=base.environment,
        store=base.store,
        clock=base.clock,
        options=options,
        agent_env=base.agent_env,
        redactor=base.redactor,
        record=record,
        environment_ready=base.environment_ready,
    )
    if first or shard_record.failed:
        ctx.outputs.update(base.outputs)  # setup/ of the shard's install
    shutil.rmtree(work_dir, ignore_errors=True)  # the row before's staged files
    return ctx


async def _setup(base: TrialContext) -> dict[str, RowData] | None:
    """The shard's environment setup and install; None (with the error recorded) on failure."""
    rows: dict[str, RowData] | None = None
    with base.record.phase(Phase.ENVIRONMENT_SETUP):
        if not await setup.wait_for_environment(base):
            return None
        rows = await _fetch_rows(base)
        if rows is None or not base.spec.needs_environment:
            return rows  # the oracle's rows: nothing runs in an environment, which there is not
        try:
            if base.creates_agent_user:  # isolate_agents, as a task's trial does it
                what = f"creating the agent user {ISOLATED_AGENT_USER}"
                await base.housekeeping(create_agent_user_script(), what, cwd=base.workdir)
            await base.housekeeping(setup.prepare_script(base.agent_user), "preparing /logs")
        except EnvironmentFailure as err:
            base.record.fail(
                ErrorType.ENVIRONMENT_START_FAILED, f"The environment could not be prepared: {err}"
            )
            return None
    if base.spec.needs_environment:
        try:
            await agent.install(base)
        except EnvironmentFailure as err:
            base.record.fail(ErrorType.INTERNAL_ERROR, f"The environment failed: {err}")
    return rows


async def _fetch_rows(base: TrialContext) -> dict[str, RowData] | None:
    spec = base.spec
    if spec.task_content_hash is None:
        base.record.fail(ErrorType.TASK_INVALID, "The shard's spec names no rows archive")
        return None
    missing = f"The rows of dataset {spec.dataset_name!r} were not found"
    data = await setup.fetch_archive(base, spec.task_content_hash, "rows archive", missing)
    if data is None:
        return None
    destination = base.options.work_dir / "rows"
    try:
        return await asyncio.to_thread(unpack_rows, data, destination, spec.task_content_hash)
    except InvalidInput as err:
        base.record.fail(err.error_type or ErrorType.TASK_INVALID, f"The rows are invalid: {err}")
        return None


def _earlier_records(
    store: Store, spec: RolloutTrialSpec, shard: ShardRows
) -> dict[tuple[str, int], TrialResult]:
    """The shard's rows recorded by an earlier try that stay (`keeps_record`)."""
    kept: dict[tuple[str, int], TrialResult] = {}
    for item in shard.items:
        prefix = trial_prefix(
            store.prefix, spec.job_name, spec.agent.name, spec.dataset_name, item.id, item.attempt
        )
        try:
            result = TrialResult.from_json(store.get_bytes(prefix + RESULT_JSON))
        except ObjectNotFound:
            continue
        except (StorageError, InvalidInput) as err:
            log.warning(
                "row %s: its earlier record cannot be read (%s); it runs again", item.id, err
            )
            continue
        if keeps_record(result):
            kept[(item.id, item.attempt)] = result
    return kept


async def _guarded_teardown(base: TrialContext) -> None:
    try:
        await teardown.run(base)
    except Exception:
        log.exception("unexpected error during teardown")
