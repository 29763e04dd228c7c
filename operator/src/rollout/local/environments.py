"""Which sandbox local mode gives a job's trials, by `environment.type`, and whether it can here.

- `local`: the host sandbox (`rollout.local.host`): namespaces of this machine, no image.
- `docker`: a container of the local Docker-compatible engine (`rollout.local.engine`), the
  task's docker_image pulled if absent, else its environment/ built.

Every other type is refused before the job starts (`EnvironmentType.refusal_locally`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rollout.api.environment import EnvironmentType
from rollout.api.plan import PlannedTrial
from rollout.api.resources import RolloutTrialSpec
from rollout.local.host import host_sandbox_unavailable, start_host_sandbox
from rollout.local.sandbox import Sandbox, SandboxUnavailable
from rollout.local.trial import SandboxFactory


def unavailable_reason(env_type: EnvironmentType, environ: Mapping[str, str]) -> str | None:
    """Why trials of `env_type` cannot run on this machine (None: they can)."""
    if refusal := env_type.refusal_locally():
        return f"is {refusal}"
    if env_type is EnvironmentType.LOCAL:
        return host_sandbox_unavailable(environ.get("PATH"))
    return engine_unavailable(environ)


def sandbox_factory(
    env_type: EnvironmentType, environ: Mapping[str, str], *, force_build: bool
) -> SandboxFactory:
    """How each trial of a job of `env_type` gets its sandbox."""
    if env_type is EnvironmentType.LOCAL:

        async def host(spec: RolloutTrialSpec, planned: PlannedTrial, base: Path) -> Sandbox:
            workdir = spec.workdir or planned.task.config.environment.workdir
            return await start_host_sandbox(base, workdir=workdir)

        return host
    raise SandboxUnavailable(f"environment.type {env_type.value!r} has no local sandbox")
