"""The verifier: copy tests/ to /tests, run `bash /tests/test.sh`, read the reward; or, for a task
verified by Python (tests/evaluate.py, or task.toml's `[verifier] python`), score the agent's
answer with it beside the environment (`_verify_python`).

It runs only when setup and the agent succeeded (the seed: an agent install or execution error
skips the verifier) and the job did not disable it. By then every process of the agent is gone.
/tests, /logs/verifier and /tmp/rllm are emptied first, so nothing the agent put there (a reward
file of its own, a planted conftest.py) reaches the verifier or its reward. test.sh runs in the
working directory as the verifier user (root when the agent has a user of its own), with
task.toml's [environment.env] and its [verifier.env] over it; its stdout and stderr go to
/logs/verifier/stdout.txt and stderr.txt, and so into the trial's logs/verifier/.

Outcome, by the seed's rules: a timeout is `verifier_timeout` and a non-zero exit is
`verifier_failed`, both with reward null even when a reward file was written; otherwise the
reward is read (see `rollout_runner.reward`): /tmp/rllm/reward.json through the environment,
/logs/verifier's files from the shared logs.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.verifiers import VerifierKind
from rollout_runner.answer import one_turn_trajectory, read_answer
from rollout_runner.context import TESTS, VERIFIER_LOGS, TrialContext
from rollout_runner.environment import EnvironmentFailure
from rollout_runner.phases.common import readable_logs, tail
from rollout_runner.pyverifier import run_python_verifier
from rollout_runner.record import Phase
from rollout_runner.redact import Redactor
from rollout_runner.reward import (
    MAX_REWARD_BYTES,
    NOT_REGULAR,
    RLLM_DIR,
    RLLM_REWARD,
    RewardFile,
    RewardProblem,
    read_reward,
    verifier_dir_files,
)

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
    if ctx.task.verifier.kind is VerifierKind.PYTHON:
        await _verify_python(ctx)
        return
    user = ctx.verifier_user
    locked = ctx.agent_user is not None
    # /tests, /logs/verifier and /tmp/rllm emptied, then tests/ copied: one step.
    await ctx.environment.put_files(
        ctx.task.path / "tests", TESTS, owner=user, prepare=_prepare_script(user, locked=locked)
    )
    timeout = ctx.spec.timeouts.verifier_sec
    log.info("running the verifier (timeout %gs, user %s)", timeout, user or "default")
    result = await ctx.run(
        TEST_COMMAND,
        env={**ctx.task_env, **ctx.task.config.verifier.env},
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
    files = [
        await _rllm_reward_file(ctx),
        *await asyncio.to_thread(verifier_dir_files, verifier_dir, VERIFIER_LOGS),
    ]
    reward = read_reward(files, ctx.redactor.text)
    if isinstance(reward, RewardProblem):
        ctx.record.fail(reward.type, reward.message, detail)
        return
    log.info("reward: %g", reward.reward)
    ctx.record.reward = reward.reward
    ctx.record.rewards = reward.rewards


async def _verify_python(ctx: TrialContext) -> None:
    """A Python verifier: `evaluate(metadata, trajectory)` of the task's file, run beside the
    environment (`rollout_runner.pyverifier`), on the agent's answer (`rollout_runner.answer`).
    Its output becomes /logs/verifier/stdout.txt, as test.sh's would."""
    task = ctx.task
    assert task is not None
    assert task.verifier.script is not None  # a Python verifier names its file
    user = ctx.verifier_user
    await ctx.housekeeping(
        _prepare_script(user, locked=ctx.agent_user is not None), f"clearing {VERIFIER_LOGS}"
    )
    answer = await read_answer(ctx)
    timing = ctx.record.timings.get(Phase.AGENT_EXECUTION)
    started = timing.started_at if timing is not None else ctx.clock.now()
    ended = timing.ended_at if timing is not None and timing.ended_at else ctx.clock.now()
    trajectory = one_turn_trajectory(
        ctx.spec.task_name, task.instruction, task.instruction, answer, started, ended, success=True
    )
    timeout = ctx.spec.timeouts.verifier_sec
    log.info("running the Python verifier %s (timeout %gs)", task.verifier.script, timeout)
    verdict = await run_python_verifier(
        task.path / task.verifier.script,
        _task_metadata(ctx),
        trajectory,
        timeout_sec=timeout,
        redact=ctx.redactor.text,
    )
    output = ctx.options.work_dir / "verifier-stdout.txt"
    await asyncio.to_thread(output.write_bytes, ctx.redactor.data(verdict.log.encode()))
    await ctx.environment.put_files(output, f"{VERIFIER_LOGS}/stdout.txt", owner=user)
    if verdict.reward is None:
        ctx.record.fail(
            verdict.error_type or ErrorType.VERIFIER_FAILED,
            verdict.message or "The Python verifier gave no reward",
            tail(verdict.log.encode(), ctx.redactor),
        )
        return
    log.info("reward: %g", verdict.reward.reward)
    ctx.record.reward = verdict.reward.reward
    ctx.record.rewards = verdict.reward.rewards


def _task_metadata(ctx: TrialContext) -> dict[str, Any]:
    """Seed 004's metadata of a sandbox task: its parsed task.toml, and keys lifted from it."""
    task = ctx.task
    assert task is not None
    return {
        **task.config.to_dict(),
        "task_name": ctx.spec.task_name,
        "instruction": task.instruction,
        "workdir": ctx.workdir,
        "agent_user": ctx.agent_user,
        "verifier_user": ctx.verifier_user,
        "verifier_timeout": ctx.spec.timeouts.verifier_sec,
    }


# Exit 2: no file; 3: not a regular file; else its first bytes on stdout (bounded: a verifier
# may write anything there, and it must not fill the runner's memory).
_READ_RLLM_REWARD = (
    f"f={RLLM_REWARD}; [ -L $f ] || [ -e $f ] || exit 2; [ -f $f ] && [ ! -L $f ] || exit 3; "
    f"exec head -c {MAX_REWARD_BYTES + 1} $f"
)


async def _rllm_reward_file(ctx: TrialContext) -> RewardFile:
    """/tmp/rllm/reward.json, read through the environment (it is not on the shared volume)."""
    result = await ctx.run(_READ_RLLM_REWARD, timeout_sec=ctx.options.housekeeping_timeout_sec)
    if result.exit_code == 2:
        return RewardFile(RLLM_REWARD, None)
    if result.exit_code == 3:
        return RewardFile(RLLM_REWARD, None, NOT_REGULAR)
    if result.exit_code != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        why = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        raise EnvironmentFailure(f"reading {RLLM_REWARD} failed ({why}): {stderr[-2000:]}")
    return RewardFile(RLLM_REWARD, result.stdout)


def _prepare_script(user: str | None, *, locked: bool) -> str:
    """Empty /tests, /logs/verifier and /tmp/rllm; keep them root-only when the agent has its
    own user."""
    dirs = f"{TESTS} {VERIFIER_LOGS} {RLLM_DIR}"
    script = f"set -e; rm -rf {dirs}; mkdir -p {dirs}"
    if locked:
        script += f"; chmod 0700 {dirs}"
    if user is not None:
        script += f"; chown {shlex.quote(user)} {dirs}"
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
