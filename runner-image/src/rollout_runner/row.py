"""One row of a shard: the agent answers it, its verifier scores the answer, and its trial
directory gets the seed's files.

    environment setup: the instruction placed, /logs/agent and /logs/verifier emptied
    agent execution:   execute.sh with the instruction (a script agent), the endpoint's or
                       the model's answer (`rollout_runner.phases.service`; nothing runs in an
                       environment, which there is not), or the ground truth (the oracle)
    verifier:          `rollout_runner.row_verifier`

A script agent's answer is what it wrote to /logs/agent/answer.txt, else what its execute script
printed on stdout, with surrounding whitespace removed. A row with no ground truth, answered by
an endpoint that scored it, takes the endpoint's score as its reward (`rollout.api.endpoint`).
The row's directory holds what a task trial's does (result.json, error.txt, command/, logs/
with logs/verifier/reward.txt and stdout.txt) and its line of results.jsonl
(`rollout.api.rowresults.ROW_LINE`); result.json is written last, so a row with a result.json in
storage is complete.

The agent's install ran once for the shard (`rollout_runner.shard`): its output and timing are
the first row's (setup/, agent_setup_*), and an install that failed is every row's error.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.layout import LOGS_DIR, RESULT_JSON
from rollout.api.results import TrialResult
from rollout.api.rowresults import ROW_LINE, ResultLine, RowAdditions
from rollout.api.rowrun import RowItem, ShardRows
from rollout.api.rows import agent_metadata
from rollout.api.verifiers import VerifierKind
from rollout_runner.answer import one_turn_trajectory, read_answer
from rollout_runner.context import AGENT_LOGS, VERIFIER_LOGS, TrialContext
from rollout_runner.environment import EnvironmentFailure
from rollout_runner.phases import agent, collect, service
from rollout_runner.phases.collect import Upload
from rollout_runner.phases.setup import prepare_script
from rollout_runner.record import Phase
from rollout_runner.row_verifier import oracle_answer, score_row
from rollout_runner.rowdata import RowData

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowRun:
    """What a shard gives each of its rows."""

    shard: ShardRows
    rows_dir: Path
    """The unpacked rows archive (a Python verifier's files are there)."""
    evaluator_key: str | None


@dataclass(frozen=True)
class RowReport:
    item: RowItem
    result: TrialResult
    upload_error: str | None


async def run_row(ctx: TrialContext, run: RowRun, row: RowData, *, prepared: bool) -> RowReport:
    """Answer, score and record one row; never raises for the row. `prepared`: the first row
    of a shard, whose environment setup was the shard's (its record has those timings)."""
    answer: str | None = None
    trajectory: dict[str, Any] | None = None
    try:
        if not prepared:
            with ctx.record.phase(Phase.ENVIRONMENT_SETUP):
                await _prepare(ctx, row)
        else:
            await _place_instruction(ctx, row)
        if not ctx.record.failed:
            answer, trajectory = await _answer(ctx, row)
        if answer is not None and trajectory is not None and not ctx.spec.verifier_disabled:
            await _verify(ctx, run, row, answer, trajectory)
    except asyncio.CancelledError:
        # Only the shard cancels a row, when asked to stop: the row is recorded, and the shard
        # runs no further rows.
        ctx.record.fail(
            ErrorType.INTERNAL_ERROR,
            "The runner was stopped during this row (SIGTERM: the Pod is going away)",
        )
    except EnvironmentFailure as err:
        ctx.record.fail(ErrorType.INTERNAL_ERROR, f"The environment failed: {err}")
    except Exception as err:
        log.exception("unexpected error in row %s", row.id)
        ctx.record.fail(ErrorType.INTERNAL_ERROR, f"Unexpected error: {type(err).__name__}: {err}")
    recording = asyncio.ensure_future(_record(ctx, run, row, answer, trajectory))
    try:
        return await asyncio.shield(recording)
    except asyncio.CancelledError:
        # Asked to stop while the row's files were being written: they are finished first, so
        # that the row is recorded whole (its result.json last), as it ended.
        return await recording


async def record_unrun(
    ctx: TrialContext, run: RowRun, item: RowItem, row: RowData | None
) -> RowReport:
    """Record a row that does not run: its record holds why (the shard's setup failed, or the
    row is not in the archive)."""
    if row is None:
        row = RowData(item.id, "", "", None, {}, {})
    return await _record(ctx, run, row, None, None)


async def _prepare(ctx: TrialContext, row: RowData) -> None:
    """Empty the agent's and the verifier's logs of the row before, then place the instruction,
    in one step (the oracle runs nothing in the environment: nothing to empty)."""
    script = f"rm -rf {AGENT_LOGS} {VERIFIER_LOGS}; {prepare_script(ctx.agent_user)}"
    await _place_instruction(ctx, row, prepare=script)


async def _place_instruction(ctx: TrialContext, row: RowData, prepare: str | None = None) -> None:
    local = ctx.options.work_dir / "instruction.md"
    await asyncio.to_thread(_write_text, local, row.instruction)
    if ctx.spec.needs_environment:  # else the runner answers (the oracle, an HTTP agent)
        await ctx.environment.put_files(
            local, ctx.spec.instruction_path, owner=ctx.agent_user, prepare=prepare
        )


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def _answer(ctx: TrialContext, row: RowData) -> tuple[str | None, dict[str, Any] | None]:
    started = ctx.clock.now()
    if ctx.is_oracle:
        with ctx.record.phase(Phase.AGENT_EXECUTION):
            answer = oracle_answer(row)
    elif ctx.spec.agent.kind.in_runner:
        answered = await service.answer(ctx, _question(row))
        for name, data in answered.files.items():
            ctx.outputs[f"{LOGS_DIR}/agent/{name}"] = data
        return answered.answer, answered.trajectory
    else:
        try:
            await agent.execute(ctx)
        finally:
            await agent.kill_leftovers(ctx)
        if ctx.record.failed:
            return None, None
        answer = await read_answer(ctx)
    ended = ctx.clock.now()
    trajectory = one_turn_trajectory(
        row.id, row.question, row.instruction, answer, started, ended, success=True
    )
    return answer, trajectory


def _question(row: RowData) -> service.Question:
    """What an endpoint or model agent is asked for a row: `input` is the row's question and
    its kwargs, `metadata` its other fields; never its ground truth."""
    task_input: dict[str, Any] = {"question": row.question}
    if row.kwargs:
        task_input["kwargs"] = row.kwargs
    metadata = agent_metadata(row.metadata)
    return service.Question(row.id, row.question, row.instruction, task_input, metadata)


async def _verify(
    ctx: TrialContext, run: RowRun, row: RowData, answer: str, trajectory: dict[str, Any]
) -> None:
    evaluation = ctx.record.evaluation
    if (
        run.shard.verifier.kind is VerifierKind.METRIC
        and row.answer is None
        and evaluation is not None
        and evaluation.reward is not None
    ):
        # A metric has nothing to compare without a ground truth: the endpoint's own score
        # is the row's reward (rollout.api.endpoint).
        with ctx.record.phase(Phase.VERIFIER):
            ctx.record.reward = evaluation.reward
            note = "no ground truth to compare: the endpoint's own score is the reward\n"
            ctx.outputs[f"{LOGS_DIR}/verifier/stdout.txt"] = note.encode()
            ctx.outputs[f"{LOGS_DIR}/verifier/reward.txt"] = f"{evaluation.reward:g}\n".encode()
        return
    with ctx.record.phase(Phase.VERIFIER):
        verdict = await score_row(
            run.shard.verifier,
            row,
            answer,
            trajectory,
            rows_dir=run.rows_dir,
            timeout_sec=ctx.spec.timeouts.verifier_sec,
            evaluator=run.shard.evaluator,
            evaluator_key=run.evaluator_key,
        )
        ctx.outputs[f"{LOGS_DIR}/verifier/stdout.txt"] = verdict.output.encode()
        if verdict.reward is None:
            ctx.record.fail(
                verdict.error_type or ErrorType.VERIFIER_FAILED,
                verdict.message or "The verifier gave no reward",
                verdict.output[-4000:],
            )
            return
        ctx.record.reward = verdict.reward.reward
        ctx.record.rewards = verdict.reward.rewards
        ctx.outputs[f"{LOGS_DIR}/verifier/reward.txt"] = f"{verdict.reward.reward:g}\n".encode()


def _line(
    ctx: TrialContext,
    run: RowRun,
    row: RowData,
    answer: str | None,
    trajectory: dict[str, Any] | None,
    result: TrialResult,
) -> ResultLine:
    shard = run.shard
    kept: dict[str, Any] | None = None
    if shard.save_trajectories and trajectory is not None:
        kept = dict(trajectory)
        if shard.trajectory_only:
            kept.pop("messages", None)
            kept.pop("tool_calls", None)
    error = result.error
    return ResultLine(
        task_id=row.id,
        question=row.question,
        predicted_answer=answer,
        success=answer is not None,
        ground_truth=row.answer,
        score=result.reward,
        error=error.message if error is not None else None,
        trajectory=kept,
        rollout=RowAdditions(
            agent_name=ctx.spec.agent.name,
            dataset_name=ctx.spec.dataset_name,
            attempt=ctx.spec.attempt,
            error_type=error.type if error is not None else None,
            verifier=shard.verifier.label(),
            trace_id=ctx.record.trace.trace_id,
            evaluation=ctx.record.evaluation,
            usage=ctx.record.usage,
        ),
    )


async def _record(
    ctx: TrialContext,
    run: RowRun,
    row: RowData,
    answer: str | None,
    trajectory: dict[str, Any] | None,
) -> RowReport:
    """The row's files, result.json last."""
    logs = await _gather_logs(ctx)
    ctx.record.finish()
    result = collect.trial_result(ctx)
    error = collect.error_text(ctx)
    line = _line(ctx, run, row, answer, trajectory, result)
    uploads = await asyncio.to_thread(_stage, ctx, result, error, line)
    outcome = await collect.upload(ctx, [*uploads[0], *logs, *uploads[1]])
    item = RowItem(id=ctx.spec.task_name, attempt=ctx.spec.attempt)
    return RowReport(item, result, outcome.error)


async def _gather_logs(ctx: TrialContext) -> list[Upload]:
    """The environment's /logs, but /logs/verifier: no verifier runs there for a row, so what
    is there is the agent's (a reward.txt of its own, say), and the row's logs/verifier/ is
    the runner's alone."""
    if not ctx.spec.needs_environment:
        return []  # nothing ran in an environment for this row: there is none
    try:
        logs = await collect.gather_logs(ctx)
    except Exception as err:  # a bug here must not cost the row its result.json
        log.exception("gathering /logs failed")
        ctx.record.notes.append(f"gathering /logs failed: {type(err).__name__}: {err}")
        return []
    verifier = f"{ctx.trial_prefix}{LOGS_DIR}/verifier/"
    return [upload for upload in logs if not upload.key.startswith(verifier)]


def _stage(
    ctx: TrialContext, result: TrialResult, error: str | None, line: ResultLine
) -> tuple[list[Upload], list[Upload]]:
    outputs, final = collect.stage_trial_files(ctx, result, error)
    staging = ctx.options.work_dir / "upload"
    extra: list[Upload] = []
    for name, data in ctx.outputs.items():
        if name.startswith(f"{LOGS_DIR}/"):
            extra.append(_staged(staging / name, ctx.trial_prefix + name, ctx.redactor.data(data)))
    text = ctx.redactor.text(line.to_json()) + "\n"
    extra.append(_staged(staging / ROW_LINE, ctx.trial_prefix + ROW_LINE, text.encode()))
    # result.json stays last: its presence means the row is complete.
    assert final[-1].key.endswith(RESULT_JSON)
    return [*outputs, *extra], final


def _staged(path: Path, key: str, data: bytes) -> Upload:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Upload(key, path)
