"""Helpers several phases share: the readable /logs, and the tail of a command's output."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

from rollout_runner.context import LOGS, TrialContext
from rollout_runner.environment import EnvironmentFailure, ExecResult
from rollout_runner.redact import Redactor

log = logging.getLogger(__name__)

TAIL_LINES = 30
TAIL_CHARS = 4000


async def readable_logs(ctx: TrialContext) -> Path | None:
    """The environment's /logs as a local directory this process can read, or None.

    With a shared volume (`options.logs_dir`) the files are read in place, once the environment
    has made them readable to all (the verifier's directory is root-only while the agent runs,
    and an agent may write files only its own user can read). Otherwise /logs is copied out.
    """
    if ctx.options.logs_dir is not None:
        if ctx.environment_ready:
            try:
                await ctx.housekeeping(f"chmod -R a+rX {LOGS}", f"making {LOGS} readable")
            except EnvironmentFailure as err:
                _note(ctx, f"{LOGS} may be partly unreadable: {err}")
        return ctx.options.logs_dir
    if not ctx.environment_ready:
        return None
    copy = ctx.options.work_dir / "container-logs"
    await asyncio.to_thread(shutil.rmtree, copy, True)
    try:
        await ctx.environment.get_files(LOGS, copy)
    except EnvironmentFailure as err:
        _note(ctx, f"could not copy {LOGS} out of the environment: {err}")
        return None
    return copy


def tail(data: bytes, redactor: Redactor, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last `lines` lines of some output (at most `chars` characters), as text.

    Secrets are scrubbed before the output is cut, so that no cut leaves part of one behind.
    """
    text = redactor.data(data).decode(errors="replace").rstrip()
    kept = "\n".join(text.splitlines()[-lines:])
    return kept[-chars:]


def output_detail(result: ExecResult, redactor: Redactor) -> str:
    """What error.txt shows of a failed command: the end of its stderr, else of its stdout."""
    for name, data in (("stderr", result.stderr), ("stdout", result.stdout)):
        if data.strip():
            return f"Last lines of {name}:\n{tail(data, redactor)}"
    return "The command printed nothing."


def _note(ctx: TrialContext, message: str) -> None:
    log.warning("%s", ctx.redactor.text(message))
    ctx.record.notes.append(message)
