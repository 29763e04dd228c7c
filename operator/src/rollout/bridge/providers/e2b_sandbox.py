"""A trial's E2B sandbox as the runner's `Environment` (`e2b.E2BProvider` starts it).

Commands run as the docker sandbox's do (`scripts.RUN_WRAPPER`): in a session of their own,
output and exit status in a run directory of `PRIVATE_DIR`, started through the SDK in the
background with the trial's env as the process's environment (never on a command line) and its
user by name (the SDK's `user` option). The SDK reports the wrapper's end as the command's
exit; on a timeout the bridge ends the command's session as root (`scripts.KILL_SCRIPT`).
`kill_all` spares the processes the sandbox had when it became ready (`BASELINE`): an E2B
sandbox's PID 1 is not the only process of its own. Files go in and out as tar archives
(`archives`) written and read through the SDK's filesystem API and unpacked by `tar` in the
sandbox, so modes, links and ownership survive as with Docker.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

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
    KILL_GRACE_SEC,
    KILL_SCRIPT,
    PRIVATE_DIR,
    RESPONSE_TIMEOUT_SEC,
    RUN_WRAPPER,
    check_run,
    check_survivors,
    cwd_argument,
    kill_script,
    parse_ids,
)
from rollout.local.engine import LOGS_DIR
from rollout_runner.environment import (
    NO_ENV,
    EnvironmentFailure,
    EnvironmentNotReady,
    ExecResult,
    FileTransferError,
)
from rollout_runner.transfer import check_container_path, check_put

log = logging.getLogger(__name__)

T = TypeVar("T")

ROOT = "root"
BASELINE = f"{PRIVATE_DIR}/base"
"""The processes that were there when the sandbox became ready (init, envd, the template's
start command): `kill_all` leaves them alone, as a trial Pod's kill leaves the shim."""
_POLL_MAX_SEC = 1.0
_READY_POLL_FIRST_SEC = 0.1

# $1: /logs, $2: PRIVATE_DIR (and its baseline file `base`). /logs and its agent and verifier
# directories open to every user as a trial Pod's emptyDir is, PRIVATE_DIR as /tmp is; then the
# processes there now (but this one) are the sandbox's own.
SETUP_SCRIPT = """mkdir -p "$1/agent" "$1/verifier" "$2" || exit 1
chmod 777 "$1" "$1/agent" "$1/verifier" && chmod 1777 "$2" || exit 1
for f in /proc/[0-9]*; do p=${f#/proc/}; [ "$p" = $$ ] || echo "$p"; done >"$2/base.t"
mv -f "$2/base.t" "$2/base\""""

# $1: the baseline file, $2: the grace in ms between TERM and KILL. Every process but the
# baseline's, kernel threads (children of kthreadd, PID 2) and this one: TERM, then KILL after
# the grace; prints the survivors of 100 rounds of KILL.
KILL_ALL_SCRIPT = kill_script(
    """B=" "; while read -r x; do B="$B$x "; done <"$1"
G=$2
pick() {
  T=" "
  for f in /proc/[0-9]*/stat; do
    { read -r l <"$f"; } 2>/dev/null || continue
    p=${f#/proc/}; p=${p%/stat}
    set -- ${l##*) }
    case $1 in Z|X|x) continue ;; esac
    if [ $p = $$ ] || [ $p = 2 ] || [ "$2" = 2 ]; then continue; fi
    case $B in *" $p "*) continue ;; esac
    T="$T$p "
  done
}
over() {
  U=; for p in $S; do case $T in *" $p "*) U="$U $p" ;; esac; done
  [ -z "$U" ]
}"""
)

# $1: the archive, $2: where to unpack it, $3: the owner ("" for none), $4: the path to give.
UNPACK_SCRIPT = """tar -xf "$1" -C "$2"; r=$?; rm -f "$1"; [ $r -eq 0 ] || exit $r
[ -z "$3" ] || chown -R "$3" "$4\""""

# $1: the archive to write, $2: the parent directory, $3: the name in it. Exit 3: no such path.
PACK_SCRIPT = """[ -e "$2/$3" ] || [ -L "$2/$3" ] || exit 3
tar -cf "$1" -C "$2" "./$3\""""
_NO_SUCH_PATH = 3


