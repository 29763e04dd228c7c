"""Environment setup: wait for the environment, fetch the task, place the instruction.

The seed's `environment_setup` phase begins before the runner does, when the trial's Pod is
created (scheduling, image pulls, container start: see `rollout_runner.record`). The runner's
part of it is here: waiting for the environment to become ready (in a trial Pod: the shim's
ready signal), downloading the task archive (`tasks/<contentHash>.tar.gz`) into the runner's own
work directory, which the environment cannot see (tests/ and solution/ stay hidden from the
agent), resolving the `${VAR}`s of task.toml's [environment.env] from the agent's env (a
variable it does not set is `task_invalid`, before any command of the agent), and copying
instruction.md to the instruction path. The task is downloaded and unpacked while the
environment starts; what went wrong with it is recorded only once the environment is ready, so
that an environment that never starts is the trial's error whatever the task. With an agent
user, /logs/verifier, /tests and /tmp/rllm are made root-only (0700) here, before the agent can
touch them, and /logs/agent is given to the agent. When the job isolates agents and none is
declared, the agent user is created first (`rollout_runner.isolation`).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

from rollout.api.envrefs import resolve_task_env
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import task_archive_key
from rollout.api.taskdir import (
    INSTRUCTION,
    Task,
    load_archived_task,
    require_oracle_solution,
    tree_hash,
)
from rollout.storage import ObjectNotFound, StorageError
from rollout_runner.archive import extract_task_archive
from rollout_runner.context import (
    AGENT_LOGS,
    ISOLATED_AGENT_USER,
    LOGS,
    TESTS,
    VERIFIER_LOGS,
    TrialContext,
)
from rollout_runner.environment import EnvironmentFailure
from rollout_runner.isolation import create_agent_user_script
from rollout_runner.record import Phase
from rollout_runner.reward import RLLM_DIR
from rollout_runner.threads import in_daemon_thread

log = logging.getLogger(__name__)

READY_GRACE_SEC = 30.0

Fail = Callable[[ErrorType, str], None]
"""Where an error is recorded: `TrialRecord.fail`, or a list kept for later."""


async def run(ctx: TrialContext) -> None:
    """Run the environment setup phase; on failure the error is recorded and nothing follows."""
    with ctx.record.phase(Phase.ENVIRONMENT_SETUP):
        problems: list[tuple[ErrorType, str]] = []
        fetching = asyncio.ensure_future(_fetch_task(ctx, lambda *p: problems.append(p)))
        fetching.add_done_callback(_retrieve)
        try:
            ready = await wait_for_environment(ctx)
        finally:
            if not fetching.done() and not ctx.environment_ready:
                fetching.cancel()  # its storage call is abandoned (a daemon thread)
        if not ready:
            return
        task = await fetching
        for error_type, message in problems:
            ctx.record.fail(error_type, message)
        if task is None:
            return
        ctx.task = task
        try:
            ctx.task_env = resolve_task_env(
                task.config.environment.env,
                ctx.agent_env.values,
                task=ctx.spec.task_name,
                agent=ctx.spec.agent.name,
            )
        except InvalidInput as err:
            ctx.record.fail(ErrorType.TASK_INVALID, f"The task's environment is invalid: {err}")
            return
        try:
            if ctx.creates_agent_user:
                what = f"creating the agent user {ISOLATED_AGENT_USER}"
                await ctx.housekeeping(create_agent_user_script(), what, cwd=ctx.workdir)
            # /logs prepared and the instruction placed in one step (one round trip).
            await ctx.environment.put_files(
                task.path / INSTRUCTION,
                ctx.spec.instruction_path,
                owner=ctx.agent_user,
                prepare=prepare_script(ctx.agent_user),
            )
        except EnvironmentFailure as err:
            ctx.record.fail(
                ErrorType.ENVIRONMENT_START_FAILED, f"The environment could not be prepared: {err}"
            )


async def wait_for_environment(ctx: TrialContext) -> bool:
    timeout = ctx.options.ready_timeout_sec
    log.info("waiting up to %gs for the environment", timeout)
    try:
        async with asyncio.timeout(timeout + READY_GRACE_SEC):
            await ctx.environment.wait_ready(timeout)
    except (EnvironmentFailure, TimeoutError) as err:
        message = str(err) or f"the environment was not ready within {timeout:g}s"
        ctx.record.fail(
            ErrorType.ENVIRONMENT_START_FAILED, f"The environment did not start: {message}"
        )
        return False
    ctx.environment_ready = True
    return True


def _retrieve(task: asyncio.Future[Task | None]) -> None:
    """Take the outcome of a fetch nobody awaits (the environment failed): not an error to log."""
    if not task.cancelled():
        task.exception()


async def _fetch_task(ctx: TrialContext, fail: Fail) -> Task | None:
    """Download and unpack the task; `fail` task_not_found / task_invalid and return None."""
    spec = ctx.spec
    if spec.task_content_hash is None:
        # A task that cannot run has no archive; the operator fails its trials with no Pod.
        fail(
            ErrorType.TASK_INVALID,
            f"Task {spec.task_name!r} of dataset {spec.dataset_name!r} has no task archive "
            "(the trial's spec names none): it cannot run",
        )
        return None
    missing = f"Task {spec.task_name!r} of dataset {spec.dataset_name!r} was not found"
    data = await fetch_archive(ctx, spec.task_content_hash, "task archive", missing, fail)
    if data is None:
        return None
    destination = ctx.options.work_dir / "task"
    try:
        return await asyncio.to_thread(_unpack, data, destination, ctx)
    except InvalidInput as err:
        # Paths in the work directory mean nothing to the user: name the task instead.
        message = str(err).replace(str(destination), f"task {spec.task_name!r}")
        fail(err.error_type or ErrorType.TASK_INVALID, f"The task is invalid: {message}")
        return None


async def fetch_archive(
    ctx: TrialContext, content_hash: str, archive: str, missing: str, fail: Fail | None = None
) -> bytes | None:
    """`tasks/<content_hash>.tar.gz` from storage (a task's, or a data dataset's rows), or None
    with the error recorded (`fail`, by default the trial's record): task_not_found when it is
    not there (`missing` says what, e.g. "Task 't' of dataset 'd' was not found"),
    internal_error when storage fails."""
    fail = fail or ctx.record.fail
    key = task_archive_key(ctx.store.prefix, content_hash)
    try:
        return await in_daemon_thread(lambda: ctx.store.get_bytes(key))
    except ObjectNotFound:
        fail(
            ErrorType.TASK_NOT_FOUND,
            f"{missing}: there is no {archive} at {ctx.store.uri(key)} (was the dataset "
            "published to this bucket?)",
        )
    except StorageError as err:
        fail(ErrorType.INTERNAL_ERROR, f"The {archive} could not be fetched: {err}")
    return None


def _unpack(data: bytes, destination: Path, ctx: TrialContext) -> Task:
    shutil.rmtree(destination, ignore_errors=True)
    extract_task_archive(data, destination)
    found = tree_hash(destination)
    if found != ctx.spec.task_content_hash:
        raise InvalidInput.one(
            "task archive",
            None,
            f"its content hash is {found}, not {ctx.spec.task_content_hash} as its name says",
            ErrorType.TASK_INVALID,
        )
    # With the dataset.toml defaults its archive carries: the config its manifest holds.
    task = load_archived_task(destination, name=ctx.spec.task_name)
    if ctx.is_oracle:
        require_oracle_solution(task)
    return task


def prepare_script(agent_user: str | None) -> str:
    """Create the seed's /logs directories; with an agent user, lock the verifier's away."""
    script = f"mkdir -p {AGENT_LOGS} {VERIFIER_LOGS}"
    if agent_user is None:
        return script
    user = shlex.quote(agent_user)
    # /logs itself is root's, so the agent cannot rename /logs/verifier away and make its own;
    # /tests and /tmp/rllm exist (root-only) so the agent cannot create them first; both are
    # emptied again before the verifier.
    locked = f"{VERIFIER_LOGS} {TESTS} {RLLM_DIR}"
    return (
        f"set -e; {script} {TESTS} {RLLM_DIR}; chown 0:0 {LOGS} {locked}; chmod 0755 {LOGS}; "
        f"chmod 0700 {locked}; chown -R {user} {AGENT_LOGS}"
    )
