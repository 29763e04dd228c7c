"""A trial's Daytona sandbox as the runner's `Environment` (`daytona.DaytonaProvider` starts it).

Commands go through the sandbox's toolbox (`process.exec`), which offers neither a user, nor a
way to kill a command's whole tree, nor separate stdout and stderr. So a command runs as the
Docker provider's do: a wrapper (this module's `RUN_WRAPPER`) started in a session of its own
keeps, in a run directory under `PRIVATE_DIR`, the command's pid, its output and, last, its exit
status; the bridge waits for that status with short in-sandbox polls, ends the session itself at
the timeout (`KILL_SCRIPT`, a `scripts.run_kill_script`), and downloads the output. A user is
switched to inside the sandbox with su, runuser or setpriv, as a trial Pod's shim does. Env
values travel in the exec request's own `env` (the toolbox sets them on the process), never on a
command line. Files travel as tar archives (`archives`) uploaded and downloaded with `fs`, so
modes and links survive.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import secrets
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

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
    parse_ids,
    run_kill_script,
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

T = TypeVar("T")

LONG_POLL_SEC = 10.0
"""How long one request waits in the sandbox for a command's exit status."""

# $1: the run's directory, $2: the working directory (empty: the sandbox's), $3: the user
# (empty: the toolbox's), $4: the command, $5: the names of the env the exec request carries.
# Unlike `scripts.RUN_WRAPPER` it switches to the user itself (the toolbox has no user option)
# and leaves making the run's directory to LAUNCH_SCRIPT (whose request reports a failure).
# The command runs in a session of its own (setsid, where there is one) that KILL_SCRIPT ends;
# rc, written last by a rename, holds its exit status: 128+N when signal N killed it. su and
# runuser reset HOME, SHELL, USER, LOGNAME and maybe PATH: a value the env gives for one of
# them crosses as _RS_<name> and is restored in the command's shell.
RUN_WRAPPER = r"""r=$1 u=$3
fin() { echo $1 >"$r/rc.t" && mv -f "$r/rc.t" "$r/rc"; exit $1; }
S=; command -v setsid >/dev/null 2>&1 && S=setsid
U=
if [ -n "$u" ]; then
  for t in su runuser setpriv; do command -v $t >/dev/null 2>&1 && { U=$t; break; }; done
  for v in $5; do
    case " HOME SHELL USER LOGNAME PATH " in *" $v "*) eval "_RS_$v=\$$v; export _RS_$v" ;; esac
  done
fi
I='for v in HOME SHELL USER LOGNAME PATH; do
eval "[ -z \"\${_RS_$v+x}\" ] || { $v=\$_RS_$v; export $v; }; unset _RS_$v"; done
exec /bin/sh -c "$1"'
(
  if [ -n "$2" ]; then cd "$2" || exit 126; fi
  case $u:$U in
    :*) exec $S /bin/sh -c "$4" ;;
    *:su) exec $S su -s /bin/sh "$u" -c "$I" sh "$4" ;;
    *:runuser) exec $S runuser -u "$u" -- /bin/sh -c "$I" sh "$4" ;;
    *:setpriv) exec $S setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups \
      /bin/sh -c "$I" sh "$4" ;;
  esac
  echo "rollout-bridge: no su, runuser or setpriv to run as $u" >&2; exit 126
) </dev/null >"$r/out" 2>"$r/err" &
k=$!; echo $k >"$r/pid"
wait $k; fin $?"""

# The exec request's own script: make the run's directory and start RUN_WRAPPER detached from
# the request (a session of its own, no output), so the request returns at once.
LAUNCH_SCRIPT = """mkdir -m 700 "$1" || exit 125
S=; command -v setsid >/dev/null 2>&1 && S=setsid
$S /bin/sh -c "$W" sh "$@" </dev/null >/dev/null 2>&1 &"""

# $1: a run's directory, $2: the most ms to wait for its rc. Prints rc once it is there.
POLL_SCRIPT = """[ -f "$1/rc" ] && { cat "$1/rc"; exit 0; }
if sleep 0.001 2>/dev/null; then P=0.05 D=50; else P=1 D=1000; fi
n=$(($2 / D))
while [ ! -f "$1/rc" ] && [ $n -gt 0 ]; do sleep $P; n=$((n - 1)); done
[ -f "$1/rc" ] && cat "$1/rc"
exit 0"""

