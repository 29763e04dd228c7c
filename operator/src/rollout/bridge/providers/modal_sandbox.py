"""A trial's Modal Sandbox as the runner's `Environment` (`modal.ModalProvider` starts it).

Commands run as Modal execs (root, as Modal runs them) under this module's `RUN_WRAPPER`, which
starts the command in a session of its own, as the user asked for (su, runuser or setpriv, as a
trial Pod's shim does: Modal's exec has no user option), with the env given in the exec's own
environment (never on a command line), and its output in files, so a daemon the command leaves
behind holds no stream of the bridge open. When the command's time is up, a second exec
(`KILL_SCRIPT`, a `scripts.kill_script`) ends its session, TERM first and KILL after a grace.
Files travel as tar archives (`archives`): the SDK's `filesystem.copy_from_local` carries one
in, an exec's `tar -c` streams one out (the image needs tar, as busybox or GNU tar).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from rollout.bridge.providers.archives import (
    TRANSFER_TIMEOUT_SEC,
    pack,
    placement,
    unstage_archive,
)
from rollout.bridge.providers.base import Sandbox
from rollout.bridge.providers.scripts import (
    KILL_GRACE_SEC,
    PRIVATE_DIR,
    RESPONSE_TIMEOUT_SEC,
    check_run,
    check_survivors,
    cwd_argument,
    kill_script,
)
from rollout.local.engine import LOGS_DIR
from rollout_runner.environment import (
    NO_ENV,
    EnvironmentFailure,
    EnvironmentNotReady,
    ExecResult,
    FileTransferError,
)
from rollout_runner.transfer import after_prepare, check_container_path, check_put, check_transfer

log = logging.getLogger(__name__)

APP_NAME = "rollout-bridge"
"""The Modal App every bridge sandbox belongs to (looked up, created when missing)."""
EXEC_MARGIN_SEC = 60
"""How long Modal lets an exec outlive the bridge's own deadline for it (a backstop)."""
_READY_POLL_SEC = 1.0
_ERROR_TEXT_MAX = 2000

# $1: the run's directory, $2: the working directory (empty: the sandbox's), $3: the user
# (empty: the exec's own), $4: the command. The env arrives in _RS_ENV and is set after any
# user switch (su keeps the environment but would reset some of it). The command runs in a
# session of its own (setsid, where there is one) with its output in files; its exit status,
# 128+N when signal N killed it, is the wrapper's, after the output.
RUN_WRAPPER = """r=$1
mkdir -m 700 "$r" || exit 125
S=; command -v setsid >/dev/null 2>&1 && S=setsid
I='e=$_RS_ENV; unset _RS_ENV; eval "$e"; exec /bin/sh -c "$1"'
u=$3; U=
if [ -n "$u" ]; then
  case $u in *[!0-9]*) ;; *)
    while IFS=: read -r n x i y; do [ "$i" = "$u" ] && { u=$n; break; }; done </etc/passwd ;;
  esac
  if ! id "$u" >/dev/null 2>&1; then echo "no such user: $3" >&2; rm -rf "$r"; exit 126; fi
  for x in su runuser setpriv; do command -v $x >/dev/null 2>&1 && { U=$x; break; }; done
  if [ -z "$U" ]; then
    echo "no su, runuser or setpriv to run as $3" >&2; rm -rf "$r"; exit 126
  fi
fi
(
  if [ -n "$2" ]; then cd "$2" || exit 126; fi
  case $U in
    "") exec $S /bin/sh -c "$I" sh "$4" ;;
    su) exec $S su -s /bin/sh "$u" -c "$I" sh "$4" ;;
    runuser) exec $S runuser -u "$u" -- /bin/sh -c "$I" sh "$4" ;;
    setpriv) exec $S setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \\
      /bin/sh -c "$I" sh "$4" ;;
  esac
) </dev/null >"$r/out" 2>"$r/err" &
k=$!; echo $k >"$r/pid"
wait $k; c=$?
cat "$r/out"; cat "$r/err" >&2; rm -rf "$r"
exit $c"""

