"""What local mode runs a trial's environment in: a sandbox whose first process is the shim.

A trial Pod has two containers: the environment (the task's image, with the shim as its command)
and the runner, which share the shim's control directory and the environment's /logs. Local mode
keeps that split: a `Sandbox` plays the environment container (the host sandbox of
`rollout.local.host`, or a container of a Docker-compatible engine, `rollout.local.engine`) and
the local job starts the runner as a process beside it with `--control-dir` and `--logs-dir` set
to the sandbox's `paths`. So every phase, error type and file of a trial is the runner's own.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from rollout.api.errors import ErrorType


class SandboxUnavailable(Exception):
    """This kind of sandbox cannot run on this machine at all (no engine, no namespaces).

    The message says why and what to use instead; the local job refuses to start.
    """


class SandboxStartFailed(Exception):
    """One trial's sandbox did not start (an image that cannot be pulled or built, a mount that
    fails): the trial fails with `error_type` (the seed's environment_* types)."""

    def __init__(
        self, message: str, error_type: ErrorType = ErrorType.ENVIRONMENT_START_FAILED
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


@dataclass(frozen=True)
class SandboxPaths:
    """Host directories the runner is given, as a trial Pod's runner container has them."""

    control_dir: Path
    """The shim's control directory (the sandbox sees it at `rollout.api.wire.shim.CONTROL_DIR`)."""
    logs_dir: Path
    """The sandbox's /logs."""


class Sandbox(abc.ABC):
    """One trial's running environment, with the shim as its first process."""

    paths: SandboxPaths

    @abc.abstractmethod
    def describe(self) -> str:
        """How a user finds the sandbox (a container id, a pid to nsenter), for messages."""

    @abc.abstractmethod
    async def close(self, *, keep: bool = False) -> None:
        """Tear the sandbox down: every process in it killed, its mounts or container removed.

        Safe to call more than once and in any state. `keep` (the job's preserveEnv): leave it
        running for inspection instead, as a trial Pod is kept.
        """
