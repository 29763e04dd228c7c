"""An agent's answer and its trajectory, for verifiers that score answers rather than the
environment's state: a data row's metric, a Python verifier (`evaluate(metadata, trajectory)`).

The answer is what the agent wrote to /logs/agent/answer.txt (`ANSWER_FILE`), else what its
execute script printed on stdout, with surrounding whitespace removed. A script agent answers in
one turn: its trajectory (seed 002's fields) is the instruction and that answer.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from typing import Any

from rollout.api.layout import COMMAND_STDOUT
from rollout.api.results import format_timestamp
from rollout_runner.context import TrialContext
from rollout_runner.environment import EnvironmentFailure

ANSWER_FILE = "agent/answer.txt"
"""Under /logs: where an agent may write its answer (else its stdout is the answer)."""


async def read_answer(ctx: TrialContext) -> str:
    """/logs/agent/answer.txt when the agent wrote one, else its execute script's stdout."""
    logs = ctx.options.logs_dir
    data: bytes | None = None
    if logs is not None:
        data = await asyncio.to_thread(_read_if_file, logs / ANSWER_FILE)
    else:
        copy = ctx.options.work_dir / "answer"
        try:
            await ctx.environment.get_files(f"/logs/{ANSWER_FILE}", copy)
            data = await asyncio.to_thread(_read_if_file, copy)
        except EnvironmentFailure:
            data = None
    if data is None:
        data = ctx.outputs.get(COMMAND_STDOUT, b"")
    return data.decode("utf-8", errors="replace").strip()


def _read_if_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


def one_turn_trajectory(
    task_id: str,
    question: str,
    instruction: str,
    answer: str,
    started: datetime,
    ended: datetime,
    *,
    success: bool,
) -> dict[str, Any]:
    """Seed 002's trajectory of an agent that answers in one turn."""
    return {
        "task_id": task_id,
        "question": question,
        "messages": [
            {"role": "user", "content": instruction},
            {"role": "assistant", "content": answer},
        ],
        "tool_calls": [],
        "final_answer": answer,
        "total_turns": 1,
        "success": success,
        "start_time": format_timestamp(started),
        "end_time": format_timestamp(ended),
        "execution_time_ms": round((ended - started).total_seconds() * 1000),
    }
