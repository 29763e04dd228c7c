"""A trial's container on a remote Docker engine as the runner's `Environment`: commands are
execs, files go in and out as tar archives (`docker.DockerProvider` starts it).

An exec cannot be killed or waited for with a timeout through the API, and reading its output
would hold a thread for as long as the command runs. So a command runs under
`scripts.RUN_WRAPPER`, which keeps its session's id, output and, last, its exit status (`rc`) in
a run directory of `PRIVATE_DIR` (open to every user as /tmp is; each run directory is its
user's alone). The exec's stream is held open, unread, while the bridge polls for `rc` (one
archive request each time; an exec's own state is not to be trusted: Podman 4 reports a detached
one running for ever) until it is there or the command's time is up; then a second exec as root
(`scripts.KILL_SCRIPT`) ends the session, and a last one (`FETCH_SCRIPT`) reads the output back
and removes the directory. Env values travel in the exec's environment, never on a command line,
in a label or in a message. Files go in and out as tar archives (`archives`).

docker-py is synchronous: every call to the engine runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import docker
import docker.errors

from rollout.bridge.providers.archives import (
    TRANSFER_TIMEOUT_SEC,
    make_directory,
    pack,
    placement,
    unstage_archive,
)
from rollout.bridge.providers.base import Sandbox
from rollout.bridge.providers.scripts import (
    IDS_SCRIPT,
    KILL_SCRIPT,
    PRIVATE_DIR,
    RESPONSE_TIMEOUT_SEC,
    RUN_WRAPPER,
    check_run,
    check_survivors,
    cwd_argument,
    parse_ids,
)
from rollout.bridge.providers.scripts import (
    KILL_GRACE_SEC as KILL_GRACE_SEC,  # the docker provider's default, as this sandbox's
)
from rollout.local.engine import LOGS_DIR
from rollout.local.engine_images import engine_error_text
from rollout_runner.environment import (
    NO_ENV,
    EnvironmentFailure,
    EnvironmentNotReady,
    ExecResult,
    FileTransferError,
)
from rollout_runner.transfer import check_container_path, check_put, check_transfer

log = logging.getLogger(__name__)


T = TypeVar("T")

ROOT = "0"
"""The exec user of the bridge's own kills and ownership changes."""
STOP_TIMEOUT_SEC = 10
# Polling an exec: every few ms while most commands finish, then gently.
_POLL_FIRST_SEC = 0.005
_POLL_FAST_MAX_SEC = 0.1
_POLL_FAST_PHASE_SEC = 2.0
_POLL_MAX_SEC = 1.0
_STATE_CHECK_SEC = 5.0
"""While a command runs, how often the bridge also checks that the container does."""

# $1: a run's directory: its output on stdout and stderr, then the directory removed.
FETCH_SCRIPT = 'cat "$1/out" 2>/dev/null; cat "$1/err" >&2 2>/dev/null; rm -rf "$1"'


class _NotRunning(Exception):
    """The container is not running (it exited, or it is being removed)."""


