"""`ShimEnvironment`: the trial Pod's environment container, driven through the shim's control dir.

The runner and the shim share only a directory (see `rollout.api.wire.shim` for the protocol).
Each operation writes a request there, wakes the shim (protocols 2 and 3: a line into its FIFO;
a shim of protocol 1 polls) and waits for the shim's answer: the shim's line in the runner's FIFO
`done` wakes it (a shim that announces `done`), else it polls with short asyncio sleeps. The
runner enforces every timeout itself and asks the shim to kill what overstays. `stats` counts
the requests and the looks for answers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import secrets
import shlex
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from rollout.api.wire import shim
from rollout_runner.environment import (
    NO_ENV,
    Environment,
    EnvironmentFailure,
    EnvironmentNotReady,
    ExecResult,
    FileTransferError,
)
from rollout_runner.shim_requests import (
    DoneFifo,
    DoneFifoUnusable,
    ShimInfo,
    cancel_unstarted,
    encode_env,
    give_to,
    one_line,
    read_result,
    request_file_exists,
    wake_shim,
    write_request,
)
from rollout_runner.transfer import (
    USER_NAME,
    after_prepare,
    check_container_path,
    check_put,
    check_transfer,
    unstage,
)

log = logging.getLogger(__name__)

# Polling for the shim's answer: every few ms while most commands finish, then gently.
_POLL_FIRST_SEC = 0.001
_POLL_FAST_MAX_SEC = 0.01
_POLL_FAST_PHASE_SEC = 2.0
_POLL_MAX_SEC = 0.05
# With the done FIFO: how often the runner still looks for an answer it was not told of, and
# how many answers found that way (not told of in time) make it poll instead.
ANSWER_CHECK_SEC = 0.5
UNTOLD_ANSWERS_TO_POLL = 3
NO_FILES: Mapping[str, bytes] = MappingProxyType({})


@dataclass
class ShimStats:
    """What a `ShimEnvironment` asked of its shim, and how it learnt of the answers."""

    requests: int = 0
    """Requests written (each a round trip to the shim)."""
    checks: int = 0
    """Looks for a request's `rc` file: once per poll when polling, and with the done FIFO
    once when the wait begins, once per line of the shim's and once per `ANSWER_CHECK_SEC`."""
    notifications: int = 0
    """Wakes by a line of the shim's in the done FIFO."""
    untold: int = 0
    """Answers found by the look every `ANSWER_CHECK_SEC`, before (or without) their line."""


def _dir_made(quoted: str) -> str:
    """sh that makes the directory `quoted` (a quoted path) unless it is one already: `mkdir -p`
    is a process to start in the environment, under the task's CPU limit, and the directory is
    often there (/tmp, or /installed-agent for the second script)."""
    return f"{{ [ -d {quoted} ] || mkdir -p {quoted}; }}"


class ShimNotReady(EnvironmentNotReady):
    """The shim did not write its ready file within the timeout."""


class ShimUnresponsive(EnvironmentFailure):
    """The shim did not answer a request it should answer promptly (kill, kill-all, exit)."""


