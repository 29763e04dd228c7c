"""The environment a trial runs in, as the runner's phases see it.

Phases (agent install, agent execute, verifier) drive an `Environment` and never know where it
lives: the shim over a shared volume in a trial Pod (`ShimEnvironment`), and later a local Docker
container or a Modal, Daytona or E2B sandbox behind the same few operations.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType

NO_ENV: Mapping[str, str] = MappingProxyType({})
"""The default `env` of `Environment.run`: nothing beyond the environment's own variables."""


@dataclass(frozen=True)
class ExecResult:
    """What one command did.

    `exit_code` is None when the command timed out (it was killed) or never started. A command
    killed by signal N otherwise reports 128+N, as a shell does.
    """

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_sec: float


class EnvironmentFailure(RuntimeError):
    """The environment itself failed (not the command run in it): it is gone or unresponsive."""


class EnvironmentNotReady(EnvironmentFailure):
    """The environment did not become ready to run commands within its timeout."""


class FileTransferError(EnvironmentFailure):
    """Files could not be copied into or out of the environment (say, a missing path)."""


class Environment(abc.ABC):
    """A running container (or sandbox) that runs the trial's commands.

    Commands run with `/bin/sh -c` semantics in the environment's working directory, as its
    default user unless `user` is given. Env values may be secrets: implementations never log them.
    """

    ready_at: datetime | None = None
    """When the environment became ready, as far as it can tell (a trial Pod's: the time of the
    shim's ready file, about when its container started); None when it cannot."""

    @abc.abstractmethod
    async def wait_ready(self, timeout_sec: float) -> None:
        """Return once commands can run; raise `EnvironmentNotReady` after `timeout_sec`."""

    @abc.abstractmethod
    async def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] = NO_ENV,
        user: str | None = None,
        cwd: str | None = None,
        timeout_sec: float,
    ) -> ExecResult:
        """Run `command` with `/bin/sh -c`, wait for it, and return what it did.

        `env` adds to the environment's own variables; `user` is a user name; `cwd` defaults to
        the environment's working directory. After `timeout_sec` the command and every process it
        started (except daemons that left its session: see `kill_all`) are killed before this
        returns a result with `timed_out` set.
        """

    @abc.abstractmethod
    async def put_files(
        self,
        local_path: Path,
        container_path: str,
        *,
        owner: str | None = None,
        prepare: str | None = None,
    ) -> None:
        """Copy a local file or directory into the environment.

        `container_path` is absolute. A file is written at it; a directory's contents are placed
        in it, created if needed and merged with what is there. With `owner`, the tree at
        `container_path` is then owned by that user (a user name). `prepare` is a script of the
        runner's own that runs first, as the environment's default user, in the same step (one
        round trip to a trial Pod's shim): when it fails, nothing is copied and the transfer
        fails (`FileTransferError`).
        """

    @abc.abstractmethod
    async def get_files(self, container_path: str, local_path: Path) -> None:
        """Copy a file or directory out of the environment to `local_path` (same shape rules)."""

    @abc.abstractmethod
    async def kill_all(self) -> None:
        """Kill every process in the environment except its own agent (the shim).

        Raises `EnvironmentFailure` when some process survives SIGKILL.
        """

    @abc.abstractmethod
    async def stop(self, exit_code: int = 0) -> None:
        """End the environment; in a trial Pod the environment container exits with `exit_code`."""


class NoEnvironment(Environment):
    """A trial with no environment: a Pod of the runner alone (the oracle's data rows, which it
    answers from their ground truth). Nothing can run in it; it is ready, and stops, at once."""

    async def wait_ready(self, timeout_sec: float) -> None:
        return

    async def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] = NO_ENV,
        user: str | None = None,
        cwd: str | None = None,
        timeout_sec: float,
    ) -> ExecResult:
        raise EnvironmentFailure("this trial has no environment to run commands in")

    async def put_files(
        self,
        local_path: Path,
        container_path: str,
        *,
        owner: str | None = None,
        prepare: str | None = None,
    ) -> None:
        raise FileTransferError("this trial has no environment to copy files into")

    async def get_files(self, container_path: str, local_path: Path) -> None:
        raise FileTransferError("this trial has no environment to copy files from")

    async def kill_all(self) -> None:
        return

    async def stop(self, exit_code: int = 0) -> None:
        return