def skeleton() -> bytes:
    """/logs with the seed's directories, open to every user as a trial Pod's emptyDir is, and
    `PRIVATE_DIR`, open to every user with the sticky bit, as /tmp is."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        logs = LOGS_DIR.lstrip("/")
        for name, mode in (
            (logs, 0o777),
            (f"{logs}/agent", 0o777),
            (f"{logs}/verifier", 0o777),
            (PRIVATE_DIR.lstrip("/"), 0o1777),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
            tar.addfile(info)
    return buffer.getvalue()


def remove_container(client: docker.DockerClient, container_id: str) -> None:
    """Kill and remove a container; done when it is gone already."""
    with contextlib.suppress(docker.errors.NotFound):
        client.api.remove_container(container_id, force=True, v=True)


# --- The sandbox ------------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """One trial's container on a remote engine, driven through the Engine API.

    `kill_grace_sec` is how long a killed command gets between TERM and KILL;
    `response_timeout_sec` bounds how long a killed command (or every process, for `kill_all`)
    may take to end beyond that grace; `transfer_timeout_sec` bounds a file copy's commands.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        name: str,
        address: str,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        transfer_timeout_sec: float = TRANSFER_TIMEOUT_SEC,
    ) -> None:
        self.client = client
        self.container_id = container_id
        self.name = name
        self.address = address
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self._owner: tuple[int, int] = (0, 0)
        """The default user's uid and gid: what files put in the container belong to."""
        self._stopped = False

    @property
    def sandbox_id(self) -> str:
        return self.container_id

    def describe(self) -> str:
        return (
            f"container {self.name} ({self.container_id[:12]}) on {self.address}; open a shell "
            f"in it with `DOCKER_HOST={self.address} docker exec -it {self.name} sh`"
        )

    # -- readiness -----------------------------------------------------------------------------

    async def wait_ready(self, timeout_sec: float) -> None:
        deadline = time.monotonic() + timeout_sec
        delay = _POLL_FIRST_SEC
        while True:
            try:
                out, _ = await asyncio.to_thread(self._probe)
            except _NotRunning as err:
                raise EnvironmentNotReady(f"{self.describe()} is not running: {err}") from None
            except (docker.errors.DockerException, OSError) as err:
                reason = engine_error_text(err)
            else:
                self._owner = parse_ids(out) or self._owner
                return
            now = time.monotonic()
            if now >= deadline:
                raise EnvironmentNotReady(
                    f"{self.describe()} could not run a command within {timeout_sec:g}s: {reason}"
                )
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _POLL_MAX_SEC)

    def _probe(self) -> tuple[bytes, bytes]:
        state = self.client.api.inspect_container(self.container_id)["State"]
        if not state.get("Running"):
            status, code = state.get("Status"), state.get("ExitCode")
            raise _NotRunning(f"its state is {status} (exit code {code})")
        return self._exec_attached(["/bin/sh", "-c", IDS_SCRIPT], "")

    # -- commands ------------------------------------------------------------------------------

    async def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] = NO_ENV,
        user: str | None = None,
        cwd: str | None = None,
        timeout_sec: float,
    ) -> ExecResult:
        check_run(command, env, user, cwd)
        self._check_not_stopped()
        run_dir = f"{PRIVATE_DIR}/{secrets.token_hex(8)}"
        request = run_request(command, run_dir, env=env, user=user, cwd=cwd)
        started = time.monotonic()
        stream = None
        try:
            stream = await self._call(self._exec_started, request)
            exit_code = await self._wait_rc(run_dir, started + timeout_sec)
            if exit_code is None:
                await self._kill_run(run_dir)
        except _ExecRefused as err:
            return ExecResult(126, b"", str(err).encode(), False, time.monotonic() - started)
        except asyncio.CancelledError:
            # The phase was cancelled: the command must not outlive it.
            await asyncio.shield(self._kill_quietly(run_dir))
            raise
        finally:
            if stream is not None:
                await asyncio.to_thread(_close_stream, stream)
        stdout, stderr = await self._call(
            self._exec_attached, ["/bin/sh", "-c", FETCH_SCRIPT, "sh", run_dir], request["user"]
        )
        timed_out = exit_code is None
        return ExecResult(exit_code, stdout, stderr, timed_out, time.monotonic() - started)

    async def _wait_rc(self, run_dir: str, deadline: float) -> int | None:
        """The exit status in `run_dir`/rc once the wrapper has written it; None at `deadline`.

        Every `_STATE_CHECK_SEC` the container's state is looked at too: a container that
        stopped (or is gone) fails the command at once (EnvironmentFailure).
        """
        started = checked = time.monotonic()
        delay = _POLL_FIRST_SEC
        while True:
            exit_code = await self._call(self._read_rc, f"{run_dir}/rc")
            if exit_code is not None:
                return exit_code
            now = time.monotonic()
            if now >= deadline:
                return None
            if now - checked >= _STATE_CHECK_SEC:
                await self._call(self._check_running)
                checked = now
            await asyncio.sleep(min(delay, deadline - now))
            fast = now - started < _POLL_FAST_PHASE_SEC
            delay = min(delay * 2, _POLL_FAST_MAX_SEC if fast else _POLL_MAX_SEC)

    def _read_rc(self, path: str) -> int | None:
        try:
            chunks, _ = self.client.api.get_archive(self.container_id, path)
        except docker.errors.NotFound as err:
            if _container_gone(err):
                raise
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            content = tar.extractfile(member) if member is not None else None
            text = content.read() if content is not None else b""
        return int(text.strip() or b"0")

    def _check_running(self) -> None:
        state = self.client.api.inspect_container(self.container_id)["State"]
        if not state.get("Running"):
            raise EnvironmentFailure(
                f"{self.describe()} stopped: its state is {state.get('Status')}"
            )

    async def _kill_run(self, run_dir: str) -> None:
        """End the run of `run_dir` (its whole session) and wait for its wrapper to finish."""
        grace_ms = str(int(self.kill_grace_sec * 1000))
        out, _ = await self._call(
            self._exec_attached, ["/bin/sh", "-c", KILL_SCRIPT, "sh", run_dir, grace_ms], ROOT
        )
        if out.strip():
            log.warning("processes of a timed-out command survived SIGKILL: %s", out.decode())
        # The session is over, so the command's first process has ended and rc follows, unless
        # something killed the wrapper too (a root command's `kill -9 -1`).
        if await self._wait_rc(run_dir, time.monotonic() + self.response_timeout_sec) is None:
            log.warning("the killed command of %s never reported its exit status", run_dir)

    async def _kill_quietly(self, run_dir: str) -> None:
        try:
            await self._kill_run(run_dir)
        except EnvironmentFailure as err:
            log.warning("could not kill a cancelled command: %s", err)

    async def kill_all(self) -> None:
        self._check_not_stopped()
        grace_ms = str(int(self.kill_grace_sec * 1000))
        out, _ = await self._call(
            self._exec_attached, ["/bin/sh", "-c", KILL_SCRIPT, "sh", "all", grace_ms], ROOT
        )
        check_survivors(out)

    async def stop(self, exit_code: int = 0) -> None:
        if not 0 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 0..255, got {exit_code}")
        if self._stopped:
            return
        self._stopped = True
        try:
            await asyncio.to_thread(self._stop)
        except (docker.errors.DockerException, OSError) as err:
            raise EnvironmentFailure(
                f"could not stop {self.describe()}: {engine_error_text(err)}"
            ) from None

    def _stop(self) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.client.api.stop(self.container_id, timeout=STOP_TIMEOUT_SEC)

    async def terminate(self) -> None:
        self._stopped = True
        try:
            await asyncio.to_thread(remove_container, self.client, self.container_id)
        except (docker.errors.DockerException, OSError) as err:
            raise EnvironmentFailure(
                f"could not remove {self.describe()}: {engine_error_text(err)}"
            ) from None

    # -- files ---------------------------------------------------------------------------------

    async def put_files(
        self,
        local_path: Path,
        container_path: str,
        *,
        owner: str | None = None,
        prepare: str | None = None,
    ) -> None:
        check_put(container_path, owner)
        what = f"copying {local_path} to {container_path} in the environment"
        directory, file_name = await placement(local_path, container_path)
        await make_directory(
            self, directory, prepare=prepare, timeout_sec=self.transfer_timeout_sec, what=what
        )
        try:
            with tempfile.TemporaryFile() as archive:
                await asyncio.to_thread(pack, local_path, file_name, self._owner, archive)
                await self._call(
                    self.client.api.put_archive, self.container_id, str(directory), archive
                )
        except (EnvironmentFailure, OSError) as err:
            raise FileTransferError(f"{what} failed: {err}") from None
        if owner is not None:
            chown = f"chown -R {shlex.quote(owner)} {shlex.quote(container_path)}"
            result = await self.run(chown, user=ROOT, timeout_sec=self.transfer_timeout_sec)
            check_transfer(result, f"giving {container_path} to {owner}")

    async def get_files(self, container_path: str, local_path: Path) -> None:
        check_container_path(container_path)
        self._check_not_stopped()
        source = PurePosixPath(container_path)
        what = f"copying {container_path} out of the environment"
        try:
            await asyncio.to_thread(self._get_archive, str(source), local_path)
        except docker.errors.NotFound as err:
            missing = self.describe() if _container_gone(err) else container_path
            raise FileTransferError(f"{what} failed: there is no {missing}") from None
        except (docker.errors.DockerException, OSError, tarfile.TarError) as err:
            detail = engine_error_text(err)
            raise FileTransferError(f"{what} failed on {self.describe()}: {detail}") from None

    def _get_archive(self, container_path: str, local_path: Path) -> None:
        chunks, _ = self.client.api.get_archive(self.container_id, container_path)
        with tempfile.TemporaryDirectory() as staging:
            archive = Path(staging) / "archive.tar"
            with archive.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            unstage_archive(archive, PurePosixPath(container_path).name, local_path)

    # -- the engine ----------------------------------------------------------------------------

    def _exec_started(self, request: dict[str, Any]) -> Any:
        """Start a run's exec and return its attached stream, to hold open (unread: the wrapper
        writes nothing to it) until the run is over. A detached exec is what the API offers for
        a command nobody waits on, but Podman 4.3 reports one running for ever and its conmon
        stayed as long (half an hour, where an attached exec's leaves within minutes)."""
        created = self.client.api.exec_create(self.container_id, **request)
        try:
            return self.client.api.exec_start(created["Id"], socket=True)
        except docker.errors.APIError as err:
            if err.status_code in (404, 409):
                raise
            # The engine would not start it (say, a user the image does not know).
            raise _ExecRefused(engine_error_text(err)) from None

    def _exec_attached(self, argv: list[str], user: str) -> tuple[bytes, bytes]:
        """Run a short command of the bridge's own and return its stdout and stderr."""
        created = self.client.api.exec_create(self.container_id, argv, user=user)
        stdout, stderr = self.client.api.exec_start(created["Id"], demux=True)
        return stdout or b"", stderr or b""

    async def _call(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a thread; the engine's failures become EnvironmentFailure."""
        try:
            return await asyncio.to_thread(function, *args)
        except _ExecRefused:
            raise
        except (docker.errors.DockerException, OSError) as err:
            raise EnvironmentFailure(
                f"the engine failed on {self.describe()}: {engine_error_text(err)}"
            ) from None

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise EnvironmentFailure("the environment was stopped")


def run_request(
    command: str,
    run_dir: str,
    *,
    env: Mapping[str, str] = NO_ENV,
    user: str | None = None,
    cwd: str | None = None,
) -> dict[str, Any]:
    """docker-py's `exec_create` arguments of a run: `RUN_WRAPPER` with the run's directory, its
    working directory and the command as arguments, as `user` (the container's default one when
    None), with `env` in the exec's own environment (never on a command line, which every user
    of the container can read)."""
    return {
        "cmd": ["/bin/sh", "-c", RUN_WRAPPER, "sh", run_dir, cwd_argument(cwd), command],
        "user": user or "",
        "environment": [f"{name}={value}" for name, value in env.items()] or None,
    }


def _close_stream(stream: Any) -> None:
    """Close an exec's attached stream and the connection under it (docker-py keeps the HTTP
    response that holds it as the stream's `_response`, where the stream takes attributes)."""
    for closable in (getattr(stream, "_response", None), stream):
        if closable is not None:
            with contextlib.suppress(Exception):
                closable.close()


def _container_gone(err: docker.errors.NotFound) -> bool:
    """Whether a 404 says the container is gone (Docker's and Podman's words), not a path."""
    return "no such container" in engine_error_text(err).lower()


class _ExecRefused(Exception):
    """The engine would not start an exec (its message says why)."""