class ShimEnvironment(Environment):
    """An `Environment` over the shim's control directory, `control_dir` as the runner sees it.

    `kill_grace_sec` is how long a killed command gets between TERM and KILL;
    `response_timeout_sec` bounds how long the shim may take to answer a kill, kill-all or exit
    (beyond that grace) before `ShimUnresponsive`; `transfer_timeout_sec` bounds one file copy.
    `answer_check_sec` is how often, while the shim's done FIFO serves, the runner looks for an
    answer anyway; `done_fifo` False polls for every answer even so.
    """

    def __init__(
        self,
        control_dir: Path,
        *,
        kill_grace_sec: float = 5.0,
        response_timeout_sec: float = 30.0,
        transfer_timeout_sec: float = 600.0,
        answer_check_sec: float = ANSWER_CHECK_SEC,
        done_fifo: bool = True,
    ) -> None:
        self.control_dir = control_dir
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self.answer_check_sec = answer_check_sec
        self.info: ShimInfo | None = None
        self.stats = ShimStats()
        self._use_done_fifo = done_fifo
        self._done: DoneFifo | None = None
        self._shim_uid: int | None = None
        self._requests = control_dir / shim.REQUESTS_DIR
        self._transfers = control_dir / shim.TRANSFER_DIR
        self._sequence = itertools.count(1)
        self._stopped = False

    # -- readiness -----------------------------------------------------------------------------

    async def wait_ready(self, timeout_sec: float) -> None:
        ready = self.control_dir / shim.READY_FILE
        if not await self._wait_for(ready, time.monotonic() + timeout_sec):
            raise ShimNotReady(
                f"the environment's shim did not signal ready within {timeout_sec:g}s "
                f"(no {ready}): the environment container did not start or has no /bin/sh"
            )
        info = ShimInfo.parse(await asyncio.to_thread(ready.read_text, encoding="utf-8"))
        if info.version not in shim.PROTOCOL_VERSIONS:
            versions = " and ".join(str(v) for v in shim.PROTOCOL_VERSIONS)
            raise EnvironmentFailure(
                f"the shim speaks protocol version {info.version}, this runner versions {versions}"
            )
        self.info = info
        written = await asyncio.to_thread(ready.stat)
        # Who the shim is on this side: the owner of the file it wrote. Its `uid` is as the
        # environment sees it, which differs in a user namespace (the host sandbox without root).
        self._shim_uid = written.st_uid
        # The shim writes it once started (a shell's start and a few mkdirs after its
        # container's): the environment's start, on this node's clock, as the runner reports it.
        self.ready_at = datetime.fromtimestamp(written.st_mtime_ns / 1e9, UTC)
        if info.notifies_done and self._use_done_fifo:
            done = self.control_dir / shim.DONE_FIFO
            self._done = await asyncio.to_thread(DoneFifo.create, done, self._shim_owner())
        await asyncio.to_thread(self._restrict_control_dir, self._shim_uid)

    @property
    def waits_on_done_fifo(self) -> bool:
        """Whether the shim's lines in the done FIFO tell this runner of answers (else it polls)."""
        return self._done is not None

    def _restrict_control_dir(self, shim_uid: int | None) -> None:
        """Close the control directory to everyone but the shim's user (and the runner).

        Whoever can write requests can run commands as the shim's user (often root), so an agent
        running as another user must not reach it. This happens only once the shim is ready, and
        the directory goes to the shim's own uid first: restricting it earlier, or leaving it to
        root, would lock out a shim that runs as a non-root image user. No agent command has run
        yet at this point, so nothing could have slipped in before.
        """
        try:
            if shim_uid is not None and shim_uid != os.geteuid():
                os.chown(self.control_dir, shim_uid, -1)
            self.control_dir.chmod(0o700)
        except OSError as err:
            log.debug("cannot restrict the control directory %s: %s", self.control_dir, err)

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
        files = {shim.COMMAND_FILE: command.encode()}
        if "\0" in command or len(files[shim.COMMAND_FILE]) > shim.MAX_ARGUMENT_BYTES:
            raise ValueError(
                "command must hold no NUL and fit in 128 KiB: write a long script to a file "
                "and run that"
            )
        if user is not None:
            if not USER_NAME.match(user):
                raise ValueError(f"user must be a user name, got {user!r}")
            files[shim.USER_FILE] = user.encode() + b"\n"
        if cwd is not None:
            # "./" keeps a relative cwd from meaning `cd -` or searching CDPATH.
            files[shim.CWD_FILE] = one_line("cwd", cwd if cwd.startswith("/") else f"./{cwd}")
        secret = {}
        if env:
            encoded = encode_env(env).encode()
            if len(encoded) > shim.MAX_ARGUMENT_BYTES:
                raise ValueError("env must fit in 128 KiB once encoded")
            secret[shim.ENV_FILE] = encoded
        self._check_not_stopped()
        started = time.monotonic()
        request = await self._submit("run", files, secret)
        try:
            done = await self._wait_for_answer(request, started + timeout_sec)
            if done:
                exit_code, stdout, stderr = await asyncio.to_thread(read_result, request)
                return ExecResult(exit_code, stdout, stderr, False, time.monotonic() - started)
            await self._terminate(request)
            _, stdout, stderr = await asyncio.to_thread(read_result, request)
            return ExecResult(None, stdout, stderr, True, time.monotonic() - started)
        except asyncio.CancelledError:
            # The phase was cancelled: the command must not outlive it.
            await asyncio.shield(self._terminate_quietly(request))
            raise
        finally:
            await asyncio.to_thread(shutil.rmtree, request, True)

    async def kill_all(self) -> None:
        self._check_not_stopped()
        grace_ms = int(self.kill_grace_sec * 1000)
        request = await self._submit(f"killall {grace_ms}")
        try:
            exit_code, stdout, _ = await self._await_answer(request, "kill-all", grace=True)
        finally:
            await asyncio.to_thread(shutil.rmtree, request, True)
        if exit_code != 0:
            survivors = stdout.decode(errors="replace").split()
            raise EnvironmentFailure(f"processes survived SIGKILL in the environment: {survivors}")

    async def stop(self, exit_code: int = 0) -> None:
        if not 0 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 0..255, got {exit_code}")
        if self._stopped:
            return
        request = await self._submit(f"exit {exit_code}")
        self._stopped = True
        await self._await_answer(request, "exit", grace=False)
        await asyncio.to_thread(shutil.rmtree, request, True)

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
        info = self._require_info()
        transfer_id = self._new_id()
        staging = self._transfers / transfer_id
        source = f"{info.control_dir}/{shim.TRANSFER_DIR}/{transfer_id}/data"
        destination = shlex.quote(container_path)
        try:
            is_dir = await asyncio.to_thread(_stage, local_path, staging / "data")
            await asyncio.to_thread(give_to, staging, self._shim_owner())
            if is_dir:
                copy = (
                    f"{_dir_made(destination)} && cp -RP {shlex.quote(source + '/.')} {destination}"
                )
            else:
                parent = shlex.quote(str(PurePosixPath(container_path).parent))
                copy = f"{_dir_made(parent)} && cp -P {shlex.quote(source)} {destination}"
            if owner is not None:
                copy += f" && chown -R {shlex.quote(owner)} {destination}"
            if prepare is not None:
                copy = after_prepare(prepare, copy)
            result = await self.run(copy, timeout_sec=self.transfer_timeout_sec)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)
        what = f"copying {local_path} to {container_path} in the environment"
        check_transfer(result, f"preparing for and {what}" if prepare is not None else what)

    async def get_files(self, container_path: str, local_path: Path) -> None:
        check_container_path(container_path)
        info = self._require_info()
        transfer_id = self._new_id()
        staging = self._transfers / transfer_id
        target = f"{info.control_dir}/{shim.TRANSFER_DIR}/{transfer_id}/data"
        try:
            await asyncio.to_thread(staging.mkdir, parents=True)
            await asyncio.to_thread(give_to, staging, self._shim_owner())
            result = await self.run(
                f"cp -RP {shlex.quote(container_path)} {shlex.quote(target)}",
                timeout_sec=self.transfer_timeout_sec,
            )
            check_transfer(result, f"copying {container_path} out of the environment")
            await asyncio.to_thread(unstage, staging / "data", local_path)
        finally:
            await asyncio.to_thread(shutil.rmtree, staging, True)

    # -- protocol ------------------------------------------------------------------------------

    def _shim_owner(self) -> int | None:
        """The shim's uid when it is not ours: what the runner writes for it must be the shim's
        (an image whose USER is not root runs the shim as that user; the runner is root)."""
        uid = self._shim_uid
        return uid if uid is not None and uid != os.geteuid() else None

    def _new_id(self) -> str:
        # The sequence makes the shim take requests in submission order (it globs req/*).
        return f"{next(self._sequence):08d}-{secrets.token_hex(3)}"

    async def _submit(
        self,
        line: str,
        files: Mapping[str, bytes] = NO_FILES,
        secret: Mapping[str, bytes] = NO_FILES,
    ) -> Path:
        request = self._requests / self._new_id()
        await asyncio.to_thread(write_request, request, line, files, secret, self._shim_owner())
        self.stats.requests += 1
        if self.info is not None and self.info.version >= shim.WAKE_VERSION:
            wake_shim(self.control_dir / shim.WAKE_FIFO)
        log.debug("shim request %s: %s", request.name, line.split()[0])
        return request

    async def _wait_for_answer(self, request: Path, deadline: float) -> bool:
        """Wait for the shim's answer to `request` (its `rc`) until `deadline`; False then."""
        rc = request / shim.RC_FILE
        done = self._done
        if done is not None:
            try:
                return await self._wait_told(done, request, deadline)
            except DoneFifoUnusable as err:
                log.warning("the done FIFO does not serve (%s): polling for answers", err)
                self._done = None
        return await self._wait_for(rc, deadline, count=True)

    async def _wait_told(self, done: DoneFifo, request: Path, deadline: float) -> bool:
        """`_wait_for_answer` with the done FIFO: a look for `rc`, then one after each line of
        the shim's about `request` and every `answer_check_sec`."""
        rc = request / shim.RC_FILE
        with done.watching(request.name) as told:
            while not self._check(rc):
                now = time.monotonic()
                if now >= deadline:
                    return False
                wait = min(self.answer_check_sec, deadline - now)
                try:
                    async with asyncio.timeout(wait):
                        await told.wait()
                except TimeoutError:
                    if wait < self.answer_check_sec or not self._check(rc):
                        continue
                    # Answered, and no line said so yet: a line on its way (the look came
                    # between rc and the line), or a FIFO that does not serve (say, the shim
                    # may not open it). After a few, poll.
                    self.stats.untold += 1
                    if self._done is not None and self.stats.untold >= UNTOLD_ANSWERS_TO_POLL:
                        log.warning(
                            "the shim answered %d requests without a line in its done FIFO "
                            "(the last %s): polling for answers from now on",
                            self.stats.untold,
                            request.name,
                        )
                        self._done = None
                    return True
                told.clear()
                self.stats.notifications += 1
        return True

    def _check(self, rc: Path) -> bool:
        self.stats.checks += 1
        return request_file_exists(rc)

    async def _wait_for(self, path: Path, deadline: float, *, count: bool = False) -> bool:
        """Poll for `path` until `deadline` (time.monotonic()); quickly at first, then gently.
        `count`: each look is one of `stats.checks`."""
        started = time.monotonic()
        delay = _POLL_FIRST_SEC
        while not (self._check(path) if count else request_file_exists(path)):
            now = time.monotonic()
            if now >= deadline:
                return False
            await asyncio.sleep(min(delay, deadline - now))
            fast = now - started < _POLL_FAST_PHASE_SEC
            delay = min(delay * 2, _POLL_FAST_MAX_SEC if fast else _POLL_MAX_SEC)
        return True

    async def _await_answer(
        self, request: Path, what: str, *, grace: bool
    ) -> tuple[int | None, bytes, bytes]:
        timeout = self.response_timeout_sec + (self.kill_grace_sec if grace else 0.0)
        if not await self._wait_for_answer(request, time.monotonic() + timeout):
            raise ShimUnresponsive(
                f"the environment's shim did not answer the {what} request {request.name} "
                f"within {timeout:g}s"
            )
        return await asyncio.to_thread(read_result, request)

    async def _terminate(self, request: Path) -> None:
        """Make sure the run `request` is over: cancel it if not started, else kill its session."""
        version = self.info.version if self.info is not None else shim.PROTOCOL_VERSION
        if await asyncio.to_thread(cancel_unstarted, request, version):
            return
        grace_ms = int(self.kill_grace_sec * 1000)
        kill = await self._submit(f"kill {request.name} {grace_ms}")
        try:
            exit_code, stdout, _ = await self._await_answer(kill, "kill", grace=True)
        finally:
            await asyncio.to_thread(shutil.rmtree, kill, True)
        if exit_code != 0:
            log.warning(
                "processes of request %s survived SIGKILL: %s",
                request.name,
                stdout.decode(errors="replace").split(),
            )
        # The session is empty, so the command's main process has ended and its rc follows,
        # unless something killed the shim's handler too (a root agent's `kill -9 -1`).
        deadline = time.monotonic() + self.response_timeout_sec
        if not await self._wait_for_answer(request, deadline):
            log.warning("the killed request %s never reported its exit status", request.name)

    async def _terminate_quietly(self, request: Path) -> None:
        try:
            await self._terminate(request)
        except (EnvironmentFailure, OSError) as err:
            log.warning("could not kill cancelled request %s: %s", request.name, err)

    def _require_info(self) -> ShimInfo:
        self._check_not_stopped()
        if self.info is None:
            raise EnvironmentFailure("the environment is not ready: call wait_ready() first")
        return self.info

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise EnvironmentFailure("the environment was stopped")


def _stage(local_path: Path, staged: Path) -> bool:
    """Copy `local_path` to `staged` in the control dir; True when it is a directory."""
    staged.parent.mkdir(parents=True)
    if local_path.is_dir():
        shutil.copytree(local_path, staged, symlinks=True)
        return True
    if not local_path.is_file():
        raise FileTransferError(f"{local_path} is neither a file nor a directory")
    shutil.copy2(local_path, staged)
    return False
