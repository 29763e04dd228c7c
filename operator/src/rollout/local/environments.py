"""Which sandbox local mode gives a job's trials, by `environment.type`, and whether it can here.

- `local`: the host sandbox (`rollout.local.host`): namespaces of this machine, no image.
- `docker`: a container of the local Docker-compatible engine (`rollout.local.engine`), the
  task's docker_image pulled if absent, else its environment/ built (once per content hash).

Every other type is refused before the job starts (`EnvironmentType.refusal_locally`).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from pathlib import Path

from rollout.api.environment import EnvironmentType
from rollout.api.plan import PlannedTrial
from rollout.api.resources import RolloutTrialSpec
from rollout.local.engine import Engine, engine_unavailable
from rollout.local.host import host_sandbox_unavailable, start_host_sandbox
from rollout.local.sandbox import Sandbox, SandboxStartFailed


def unavailable_reason(env_type: EnvironmentType, environ: Mapping[str, str]) -> str | None:
    """Why trials of `env_type` cannot run on this machine (None: they can)."""
    if refusal := env_type.refusal_locally():
        return f"is {refusal}"
    if env_type is EnvironmentType.LOCAL:
        return host_sandbox_unavailable(environ.get("PATH"))
    return engine_unavailable(environ)


class Sandboxes(abc.ABC):
    """Starts each trial's sandbox for one job; `aclose` when the job is done."""

    @abc.abstractmethod
    async def start(self, spec: RolloutTrialSpec, planned: PlannedTrial, base: Path) -> Sandbox:
        """The trial's sandbox, started in `base` (an empty directory the caller removes);
        SandboxStartFailed when it cannot start."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release what the job held (an engine's connection)."""


class HostSandboxes(Sandboxes):
    async def start(self, spec: RolloutTrialSpec, planned: PlannedTrial, base: Path) -> Sandbox:
        workdir = spec.workdir or planned.task.config.environment.workdir
        return await start_host_sandbox(base, workdir=workdir)

    async def aclose(self) -> None:
        """Nothing to release: each host sandbox is closed with its trial."""


class EngineSandboxes(Sandboxes):
    """Containers of the engine `environ` names (DOCKER_HOST, else the default socket), from
    each task's image; `task_dirs` finds a task's directory by its content hash, for builds."""

    def __init__(
        self, environ: Mapping[str, str], task_dirs: Mapping[str, Path], *, force_build: bool
    ) -> None:
        self.environ = dict(environ)
        self.task_dirs = task_dirs
        self.force_build = force_build
        self._engine: Engine | None = None
        self._connecting = asyncio.Lock()

    async def _connected(self) -> Engine:
        async with self._connecting:  # one connection, made by the first trial
            if self._engine is None:
                self._engine = await Engine.connect(self.environ)
            return self._engine

    async def start(self, spec: RolloutTrialSpec, planned: PlannedTrial, base: Path) -> Sandbox:
        engine = await self._connected()
        task_dir = self.task_dirs.get(planned.task.content_hash or "")
        if task_dir is None:  # a broken task never gets here: it has no trials to run
            raise SandboxStartFailed(f"task {planned.task.name!r} has no directory to build from")
        image = await engine.images.ensure(
            task_dir,
            planned.task.config.environment,
            force_build=self.force_build,
            build_timeout_sec=spec.timeouts.build_sec,
        )
        return await engine.start(spec, image, work_dir=base)

    async def aclose(self) -> None:
        if self._engine is not None:
            await self._engine.close()


def sandboxes(
    env_type: EnvironmentType,
    environ: Mapping[str, str],
    task_dirs: Mapping[str, Path],
    *,
    force_build: bool,
) -> Sandboxes:
    """How each trial of a job of `env_type` gets its sandbox (`unavailable_reason` first)."""
    if env_type is EnvironmentType.LOCAL:
        return HostSandboxes()
    if env_type is EnvironmentType.DOCKER:
        return EngineSandboxes(environ, task_dirs, force_build=force_build)
    raise ValueError(f"environment.type {env_type.value!r} has no local sandbox")