# $1: `all` or a run's directory, $2: the grace in ms, as `scripts.KILL_SCRIPT`'s. Of `all`, it
# spares PID 1, this script and its ancestors (the toolbox, which runs in the sandbox and
# carries this request) and this script's own children.
KILL_SCRIPT = run_kill_script(
    """case $X in *" $p "*) continue ;; esac
[ "$2" = $$ ] && continue""",
    setup="""A=$1 G=$2 X=" 1 $$ " p=$$
while [ "${p:-0}" -gt 1 ] && { read -r l </proc/$p/stat; } 2>/dev/null; do
  set -- ${l##*) }; p=$2; X="$X$p "
done
set -- "$A" "$G"
""",
)


def shell_line(script: str, *args: str, **variables: str) -> str:
    """The exec request's command for `script` with positional `args` and shell `variables`.

    The toolbox hands a command to a shell of its choosing (zsh, bash or sh; older toolboxes
    split it on spaces and quotes themselves), so the script crosses as base64, which every one
    of them passes through unchanged, to a /bin/sh of the image. What it carries is the
    bridge's scripts and the trial's commands, never an env value."""
    lines = [f"{name}={shlex.quote(value)}" for name, value in variables.items()]
    if args:
        lines.append("set -- " + " ".join(shlex.quote(arg) for arg in args))
    lines.append(script)
    encoded = base64.b64encode("\n".join(lines).encode()).decode()
    return f'/bin/sh -c "echo {encoded} | base64 -d | /bin/sh"'


def ready_script(private_dir: str, logs_dir: str = LOGS_DIR) -> str:
    """/logs with the seed's directories, open to every user as a trial Pod's emptyDir is, the
    bridge's directory, open to every user with the sticky bit as /tmp is, and the default
    user's ids (what files put in the sandbox belong to)."""
    logs = shlex.quote(logs_dir)
    agent, verifier = (shlex.quote(f"{logs_dir}/{name}") for name in ("agent", "verifier"))
    private = shlex.quote(private_dir)
    return (
        f"mkdir -p {agent} {verifier} {private} && chmod 777 {logs} {agent} {verifier} && "
        f"chmod 1777 {private} && id -u && id -g"
    )


