"""The verifier: copy tests/ to /tests, run `bash /tests/test.sh`, read the reward.

It runs only when setup and the agent succeeded (the seed: an agent install or execution error
skips the verifier) and the job did not disable it. By then every process of the agent is gone.
/tests and /logs/verifier are emptied first, so nothing the agent put there (a reward file of its
own, a planted conftest.py) reaches the verifier or its reward. test.sh runs in the working
directory as the verifier user (root when the agent has a user of its own), with task.toml's
[verifier.env]; its stdout and stderr go to /logs/verifier/stdout.txt and stderr.txt, and so into
the trial's logs/verifier/.

Outcome, by the seed's rules: a timeout is `verifier_timeout` and a non-zero exit is
`verifier_failed`, both with reward null even when a reward file was written; otherwise the
reward is read (see `rollout_runner.reward`).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from pathlib import Path

from rollout.api.errors import ErrorType
from rollout_runner.context import TESTS, VERIFIER_LOGS, TrialContext
from rollout_runner.environment import EnvironmentFailure
from rollout_runner.phases.common import readable_logs, tail
from rollout_runner.record import Phase
from rollout_runner.redact import Redactor
from rollout_runner.reward import RewardProblem, read_reward

log = logging.getLogger(__name__)

TEST_COMMAND = f"bash {TESTS}/test.sh >{VERIFIER_LOGS}/stdout.txt 2>{VERIFIER_LOGS}/stderr.txt"


async def run(ctx: TrialContext) -> None:
    if ctx.record.failed or ctx.task is None:
        return
    if ctx.spec.verifier_disabled:
        log.info("the job disables the verifier: no reward for this trial")
        return
    with ctx.record.phase(Phase.VERIFIER):
        try:
            await _verify(ctx)
        except EnvironmentFailure as err:
            ctx.record.fail(ErrorType.INTERNAL_ERROR, f"The environment failed: {err}")


async def _verify(ctx: TrialContext) -> None:
    assert ctx.task is not None
    user = ctx.verifier_user
    locked = ctx.agent_user is not None
    await ctx.housekeeping(_prepare_script(user, locked=locked), f"clearing {TESTS}")
    await ctx.environment.put_files(ctx.task.path / "tests", TESTS, owner=user)
    timeout = ctx.spec.timeouts.verifier_sec
    log.info("running the verifier (timeout %gs, user %s)", timeout, user or "default")
    result = await ctx.run(
        TEST_COMMAND,
        env=dict(ctx.task.config.verifier.env),
        user=user,
        cwd=ctx.workdir,
        timeout_sec=timeout,
    )
    logs = await readable_logs(ctx)
    verifier_dir = logs / "verifier" if logs is not None else None
    detail = await asyncio.to_thread(_stderr_detail, verifier_dir, ctx.redactor)
    if result.timed_out:
        ctx.record.fail(
            ErrorType.VERIFIER_TIMEOUT, f"Verifier exceeded timeout of {timeout:g} seconds", detail
        )
        return
    if result.exit_code != 0:
        code = result.exit_code
        ended = "did not start" if code is None else f"exited with code {code}"
        ctx.record.fail(
            ErrorType.VERIFIER_FAILED,
            f"Verifier (bash {TESTS}/test.sh) {ended}; any reward it wrote is ignored",
            detail + _shell_detail(result.stderr, ctx.redactor),
        )
        return
    if verifier_dir is None:
        ctx.record.fail(ErrorType.INTERNAL_ERROR, "The verifier's logs could not be read")
        return
    reward = await asyncio.to_thread(read_reward, verifier_dir, VERIFIER_LOGS, ctx.redactor.text)
    if isinstance(reward, RewardProblem):
        ctx.record.fail(reward.type, reward.message, detail)
        return
    log.info("reward: %g", reward)
    ctx.record.reward = reward


def _prepare_script(user: str | None, *, locked: bool) -> str:
    """Empty /tests and /logs/verifier; keep them root-only when the agent has its own user."""
    script = f"set -e; rm -rf {TESTS} {VERIFIER_LOGS}; mkdir -p {TESTS} {VERIFIER_LOGS}"
    if locked:
        script += f"; chmod 0700 {TESTS} {VERIFIER_LOGS}"
    if user is not None:
        script += f"; chown {shlex.quote(user)} {TESTS} {VERIFIER_LOGS}"
    return script


def _stderr_detail(verifier_dir: Path | None, redactor: Redactor) -> str:
    if verifier_dir is None:
        return ""
    try:
        data = (verifier_dir / "stderr.txt").read_bytes()
    except OSError:
        return ""
    return f"Last lines of the verifier's stderr:\n{tail(data, redactor)}" if data.strip() else ""


def _shell_detail(stderr: bytes, redactor: Redactor) -> str:
    # The redirections themselves can fail (say, /logs/verifier not writable by the verifier).
    return f"\n{tail(stderr, redactor)}" if stderr.strip() else ""