def error_text(err: BaseException) -> str:
    """An SDK error as one line for a message (its class when it says nothing)."""
    text = " ".join(str(err).split())
    return text or type(err).__name__


# --- The sandbox -------------------------------------------------------------------------------


class E2BSandbox(Sandbox):
    """One trial's E2B sandbox, driven through the SDK (`sandbox`: an `AsyncSandbox`)."""

    def __init__(
        self,
        sdk: Any,
        sandbox: Any,
        template: str,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        transfer_timeout_sec: float = TRANSFER_TIMEOUT_SEC,
    ) -> None:
        self.sdk = sdk
        self.sandbox = sandbox
        self.template = template
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self._owner: tuple[int, int] = (0, 0)
        """The default user's uid and gid: what files put in the sandbox belong to."""
        self._stopped = False
        self._killed = False

    @property
    def sandbox_id(self) -> str:
        return str(self.sandbox.sandbox_id)

    def describe(self) -> str:
        return (
            f"E2B sandbox {self.sandbox_id} (template {self.template}); open a shell in it with "
            f"`e2b sandbox connect {self.sandbox_id}`"
        )

    # -- readiness -----------------------------------------------------------------------------

    async def wait_ready(self, timeout_sec: float) -> None:
        """Ready once the bridge's directories are made, the sandbox's own processes noted
        (`BASELINE`) and a command runs as the default user."""
        deadline = time.monotonic() + timeout_sec
        delay = _READY_POLL_FIRST_SEC
        while True:
            try:
                code, _, err = await self._script(SETUP_SCRIPT, LOGS_DIR, PRIVATE_DIR, user=ROOT)
                if code != 0:
                    raise EnvironmentNotReady(
                        f"{self.describe()} could not be set up: {err.decode(errors='replace')}"
                    )
                code, out, _ = await self._script(IDS_SCRIPT)
                self._owner = parse_ids(out) or self._owner
                return
            except _Gone as err:
                raise EnvironmentNotReady(f"{self.describe()} is not running: {err}") from None
            except EnvironmentNotReady:
                raise
            except EnvironmentFailure as err:
                reason = str(err)
            now = time.monotonic()
            if now >= deadline:
                raise EnvironmentNotReady(
                    f"{self.describe()} could not run a command within {timeout_sec:g}s: {reason}"
                )
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _POLL_MAX_SEC)

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
        started = time.monotonic()
        line = shell_line(RUN_WRAPPER, run_dir, cwd_argument(cwd), command)
        try:
            handle = await self._sdk_call(
                self.sandbox.commands.run(
                    line, background=True, envs=dict(env) or None, user=user, timeout=0
                )
            )
        except _Refused as err:
            return ExecResult(126, b"", str(err).encode(), False, time.monotonic() - started)
        waiter = asyncio.ensure_future(handle.wait())
        try:
            exit_code = await self._wait(waiter, run_dir, started + timeout_sec)
            if exit_code is None:
                await self._kill_run(waiter, run_dir)
        except asyncio.CancelledError:
            # The phase was cancelled: the command must not outlive it.
            await asyncio.shield(self._kill_quietly(waiter, run_dir))
            raise
        finally:
            if not waiter.done():
                waiter.cancel()
        stdout, stderr = await self._outputs(run_dir)
        return ExecResult(exit_code, stdout, stderr, exit_code is None, time.monotonic() - started)

    async def _wait(self, waiter: asyncio.Future[Any], run_dir: str, deadline: float) -> int | None:
        """The command's exit status once its wrapper ends; None at `deadline`. When the SDK's
        stream of the command breaks while the sandbox runs, the wrapper's `rc` file is polled
        instead."""
        done, _ = await asyncio.wait({waiter}, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            return None
        try:
            return self._exit_of(waiter)
        except Exception as err:
            if isinstance(err, self.sdk.SandboxNotRunningException):
                raise EnvironmentFailure(f"{self.describe()} stopped: {error_text(err)}") from None
            log.info("lost the stream of a command (%s): polling its status", error_text(err))
        return await self._poll_rc(run_dir, deadline)

    def _exit_of(self, waiter: asyncio.Future[Any]) -> int:
        try:
            return int(waiter.result().exit_code)
        except self.sdk.CommandExitException as err:
            return int(err.exit_code)

    async def _poll_rc(self, run_dir: str, deadline: float) -> int | None:
        delay = _READY_POLL_FIRST_SEC
        while True:
            try:
                text = await self._sdk_call(
                    self.sandbox.files.read(f"{run_dir}/rc", format="text", user=ROOT)
                )
                return int(str(text).strip() or "0")
            except _Missing:
                pass
            now = time.monotonic()
            if now >= deadline:
                return None
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, _POLL_MAX_SEC)

    async def _kill_run(self, waiter: asyncio.Future[Any], run_dir: str) -> None:
        """End the run of `run_dir` (its whole session) and wait for its wrapper to finish."""
        grace_ms = str(int(self.kill_grace_sec * 1000))
        _, out, _ = await self._script(KILL_SCRIPT, run_dir, grace_ms, user=ROOT)
        if out.strip():
            log.warning("processes of a timed-out command survived SIGKILL: %s", out.decode())
        deadline = time.monotonic() + self.response_timeout_sec
        if await self._wait(waiter, run_dir, deadline) is None:
            log.warning("the killed command of %s never reported its exit status", run_dir)

    async def _kill_quietly(self, waiter: asyncio.Future[Any], run_dir: str) -> None:
        try:
            await self._kill_run(waiter, run_dir)
        except EnvironmentFailure as err:
            log.warning("could not kill a cancelled command: %s", err)

    async def _outputs(self, run_dir: str) -> tuple[bytes, bytes]:
        """The run's stdout and stderr, byte for byte; then its directory is removed."""
        stdout, stderr = await asyncio.gather(
            self._read_bytes(f"{run_dir}/out"), self._read_bytes(f"{run_dir}/err")
        )
        try:
            await self._sdk_call(self.sandbox.files.remove(run_dir, user=ROOT))
        except EnvironmentFailure as err:
            log.warning("could not remove %s: %s", run_dir, err)
        return stdout, stderr

    async def _read_bytes(self, path: str) -> bytes:
        try:
            data = await self._sdk_call(
                self.sandbox.files.read(
                    path, format="bytes", user=ROOT, request_timeout=self.transfer_timeout_sec
                )
            )
        except _Missing:
            return b""
        return bytes(data)

    async def kill_all(self) -> None:
        self._check_not_stopped()
        grace_ms = str(int(self.kill_grace_sec * 1000))
        _, out, _ = await self._script(KILL_ALL_SCRIPT, BASELINE, grace_ms, user=ROOT)
        check_survivors(out)

    async def stop(self, exit_code: int = 0) -> None:
        """Kill the sandbox (E2B has no stopped state that keeps it but pausing, which the
        bridge leaves to a kept sandbox's timeout)."""
        if not 0 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 0..255, got {exit_code}")
        if self._stopped:
            return
        self._stopped = True
        await self._kill()

    async def terminate(self) -> None:
        self._stopped = True
        await self._kill()

    async def _kill(self) -> None:
        if self._killed:
            return
        try:
            await self.sandbox.kill()
        except Exception as err:
            raise EnvironmentFailure(
                f"could not kill {self.describe()}: {error_text(err)}"
            ) from None
        self._killed = True

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
        archive_path = f"{PRIVATE_DIR}/{secrets.token_hex(8)}.tar"
        try:
            with tempfile.TemporaryFile() as archive:
                await asyncio.to_thread(pack, local_path, file_name, self._owner, archive)
                await self._sdk_call(
                    self.sandbox.files.write(
                        archive_path,
                        archive,
                        user=ROOT,
                        request_timeout=self.transfer_timeout_sec,
                    )
                )
        except (EnvironmentFailure, OSError) as err:
            raise FileTransferError(f"{what} failed: {err}") from None
        code, _, errors = await self._script(
            UNPACK_SCRIPT,
            archive_path,
            str(directory),
            owner or "",
            container_path,
            user=ROOT,
            timeout_sec=self.transfer_timeout_sec,
        )
        if code != 0:
            detail = errors.decode(errors="replace").strip()
            raise FileTransferError(f"{what} failed (exit code {code}): {detail}")

    async def get_files(self, container_path: str, local_path: Path) -> None:
        check_container_path(container_path)
        self._check_not_stopped()
        source = PurePosixPath(container_path)
        what = f"copying {container_path} out of the environment"
        archive_path = f"{PRIVATE_DIR}/{secrets.token_hex(8)}.tar"
        code, _, err = await self._script(
            PACK_SCRIPT,
            archive_path,
            str(source.parent),
            source.name,
            user=ROOT,
            timeout_sec=self.transfer_timeout_sec,
        )
        if code == _NO_SUCH_PATH:
            raise FileTransferError(f"{what} failed: there is no {container_path}")
        if code != 0:
            detail = err.decode(errors="replace").strip()
            raise FileTransferError(f"{what} failed (exit code {code}): {detail}")
        try:
            data = await self._read_bytes(archive_path)
            await asyncio.to_thread(_unpack_to, data, source.name, local_path)
        except (EnvironmentFailure, OSError, tarfile.TarError) as err:
            raise FileTransferError(f"{what} failed on {self.describe()}: {err}") from None
        finally:
            try:
                await self._sdk_call(self.sandbox.files.remove(archive_path, user=ROOT))
            except EnvironmentFailure as err:
                log.warning("could not remove %s: %s", archive_path, err)

    # -- the SDK -------------------------------------------------------------------------------

    async def _script(
        self,
        script: str,
        *args: str,
        user: str | None = None,
        timeout_sec: float | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Run a short script of the bridge's own with /bin/sh and wait for it: its exit code,
        stdout and stderr."""
        limit = self.response_timeout_sec + self.kill_grace_sec
        run = self.sandbox.commands.run(
            shell_line(script, *args), user=user, timeout=timeout_sec or limit
        )
        try:
            result = await self._sdk_call(run)
        except _Exited as exited:
            return exited.exit_code, exited.stdout, exited.stderr
        except _Refused as err:
            raise EnvironmentFailure(str(err)) from None
        return int(result.exit_code), _encoded(result.stdout), _encoded(result.stderr)

    async def _sdk_call(self, call: Awaitable[T]) -> T:
        """Await an SDK call; its failures become the environment's (the sandbox gone: `_Gone`;
        a missing file: `_Missing`; a command exiting non-zero: `_Exited`; a command refused for
        its user: `_Refused`)."""
        sdk = self.sdk
        try:
            return await call
        except sdk.CommandExitException as err:
            raise _Exited(int(err.exit_code), _encoded(err.stdout), _encoded(err.stderr)) from None
        except sdk.FileNotFoundException as err:
            raise _Missing(error_text(err)) from None
        except (sdk.SandboxNotRunningException, sdk.SandboxNotFoundException) as err:
            raise _Gone(f"{self.describe()} is gone: {error_text(err)}") from None
        except (sdk.InvalidArgumentException, sdk.AuthenticationException) as err:
            # envd's answer to a command or file operation as a user the sandbox lacks.
            raise _Refused(error_text(err)) from None
        except (sdk.SandboxException, sdk.ServiceBusyException, OSError) as err:
            raise EnvironmentFailure(
                f"E2B failed on {self.describe()}: {error_text(err)}"
            ) from None

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise EnvironmentFailure("the environment was stopped")


class _Gone(EnvironmentFailure):
    """The sandbox is not running any more (killed, or past its timeout)."""


class _Missing(EnvironmentFailure):
    """A file the bridge reads is not there (yet)."""


class _Refused(EnvironmentFailure):
    """envd would not start a command or file operation (say, as a user the sandbox lacks)."""


class _Exited(EnvironmentFailure):
    """A foreground command of the bridge's own exited non-zero (the SDK raises for it)."""

    def __init__(self, exit_code: int, stdout: bytes, stderr: bytes) -> None:
        super().__init__(f"exit code {exit_code}")
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr


def shell_line(script: str, *args: str) -> str:
    """The command line the SDK runs (it hands it to `bash -l -c`): `script` run by /bin/sh
    with `args`, every one quoted, so the trial's commands get /bin/sh's semantics."""
    return " ".join(["exec", "/bin/sh", "-c", shlex.quote(script), "sh", *map(shlex.quote, args)])


def _encoded(text: str | bytes | None) -> bytes:
    if text is None:
        return b""
    return text if isinstance(text, bytes) else text.encode()


def _unpack_to(data: bytes, name: str, local_path: Path) -> None:
    """Put the tree `name` of the tar `data` at `local_path` (`archives.unstage_archive`)."""
    with tempfile.TemporaryDirectory() as staging:
        archive = Path(staging) / "archive.tar"
        archive.write_bytes(data)
        unstage_archive(archive, name, local_path)
