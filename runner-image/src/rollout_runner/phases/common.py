"""Helpers several phases share: the readable /logs, and the tail of a command's output."""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
from pathlib import Path

from rollout_runner.context import LOGS, TrialContext
from rollout_runner.environment import EnvironmentFailure, ExecResult
from rollout_runner.redact import Redactor

log = logging.getLogger(__name__)

TAIL_LINES = 30
TAIL_CHARS = 4000
# Capabilities that let a process read any file and search any directory, whatever their modes.
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2
_IDENTITY_UID_MAP = ["0", "0", "4294967295"]


async def readable_logs(ctx: TrialContext) -> Path | None:
    """The environment's /logs as a local directory this process can read, or None.

    With a shared volume (`options.logs_dir`) the files are read in place, once the environment
    has made them readable to all (the verifier's directory is root-only while the agent runs,
    and an agent may write files only its own user can read), unless this process reads any
    file anyway (`reads_any_file`: a trial Pod's runner). Otherwise /logs is copied out.
    """
    if ctx.options.logs_dir is not None:
        if ctx.environment_ready and not reads_any_file():
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


@functools.cache
def reads_any_file() -> bool:
    """Whether this process reads files and searches directories whatever their modes and
    owners: root of the host's user namespace, with CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH
    in effect (a trial Pod's runner has the first). In a user namespace of its own, a file of an
    unmapped user stays closed to it, so there the answer is no, as it is on any doubt."""
    try:
        uid_map = Path("/proc/self/uid_map").read_text().split()
        status = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return False
    effective = [line.split()[1] for line in status if line.startswith("CapEff:")]
    if uid_map != _IDENTITY_UID_MAP or not effective:
        return False
    capabilities = int(effective[0], 16)
    return bool(capabilities & (1 << _CAP_DAC_OVERRIDE | 1 << _CAP_DAC_READ_SEARCH))


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
