"""Running a dataset's Python verifier (seed 004's `evaluate(metadata, trajectory)`).

The verifier runs in a child process (`rollout_runner.evaluate_harness`) rather than in the
runner: it is the dataset's code, so a timeout must be able to stop it (the whole process group
is killed, children of the verifier included), and a crash, a `sys.exit()` or a leaked thread
in it must not take the runner with it.

The child gets a clean environment: PATH, HOME, LANG, LC_ALL and TMPDIR, each only when the
runner has it, and nothing else. The runner's environment holds the storage credentials
(AWS_*), its own settings (ROLLOUT_*) and possibly the agent's secrets, and a dataset's verifier
is trusted to score answers, not with those; a clean environment also makes a verifier score the
same wherever it runs. `-I` (isolated mode) keeps PYTHON* variables, the user's site-packages
and the working directory out of the child's imports as well.

Outcomes (`PyVerdict`):

- the value the function returned, through the one coercion rule (`coerce_reward`): a reward,
  or `verifier_reward_invalid` with the rule's phrase;
- the script does not load, has no such function, raises, returns something that is not a
  reward (None, a string, a list that is not a `(reward, is_correct)` pair), or the child dies
  without a result: `verifier_failed`;
- no result within the timeout: `verifier_timeout`.

`log` is what the verifier printed (stdout and stderr, interleaved) and any traceback; the
caller writes it to the trial's verifier log, scrubbed as every log is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rollout.api.errors import ErrorType
from rollout.api.reward import CoercedReward, coerce_reward
from rollout_runner.reward import MAX_REWARD_BYTES

HARNESS_MODULE = "rollout_runner.evaluate_harness"
KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
"""The only variables of the runner's environment the verifier sees (see the module)."""
MAX_LOG_BYTES = 1024 * 1024
"""The log keeps the verifier's last MiB of output (its end has the traceback)."""
MAX_RESULT_BYTES = MAX_REWARD_BYTES
"""A returned value may be as large as a reward file (`rollout_runner.reward`), no larger."""
MAX_MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class PyVerdict:
    """What the Python verifier gave: a reward, or an error type and message; and its log."""

    reward: CoercedReward | None
    error_type: ErrorType | None
    message: str | None
    log: str


async def run_python_verifier(
    script: Path,
    metadata: dict[str, Any],
    trajectory: dict[str, Any],
    *,
    timeout_sec: float,
    function: str = "evaluate",
    redact: Callable[[str], str] = str,
) -> PyVerdict:
    """Run `function(metadata, trajectory)` of `script` in a child process (see the module).

    `redact` scrubs a returned value before a message quotes it (`coerce_reward`'s).
    """
    script = await asyncio.to_thread(script.resolve)
    if not await asyncio.to_thread(script.is_file):
        return PyVerdict(None, ErrorType.VERIFIER_FAILED, f"{script} is not a file", "")
    payload = json.dumps({"metadata": metadata, "trajectory": trajectory}, default=str).encode()
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="rollout-pyverifier-"))
    try:
        result_file, log_file = work / "result.json", work / "verifier.log"
        output = await asyncio.to_thread(log_file.open, "wb")
        with output:
            finished, code = await _run_child(
                script, function, result_file, payload, output, timeout_sec
            )
        log = await asyncio.to_thread(_read_log, log_file)
        if not finished:
            message = f"the Python verifier {script.name} did not finish within {timeout_sec:g} s"
            return PyVerdict(None, ErrorType.VERIFIER_TIMEOUT, message, log)
        return await asyncio.to_thread(_verdict, result_file, script, function, code, log, redact)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


async def _run_child(
    script: Path,
    function: str,
    result_file: Path,
    payload: bytes,
    output: IO[bytes],
    timeout_sec: float,
) -> tuple[bool, int | None]:
    """Run the harness; (whether it ended in time, its exit status)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-m",
        HARNESS_MODULE,
        str(script),
        function,
        str(result_file),
        cwd=script.parent,
        env=clean_environment(os.environ),
        stdin=asyncio.subprocess.PIPE,
        # A file, not a pipe: a grandchild that escapes the kill cannot hold our read open.
        stdout=output,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        await asyncio.wait_for(process.communicate(payload), timeout_sec)
        return True, process.returncode
    except TimeoutError:
        return False, None
    finally:
        # On a timeout, a cancellation, or a verifier that left children behind. The group's
        # id stays taken while any member lives, so this cannot reach another process group
        # (but a leader reaped a moment ago with no members left: ProcessLookupError).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.returncode is None:
            await process.wait()


def clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables the verifier's process gets (see the module for why so few)."""
    env = {name: environ[name] for name in KEPT_VARIABLES if name in environ}
    env.setdefault("PATH", os.defpath)
    return env


def _verdict(
    result_file: Path,
    script: Path,
    function: str,
    code: int | None,
    log: str,
    redact: Callable[[str], str],
) -> PyVerdict:
    def failed(message: str) -> PyVerdict:
        return PyVerdict(None, ErrorType.VERIFIER_FAILED, _cut(message), log)

    try:
        with result_file.open("rb") as handle:
            data = handle.read(MAX_RESULT_BYTES + 1)
    except FileNotFoundError:
        status = f"exit status {code}" if code is None or code >= 0 else f"signal {-code}"
        return failed(
            f"the Python verifier {script.name} ended ({status}) without a result; "
            "see the verifier log"
        )
    if len(data) > MAX_RESULT_BYTES:
        return PyVerdict(
            None,
            ErrorType.VERIFIER_REWARD_INVALID,
            f"{function}() of {script.name} returned a value larger than "
            f"{MAX_RESULT_BYTES // 1024} KiB",
            log,
        )
    try:
        result = json.loads(data)
        ok, value, message = bool(result["ok"]), result.get("value"), result.get("message")
    except (ValueError, LookupError, TypeError, AttributeError):  # the verifier wrote over it
        return failed(f"the result of the Python verifier {script.name} is not readable")
    if not ok:
        return failed(str(message))
    coerced = coerce_reward(value, redact)
    if isinstance(coerced, str):
        return PyVerdict(
            None,
            ErrorType.VERIFIER_REWARD_INVALID,
            f"{function}() of {script.name} returned a value that {coerced}",
            log,
        )
    return PyVerdict(coerced, None, None, log)


def _read_log(path: Path) -> str:
    """The log's text; its last `MAX_LOG_BYTES` when it is longer."""
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - MAX_LOG_BYTES))
        data = handle.read()
    text = data.decode(errors="replace")
    if size > MAX_LOG_BYTES:
        left_out = size - MAX_LOG_BYTES
        text = f"[the first {left_out} bytes of the verifier's output are left out]\n{text}"
    return text


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."