# $1: `all` (every process but PID 1, this script and its ancestors, which carry the exec) or a
# run's directory (its session or group, its first process, their children, and whatever an
# earlier round picked: su starts the command in a session of its own, orphaned once su dies);
# $2: the grace in ms between TERM and KILL. Done when no process it signalled lives on (for a
# run: when none of the run is left); prints the survivors of 100 rounds of KILL otherwise.
KILL_SCRIPT = kill_script(
    """A=$1 G=$2
X=" 1 $$ "; p=$$
while [ "${p:-0}" -gt 1 ] && { read -r l </proc/$p/stat; } 2>/dev/null; do
  set -- ${l##*) }; p=$2; X="$X$p "
done
K=all O=" "
if [ "$A" != all ]; then
  n=$((5000 / D)); K=
  while [ -d "$A" ] && [ ! -s "$A/pid" ] && [ $n -gt 0 ]; do sleep $P; n=$((n - 1)); done
  [ -s "$A/pid" ] && read -r K <"$A/pid"
  case $K in ""|*[!0-9]*) exit 0 ;; esac
fi
pick() {
  T=" "; m=
  while [ "$m" != "$T" ]; do m=$T
    for f in /proc/[0-9]*/stat; do
      { read -r l <"$f"; } 2>/dev/null || continue
      p=${f#/proc/}; p=${p%/stat}
      case $T in *" $p "*) continue ;; esac
      set -- ${l##*) }
      case $1 in Z|X|x) continue ;; esac
      if [ $K = all ]; then
        case $X in *" $p "*) continue ;; esac
      elif [ "$4" != $K ] && [ "$3" != $K ] && [ $p != $K ]; then
        case "$O$T" in *" $2 "*|*" $p "*) ;; *) continue ;; esac
      fi
      T="$T$p "
    done
  done
  O="$O$T"
}
over() {
  U=; for p in $S; do case $T in *" $p "*) U="$U $p" ;; esac; done
  if [ $K = all ]; then [ -z "$U" ]; else [ "$T" = " " ]; fi
}"""
)

# $1: a path: its tree as a tar archive on stdout (its parent is the archive's root).
ARCHIVE_SCRIPT = """[ -e "$1" ] || [ -L "$1" ] || { echo "there is no $1" >&2; exit 2; }
cd "$(dirname "$1")" && exec tar -cf - "$(basename "$1")"
"""