class DaytonaSandbox(Sandbox):
    """One trial's Daytona sandbox, driven through the SDK's `AsyncSandbox`.

    `kill_grace_sec` is how long a killed command gets between TERM and KILL;
    `response_timeout_sec` bounds each of the bridge's own requests; `transfer_timeout_sec`
    bounds a file copy; `private_dir` is where run directories go (`PRIVATE_DIR`)."""

    def __init__(
        self,
        sandbox: Any,
        sdk: Any,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        transfer_timeout_sec: float = TRANSFER_TIMEOUT_SEC,
        long_poll_sec: float = LONG_POLL_SEC,
        private_dir: str = PRIVATE_DIR,
        logs_dir: str = LOGS_DIR,
    ) -> None:
        self.sandbox = sandbox
        self.sdk = sdk
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self.long_poll_sec = long_poll_sec
        self.private_dir = private_dir
        self.logs_dir = logs_dir
        self._owner: tuple[int, int] = (0, 0)
        """The default user's uid and gid: what files put in the sandbox belong to."""
        self._stopped = False

    @property
    def sandbox_id(self) -> str:
        return str(self.sandbox.id)

    def describe(self) -> str:
        return (
            f"Daytona sandbox {self.sandbox.name} ({self.sandbox.id}); open it from the Daytona "
            f"dashboard, or with the SDK: daytona.get({str(self.sandbox.id)!r})"
        )

    async def reported_cost(self) -> float | None:
        """Daytona's SDK reports no cost per sandbox."""
        return None

    # -- readiness ------------------------------------------------------------------------------

    async def wait_ready(self, timeout_sec: float) -> None:
        deadline = time.monotonic() + timeout_sec
        delay = 0.05
        script = shell_line(ready_script(self.private_dir, self.logs_dir))
        while True:
            try:
                response = await self.sandbox.process.exec(script, timeout=self._seconds(5))
            except self.sdk.DaytonaError as err:
                reason = str(err)
            else:
                output = response.result or ""
                if response.exit_code != 0:
                    raise EnvironmentNotReady(
                        f"{self.describe()} cannot run the bridge's commands (exit code "
                        f"{response.exit_code}): {output.strip()}"
                    )
                # The toolbox gives stdout and stderr as one: the ids are its last two words.
                self._owner = parse_ids(" ".join(output.split()[-2:]).encode()) or self._owner
                return
            now = time.monotonic()
            if now >= deadline:
                raise EnvironmentNotReady(
                    f"{self.describe()} could not run a command within {timeout_sec:g}s: {reason}"
                )
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 1.0)

    # -- commands -------------------------------------------------------------------------------

    async def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] = NO_ENV,
        user: str | None = None,
        cwd: str | None = None,
        timeout_sec: float,
    ) -> ExecResult:
        check_run(command, env, user, cwd)  # env: checked; it travels as the request's own
        self._check_not_stopped()
        run_dir = f"{self.private_dir}/{secrets.token_hex(8)}"
        started = time.monotonic()
        launch = shell_line(
            LAUNCH_SCRIPT,
            run_dir,
            cwd_argument(cwd),
            user or "",
            command,
            " ".join(env),
            W=RUN_WRAPPER,
        )
        try:
            launched = await self._call(
                self.sandbox.process.exec,
                launch,
                env=dict(env) or None,
                timeout=self._seconds(self.response_timeout_sec),
            )
            if launched.exit_code != 0:
                raise EnvironmentFailure(
                    f"{self.describe()} could not start a command (exit code "
                    f"{launched.exit_code}): {(launched.result or '').strip()}"
                )
            exit_code = await self._wait_rc(run_dir, started + timeout_sec)
            if exit_code is None:
                await self._kill_run(run_dir)
        except asyncio.CancelledError:
            # The phase was cancelled: the command must not outlive it.
            await asyncio.shield(self._kill_quietly(run_dir))
            raise
        timed_out = exit_code is None
        stdout, stderr = await self._output(run_dir, timed_out=timed_out)
        return ExecResult(exit_code, stdout, stderr, timed_out, time.monotonic() - started)

    async def _wait_rc(self, run_dir: str, deadline: float) -> int | None:
        """The exit status in `run_dir`/rc once the wrapper has written it; None at `deadline`.
        Each request waits in the sandbox (`POLL_SCRIPT`) for up to `long_poll_sec`."""
        while True:
            wait_ms = int(max(0.0, min(self.long_poll_sec, deadline - time.monotonic())) * 1000)
            response = await self._call(
                self.sandbox.process.exec,
                shell_line(POLL_SCRIPT, run_dir, str(wait_ms)),
                timeout=self._seconds(wait_ms / 1000 + self.response_timeout_sec),
            )
            text = (response.result or "").strip()
            if text:
                return int(text)
            if time.monotonic() >= deadline:
                return None

    async def _kill_run(self, run_dir: str) -> None:
        """End the run of `run_dir` (its whole session) and wait for its wrapper to finish."""
        out = await self._kill(run_dir)
        if out:
            log.warning("processes of a timed-out command survived SIGKILL: %s", out)
        # The session is over, so the command's first process has ended and rc follows, unless
        # something killed the wrapper too (a root command's `kill -9 -1`).
        if await self._wait_rc(run_dir, time.monotonic() + self.response_timeout_sec) is None:
            log.warning("the killed command of %s never reported its exit status", run_dir)

    async def _kill_quietly(self, run_dir: str) -> None:
        try:
            await self._kill_run(run_dir)
        except EnvironmentFailure as err:
            log.warning("could not kill a cancelled command: %s", err)

    async def _kill(self, target: str) -> str:
        """`KILL_SCRIPT` on `target` (`all` or a run's directory): the survivors it printed."""
        response = await self._call(
            self.sandbox.process.exec,
            shell_line(KILL_SCRIPT, target, str(int(self.kill_grace_sec * 1000))),
            timeout=self._seconds(self.kill_grace_sec + self.response_timeout_sec),
        )
        return (response.result or "").strip()

    async def _output(self, run_dir: str, *, timed_out: bool) -> tuple[bytes, bytes]:
        """The run's stdout and stderr, downloaded; then its directory is removed. A killed run
        may have been killed before it opened them: nothing then."""
        outputs = []
        for name in ("out", "err"):
            try:
                data = await self.sandbox.fs.download_file(
                    f"{run_dir}/{name}", self._seconds(self.transfer_timeout_sec)
                )
            except self.sdk.DaytonaError as err:
                if not timed_out:
                    raise EnvironmentFailure(
                        f"the output of a command in {self.describe()} is lost: {err}"
                    ) from None
                data = b""
            outputs.append(bytes(data or b""))
        await self._sh(f"rm -rf {shlex.quote(run_dir)}")
        return outputs[0], outputs[1]

    async def kill_all(self) -> None:
        self._check_not_stopped()
        check_survivors((await self._kill("all")).encode())

    async def stop(self, exit_code: int = 0) -> None:
        if not 0 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 0..255, got {exit_code}")
        if self._stopped:
            return
        self._stopped = True
        try:
            await self.sandbox.stop(timeout=self.response_timeout_sec)
        except self.sdk.DaytonaNotFoundError:
            return  # an ephemeral sandbox is deleted as it stops
        except self.sdk.DaytonaError as err:
            raise EnvironmentFailure(f"could not stop {self.describe()}: {err}") from None

    async def terminate(self) -> None:
        self._stopped = True
        try:
            await self.sandbox.delete(timeout=self.response_timeout_sec)
        except self.sdk.DaytonaNotFoundError:
            return
        except self.sdk.DaytonaError as err:
            raise EnvironmentFailure(f"could not delete {self.describe()}: {err}") from None

    # -- files ----------------------------------------------------------------------------------

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
        unpack_dir, file_name = await placement(local_path, container_path)
        directory = shlex.quote(str(unpack_dir))
        archive = f"{self.private_dir}/{secrets.token_hex(8)}.tar"
        with tempfile.NamedTemporaryFile(suffix=".tar") as packed:
            await asyncio.to_thread(pack, local_path, file_name, self._owner, packed)
            try:
                await self.sandbox.fs.upload_file(
                    packed.name, archive, self._seconds(self.transfer_timeout_sec)
                )
            except self.sdk.DaytonaError as err:
                raise FileTransferError(f"{what} failed: {err}") from None
        extract = f"mkdir -p {directory} && tar -xf {shlex.quote(archive)} -C {directory}"
        step = extract if prepare is None else after_prepare(prepare, extract)
        result = await self.run(
            f"(\n{step}\n)\nr=$?; rm -f {shlex.quote(archive)}; exit $r",
            timeout_sec=self.transfer_timeout_sec,
        )
        check_transfer(result, f"preparing for and {what}" if prepare is not None else what)
        if owner is not None:
            chown = f"chown -R {shlex.quote(owner)} {shlex.quote(container_path)}"
            result = await self.run(chown, timeout_sec=self.transfer_timeout_sec)
            check_transfer(result, f"giving {container_path} to {owner}")

    async def get_files(self, container_path: str, local_path: Path) -> None:
        check_container_path(container_path)
        self._check_not_stopped()
        source = PurePosixPath(container_path)
        what = f"copying {container_path} out of the environment"
        archive = f"{self.private_dir}/{secrets.token_hex(8)}.tar"
        path, parent, name = (shlex.quote(str(p)) for p in (source, source.parent, source.name))
        exit_code, output = await self._sh(
            f"[ -e {path} ] || [ -L {path} ] || exit 3\n"
            f"tar -cf {shlex.quote(archive)} -C {parent} {name} 2>&1",
            timeout_sec=self.transfer_timeout_sec,
        )
        try:
            if exit_code == 3:
                raise FileTransferError(f"{what} failed: there is no {container_path}")
            if exit_code != 0:
                raise FileTransferError(f"{what} failed (exit code {exit_code}): {output.strip()}")
            with tempfile.TemporaryDirectory() as staging:
                packed = Path(staging) / "files.tar"
                try:
                    await self.sandbox.fs.download_file(
                        archive, str(packed), self._seconds(self.transfer_timeout_sec)
                    )
                except self.sdk.DaytonaError as err:
                    raise FileTransferError(f"{what} failed: {err}") from None
                await asyncio.to_thread(unstage_archive, packed, source.name, local_path)
        finally:
            with contextlib.suppress(EnvironmentFailure):
                await self._sh(f"rm -f {shlex.quote(archive)}")

    # -- the toolbox ----------------------------------------------------------------------------

    async def _sh(self, script: str, *, timeout_sec: float | None = None) -> tuple[int, str]:
        """A short script of the bridge's own: its exit code and its output."""
        response = await self._call(
            self.sandbox.process.exec,
            shell_line(script),
            timeout=self._seconds(timeout_sec or self.response_timeout_sec),
        )
        code = response.exit_code
        return (-1 if code is None else int(code)), response.result or ""

    async def _call(self, function: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """An SDK call; Daytona's failures become EnvironmentFailure."""
        try:
            return await function(*args, **kwargs)
        except self.sdk.DaytonaError as err:
            raise EnvironmentFailure(f"Daytona failed on {self.describe()}: {err}") from None

    @staticmethod
    def _seconds(seconds: float) -> int:
        """A timeout as the SDK takes it: whole seconds, at least 1."""
        return max(1, math.ceil(seconds))

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise EnvironmentFailure("the environment was stopped")
