"""Teardown: tell the environment to stop, unless the job preserves it.

In a trial Pod, stopping makes the shim exit, so the environment container ends and the Pod
completes. With `preserveEnv` the environment is left running for a person to inspect
(`kubectl exec` into the environment container); the runner still exits, so the Pod stays
Running until someone deletes it (or the RolloutTrial).

A failed stop is `environment_teardown_failed`: recorded, and by the seed's rules it never
changes the reward. When the environment never became ready, a stop is still requested (a shim
that starts late then exits at once) but not waited for long, and its failure is only noted.
"""

from __future__ import annotations

import asyncio
import logging

from rollout.api.errors import ErrorType
from rollout_runner.context import TrialContext
from rollout_runner.environment import EnvironmentFailure

log = logging.getLogger(__name__)

UNREADY_STOP_TIMEOUT_SEC = 2.0


async def run(ctx: TrialContext) -> None:
    if ctx.spec.preserve_env:
        log.info("preserveEnv is set: the environment is left running")
        return
    timeout = (
        ctx.options.housekeeping_timeout_sec if ctx.environment_ready else UNREADY_STOP_TIMEOUT_SEC
    )
    try:
        async with asyncio.timeout(timeout):
            await ctx.environment.stop(0)
    except (EnvironmentFailure, OSError, TimeoutError) as err:
        message = f"Stopping the environment failed: {str(err) or f'no answer within {timeout:g}s'}"
        if ctx.environment_ready:
            ctx.record.fail(ErrorType.ENVIRONMENT_TEARDOWN_FAILED, message)
        else:
            ctx.record.notes.append(message)
        log.warning("%s", ctx.redactor.text(message))
