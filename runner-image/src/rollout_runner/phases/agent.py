"""The agent: install (`agent_setup`) and execute (`agent_execution`), the oracle, or an
endpoint or model agent that the runner asks itself.

The install and execute scripts of job.yaml are copied into the environment as files
(/installed-agent/install.sh, execute.sh) and run with bash, as the agent user when there is one,
in the working directory, with task.toml's [environment.env], ROLLOUT_TASK_INSTRUCTION, the
attempt's W3C trace context as TRACEPARENT (`rollout.api.tracecontext`), a built-in agent's
version, model and flags (`rollout.api.catalogue`, whose scripts it runs when the job gives none)
and the agent's env (a later one wins). Their stdout and
stderr become the trial's setup/ and command/ files. The oracle has no install: its solution/ is
copied to /oracle (its agent_setup; seed 004's solve.sh at the task root is placed as
/oracle/solve.sh) and `bash /oracle/solve.sh` runs with the same env and task.toml's
[solution.env] over it (its agent_execution, output in command/). An endpoint or model agent
(`rollout_runner.phases.service`) is asked with the instruction from the runner; what it answered
is written to /logs/agent/ (answer.txt, and the call's files) for the task's verifier.

Whatever happened, every process the agent left behind is killed before this phase returns, so
nothing of the agent runs while /tests is copied in and the verifier runs.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from pathlib import Path

from rollout.api.envrefs import INSTRUCTION_ENV_VAR
from rollout.api.errors import ErrorType
from rollout.api.layout import COMMAND_STDERR, COMMAND_STDOUT, SETUP_STDERR, SETUP_STDOUT
from rollout.api.taskdir import ROOT_SOLUTION_SCRIPT, Task
from rollout.api.tracecontext import TRACEPARENT_ENV_VAR
from rollout_runner.context import AGENT_LOGS, AGENT_SCRIPTS, ORACLE, TrialContext
from rollout_runner.environment import EnvironmentFailure, ExecResult
from rollout_runner.phases.common import output_detail
from rollout_runner.record import Phase

log = logging.getLogger(__name__)


async def run(ctx: TrialContext) -> None:
    """Run the agent phases unless setup failed; then kill whatever the agent left running."""
    if ctx.record.failed or ctx.task is None:
        return
    try:
        if ctx.is_oracle:
            await _oracle(ctx)
        elif ctx.spec.agent.kind.in_runner:
            await _in_runner(ctx, ctx.task)
        else:
            await install(ctx)
            if not ctx.record.failed:
                await execute(ctx)
    finally:
        await kill_leftovers(ctx)


def _agent_env(ctx: TrialContext) -> dict[str, str]:
    # Lowest first: the task's [environment.env], the instruction's path and the trace, a
    # built-in's version, model and flags, the job's agent env.
    return {
        **ctx.task_env,
        INSTRUCTION_ENV_VAR: ctx.spec.instruction_path,
        TRACEPARENT_ENV_VAR: ctx.record.trace.traceparent,
        **ctx.spec.agent.parameter_env(),
        **ctx.agent_env.values,
    }


async def install(ctx: TrialContext) -> None:
    script = ctx.spec.agent.install_script
    if not script or not script.strip():
        return  # no install script: the phase does not run and its durations stay null
    timeout = ctx.spec.timeouts.agent_install_sec
    with ctx.record.phase(Phase.AGENT_SETUP):
        result = await _run_script(ctx, "install.sh", script, timeout)
        if result is None:
            return
        ctx.outputs[SETUP_STDOUT] = result.stdout
        ctx.outputs[SETUP_STDERR] = result.stderr
        if result.timed_out:
            ctx.record.fail(
                ErrorType.AGENT_INSTALL_TIMEOUT,
                f"Agent install exceeded timeout of {timeout:g} seconds",
                output_detail(result, ctx.redactor),
            )
        elif result.exit_code != 0:
            ctx.record.fail(
                ErrorType.AGENT_INSTALL_FAILED,
                f"Agent install script {_ended(result)}",
                output_detail(result, ctx.redactor),
            )


async def execute(ctx: TrialContext) -> None:
    script = ctx.spec.agent.execute_script or ""
    timeout = ctx.spec.timeouts.agent_sec
    with ctx.record.phase(Phase.AGENT_EXECUTION):
        result = await _run_script(ctx, "execute.sh", script, timeout)
        if result is not None:
            _judge_execution(ctx, result, "Agent execute script", timeout)


async def _oracle(ctx: TrialContext) -> None:
    assert ctx.task is not None
    with ctx.record.phase(Phase.AGENT_SETUP):
        try:
            await ctx.housekeeping(f"rm -rf {ORACLE}", f"clearing {ORACLE}")
            await _place_solution(ctx, ctx.task)
        except EnvironmentFailure as err:
            _environment_failed(ctx, err)
            return
    timeout = ctx.spec.timeouts.agent_sec
    env = {**_agent_env(ctx), **ctx.task.config.solution.env}
    with ctx.record.phase(Phase.AGENT_EXECUTION):
        result = await _run(ctx, f"bash {ORACLE}/solve.sh", env, timeout)
        if result is not None:
            _judge_execution(ctx, result, f"Oracle solution (bash {ORACLE}/solve.sh)", timeout)


async def _in_runner(ctx: TrialContext, task: Task) -> None:
    """An endpoint or model agent on a task: the runner asks it with the instruction and writes
    what it answered to /logs/agent/ (answer.txt and the call's files), where the task's
    verifier finds it."""
    # Only these agents need the HTTP and model clients: the runner's start stays light.
    from rollout_runner.phases import service

    question = service.Question(
        task_id=ctx.spec.task_name,
        question=task.instruction,
        instruction=task.instruction,
        metadata=dict(task.config.metadata),
    )
    answered = await service.answer(ctx, question)
    local = ctx.options.work_dir / "agent-logs"
    await asyncio.to_thread(_write_files, local, answered.files)
    try:
        for name in answered.files:
            await ctx.environment.put_files(
                local / name, f"{AGENT_LOGS}/{name}", owner=ctx.agent_user
            )
    except EnvironmentFailure as err:
        _environment_failed(ctx, err)


def _write_files(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)


async def _place_solution(ctx: TrialContext, task: Task) -> None:
    """solution/ becomes /oracle; a task of seed 004 with solve.sh at its root (and no
    solution/solve.sh) has that one file placed as /oracle/solve.sh, never the rest of the task
    (its tests/ stay hidden until the verifier runs)."""
    if task.solution == ROOT_SOLUTION_SCRIPT:
        script = task.path / ROOT_SOLUTION_SCRIPT
        await ctx.environment.put_files(script, f"{ORACLE}/solve.sh", owner=ctx.agent_user)
    else:
        await ctx.environment.put_files(task.path / "solution", ORACLE, owner=ctx.agent_user)


def _judge_execution(ctx: TrialContext, result: ExecResult, what: str, timeout: float) -> None:
    ctx.outputs[COMMAND_STDOUT] = result.stdout
    ctx.outputs[COMMAND_STDERR] = result.stderr
    if result.timed_out:
        ctx.record.fail(
            ErrorType.AGENT_EXECUTION_TIMEOUT,
            f"Agent execution exceeded timeout of {timeout:g} seconds",
            output_detail(result, ctx.redactor),
        )
    elif result.exit_code != 0:
        # The seed's trial flow (step 4) says the task is complete when the execute script
        # finishes "regardless of exit code", but its Error Types table defines
        # agent_execution_failed as "Agent execute script returned non-zero exit code" and its
        # error handling rules say "If an error occurs during agent install/execution, the
        # verifier is skipped". We follow the table and the rules: a non-zero exit is
        # agent_execution_failed, and the verifier does not run.
        ctx.record.fail(
            ErrorType.AGENT_EXECUTION_FAILED,
            f"{what} {_ended(result)}",
            output_detail(result, ctx.redactor),
        )


async def _run_script(
    ctx: TrialContext, name: str, script: str, timeout_sec: float
) -> ExecResult | None:
    """Copy a job.yaml script into the environment and run it with bash."""
    local = ctx.options.work_dir / "agent" / name
    await asyncio.to_thread(_write_script, local, script)
    target = f"{AGENT_SCRIPTS}/{name}"
    try:
        await ctx.environment.put_files(local, target, owner=ctx.agent_user)
    except EnvironmentFailure as err:
        _environment_failed(ctx, err)
        return None
    return await _run(ctx, f"bash {shlex.quote(target)}", _agent_env(ctx), timeout_sec)


def _write_script(local: Path, script: str) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text(script, encoding="utf-8")


async def _run(
    ctx: TrialContext, command: str, env: dict[str, str], timeout_sec: float
) -> ExecResult | None:
    user = ctx.agent_user or "default"
    log.info("running %s (timeout %gs, user %s)", command, timeout_sec, user)
    try:
        result = await ctx.run(
            command, env=env, user=ctx.agent_user, cwd=ctx.workdir, timeout_sec=timeout_sec
        )
    except EnvironmentFailure as err:
        _environment_failed(ctx, err)
        return None
    log.info("%s: exit code %s, timed out: %s", command, result.exit_code, result.timed_out)
    return result


async def kill_leftovers(ctx: TrialContext) -> None:
    """Kill every process the agent left behind (daemons, background jobs)."""
    try:
        async with asyncio.timeout(ctx.options.housekeeping_timeout_sec):
            await ctx.environment.kill_all()
    except (EnvironmentFailure, TimeoutError) as err:
        why = str(err) or "no answer in time"
        message = f"Processes the agent left behind could not be killed: {why}"
        if ctx.record.failed:
            ctx.record.notes.append(message)
        else:
            # The verifier must never run beside the agent's processes.
            ctx.record.fail(ErrorType.INTERNAL_ERROR, message)


def _environment_failed(ctx: TrialContext, err: EnvironmentFailure) -> None:
    ctx.record.fail(ErrorType.INTERNAL_ERROR, f"The environment failed: {err}")


def _ended(result: ExecResult) -> str:
    if result.exit_code is None:
        return "did not start"
    return f"exited with code {result.exit_code}"