def error_text(err: BaseException) -> str:
    """What a Modal error says, on one bounded string (never a token: Modal's errors hold none)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:_ERROR_TEXT_MAX]


# --- The sandbox ------------------------------------------------------------------------------


class ModalSandbox(Sandbox):
    """One trial's Modal sandbox, driven through the SDK's execs and filesystem.

    `kill_grace_sec` is how long a killed command gets between TERM and KILL;
    `response_timeout_sec` bounds how long a killed command (or every process, for `kill_all`)
    may take to end beyond that grace; `transfer_timeout_sec` bounds a file copy.
    `private_dir` and `logs_dir` are where they are in the sandbox (`PRIVATE_DIR`, `LOGS_DIR`).
    """

    def __init__(
        self,
        sdk: Any,
        sandbox: Any,
        name: str,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        transfer_timeout_sec: float = TRANSFER_TIMEOUT_SEC,
        private_dir: str = PRIVATE_DIR,
        logs_dir: str = LOGS_DIR,
    ) -> None:
        self.sdk = sdk
        self.sandbox = sandbox
        self.name = name
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self.private_dir = private_dir
        self.logs_dir = logs_dir
        self._stopped = False

    @property
    def sandbox_id(self) -> str:
        return str(self.sandbox.object_id)

    def describe(self) -> str:
        return (
            f"Modal sandbox {self.name} ({self.sandbox_id}) of the App {APP_NAME}; open a shell "
            f"in it with `modal shell {self.sandbox_id}`"
        )

    async def reported_cost(self) -> float | None:
        """Modal's estimate of the sandbox's cost in USD so far (its statistics, which lag by
        minutes); None when it has none or cannot say."""
        try:
            stats = await self.sandbox._experimental_stats.aio()
        except (self.sdk.exception.Error, AttributeError, NotImplementedError) as err:
            log.debug("no cost of %s: %s", self.sandbox_id, err)
            return None
        return None if stats.cost is None else float(stats.cost)

    # -- readiness -----------------------------------------------------------------------------

    async def wait_ready(self, timeout_sec: float) -> None:
        """Ready once an exec runs: it makes the logs directories (open to every user, as a
        trial Pod's emptyDir is) and `private_dir` (open to every user, sticky, as /tmp is)."""
        logs = shlex.quote(self.logs_dir)
        private = shlex.quote(self.private_dir)
        skeleton = (
            f"mkdir -p {logs}/agent {logs}/verifier {private} && "
            f"chmod 777 {logs} {logs}/agent {logs}/verifier && chmod 1777 {private}"
        )
        deadline = time.monotonic() + timeout_sec
        while True:
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                    code, _, err = await self._exec_short(["/bin/sh", "-c", skeleton])
            except TimeoutError:
                reason = "no answer"
            except EnvironmentFailure as failure:
                if await self._finished():
                    raise EnvironmentNotReady(
                        f"{self.describe()} is not running: {failure}"
                    ) from None
                reason = str(failure)
            else:
                if code == 0:
                    return
                raise EnvironmentNotReady(
                    f"{self.describe()} could not make {self.logs_dir} and {self.private_dir}: "
                    f"{err.decode(errors='replace').strip()}"
                )
            if time.monotonic() >= deadline:
                raise EnvironmentNotReady(
                    f"{self.describe()} could not run a command within {timeout_sec:g}s: {reason}"
                )
            await asyncio.sleep(min(_READY_POLL_SEC, max(deadline - time.monotonic(), 0)))

    async def _finished(self) -> bool:
        try:
            return await self.sandbox.poll.aio() is not None
        except self.sdk.exception.Error:
            return False

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
        encoded_env = check_run(command, env, user, cwd)
        self._check_not_stopped()
        run_dir = f"{self.private_dir}/{secrets.token_hex(8)}"
        argv = run_argv(command, run_dir, user=user, cwd=cwd)
        started = time.monotonic()
        process = await self._exec(
            argv,
            env={"_RS_ENV": encoded_env} if encoded_env else None,
            limit_sec=math.ceil(timeout_sec + self.kill_grace_sec + self.response_timeout_sec)
            + EXEC_MARGIN_SEC,
        )
        outcome = asyncio.ensure_future(self._outcome(process))
        try:
            done, _ = await asyncio.wait({outcome}, timeout=max(timeout_sec, 0))
            timed_out = not done
            if timed_out:
                await self._kill_run(run_dir)
                done, _ = await asyncio.wait({outcome}, timeout=self.response_timeout_sec)
                if not done:
                    log.warning("the killed command of %s never reported its end", run_dir)
                    outcome.cancel()
                    return ExecResult(None, b"", b"", True, time.monotonic() - started)
            code, stdout, stderr = outcome.result()
        except asyncio.CancelledError:
            # The phase was cancelled: the command must not outlive it.
            outcome.cancel()
            await asyncio.shield(self._kill_quietly(run_dir))
            raise
        if code == -1:  # Modal's own deadline for the exec passed (its backstop)
            timed_out = True
        duration = time.monotonic() - started
        return ExecResult(None if timed_out else code, stdout, stderr, timed_out, duration)

    async def _kill_run(self, run_dir: str) -> None:
        """End the run of `run_dir` (its whole session)."""
        grace_ms = str(int(self.kill_grace_sec * 1000))
        try:
            async with asyncio.timeout(self.kill_grace_sec + self.response_timeout_sec):
                _, out, _ = await self._exec_short(
                    ["/bin/sh", "-c", KILL_SCRIPT, "sh", run_dir, grace_ms]
                )
        except TimeoutError:
            log.warning("killing the command of %s did not finish", run_dir)
            return
        if out.strip():
            log.warning("processes of a timed-out command survived SIGKILL: %s", out.decode())

    async def _kill_quietly(self, run_dir: str) -> None:
        try:
            await self._kill_run(run_dir)
        except EnvironmentFailure as err:
            log.warning("could not kill a cancelled command: %s", err)

    async def kill_all(self) -> None:
        self._check_not_stopped()
        grace_ms = str(int(self.kill_grace_sec * 1000))
        try:
            async with asyncio.timeout(self.kill_grace_sec + self.response_timeout_sec):
                _, out, _ = await self._exec_short(
                    ["/bin/sh", "-c", KILL_SCRIPT, "sh", "all", grace_ms]
                )
        except TimeoutError:
            raise EnvironmentFailure(
                f"killing every process in {self.describe()} did not finish"
            ) from None
        check_survivors(out)

    async def stop(self, exit_code: int = 0) -> None:
        """End the sandbox (Modal keeps no stopped sandbox: its files go with it)."""
        if not 0 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 0..255, got {exit_code}")
        if self._stopped:
            return
        self._stopped = True
        await self._terminate("stop")

    async def terminate(self) -> None:
        self._stopped = True
        await self._terminate("terminate")

    async def _terminate(self, verb: str) -> None:
        errors = self.sdk.exception
        try:
            await self.sandbox.terminate.aio()
        except errors.NotFoundError:
            return
        except errors.Error as err:
            raise EnvironmentFailure(
                f"could not {verb} {self.describe()}: {error_text(err)}"
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
        self._check_not_stopped()
        what = f"copying {local_path} to {container_path} in the environment"
        directory, file_name = await placement(local_path, container_path)
        archive = f"{self.private_dir}/{secrets.token_hex(8)}.tar"
        with tempfile.NamedTemporaryFile(suffix=".tar") as packed:
            await asyncio.to_thread(pack, local_path, file_name, None, packed)
            await self._copy_in(Path(packed.name), archive, what)
        script = put_script(archive, str(directory), container_path, owner=owner, prepare=prepare)
        result = await self.run(script, timeout_sec=self.transfer_timeout_sec)
        check_transfer(result, f"preparing for and {what}" if prepare is not None else what)

    async def _copy_in(self, packed: Path, archive: str, what: str) -> None:
        async with self._transferring(what):
            await self.sandbox.filesystem.copy_from_local.aio(packed, archive)

    async def get_files(self, container_path: str, local_path: Path) -> None:
        check_container_path(container_path)
        self._check_not_stopped()
        source = PurePosixPath(container_path)
        what = f"copying {container_path} out of the environment"
        with tempfile.TemporaryDirectory() as staging:
            archive = Path(staging) / "archive.tar"
            async with self._transferring(what):
                code, stderr = await self._archive_out(str(source), archive)
            if code != 0:
                detail = stderr.decode(errors="replace").strip()
                raise FileTransferError(f"{what} failed (exit code {code}): {detail}")
            try:
                await asyncio.to_thread(unstage_archive, archive, source.name, local_path)
            except (OSError, tarfile.TarError) as err:
                raise FileTransferError(f"{what} failed: {err}") from None

    async def _archive_out(self, source: str, archive: Path) -> tuple[int, bytes]:
        """Stream `source`'s tree as a tar archive into the local file `archive`."""
        process = await self.sandbox.exec.aio(
            "/bin/sh",
            "-c",
            ARCHIVE_SCRIPT,
            "sh",
            source,
            text=False,
            timeout=math.ceil(self.transfer_timeout_sec) + EXEC_MARGIN_SEC,
        )

        async def stream() -> None:
            with archive.open("wb") as out:
                async for chunk in process.stdout:
                    await asyncio.to_thread(out.write, chunk)

        _, stderr, code = await asyncio.gather(
            stream(), process.stderr.read.aio(), process.wait.aio()
        )
        return int(code), bytes(stderr)

    # -- the SDK -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transferring(self, what: str) -> AsyncIterator[None]:
        """A file transfer's SDK calls, within `transfer_timeout_sec`: its timeout and Modal's
        (or the local file's) failures become FileTransferError saying `what` failed."""
        try:
            async with asyncio.timeout(self.transfer_timeout_sec):
                yield
        except TimeoutError:
            raise FileTransferError(
                f"{what} timed out after {self.transfer_timeout_sec:g}s"
            ) from None
        except (self.sdk.exception.Error, OSError) as err:
            raise FileTransferError(f"{what} failed: {error_text(err)}") from None

    async def _exec(
        self, argv: list[str], *, env: dict[str, str] | None = None, limit_sec: int | None = None
    ) -> Any:
        """Start `argv` as an exec (bytes out); Modal's failures become EnvironmentFailure."""
        try:
            return await self.sandbox.exec.aio(*argv, env=env, text=False, timeout=limit_sec)
        except self.sdk.exception.Error as err:
            raise EnvironmentFailure(
                f"Modal failed on {self.describe()}: {error_text(err)}"
            ) from None

    async def _outcome(self, process: Any) -> tuple[int, bytes, bytes]:
        """An exec's exit code, stdout and stderr, once it has ended."""
        try:
            stdout, stderr, code = await asyncio.gather(
                process.stdout.read.aio(), process.stderr.read.aio(), process.wait.aio()
            )
        except self.sdk.exception.Error as err:
            raise EnvironmentFailure(
                f"Modal failed on {self.describe()}: {error_text(err)}"
            ) from None
        return int(code), bytes(stdout), bytes(stderr)

    async def _exec_short(self, argv: list[str]) -> tuple[int, bytes, bytes]:
        """Run a short command of the bridge's own: its exit code, stdout and stderr."""
        process = await self._exec(argv)
        return await self._outcome(process)

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise EnvironmentFailure("the environment was stopped")


def run_argv(command: str, run_dir: str, *, user: str | None, cwd: str | None) -> list[str]:
    """The exec's arguments of a run: `RUN_WRAPPER` with the run's directory, its working
    directory, its user and the command (never its env: that is the exec's environment)."""
    return ["/bin/sh", "-c", RUN_WRAPPER, "sh", run_dir, cwd_argument(cwd), user or "", command]


def put_script(
    archive: str,
    directory: str,
    container_path: str,
    *,
    owner: str | None,
    prepare: str | None,
) -> str:
    """The script that places an uploaded archive: `prepare` first (nothing is extracted when it
    fails), then the archive extracted into `directory` as the files of whoever runs it (`-o`),
    then `container_path` given to `owner`; the archive is removed in every case."""
    place = (
        f"mkdir -p {shlex.quote(directory)} && "
        f"tar -xof {shlex.quote(archive)} -C {shlex.quote(directory)}"
    )
    if owner is not None:
        place += f" && chown -R {shlex.quote(owner)} {shlex.quote(container_path)}"
    body = place if prepare is None else after_prepare(prepare, place)
    return f"trap 'rm -f {shlex.quote(archive)}' EXIT\n{body}"
