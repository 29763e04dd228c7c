"""The host sandbox (`environment.type: local`): a trial's environment in namespaces of this host.

There is no image: the sandbox's root filesystem is a fresh directory (`<base>/root`) holding
read-only bind mounts of the host's /usr, /bin, /sbin, /lib* and /opt (so the host's sh, python
and other tools are the environment's), a copy-on-write /etc (overlayfs over the host's, with its
changes in `<base>/etc-upper`; a plain copy where overlayfs is refused), the host's /dev, a fresh
/proc, and private writable directories of its own: /tmp (so /tmp/rllm), /logs, /tests, /oracle,
/installed-agent, /root, /home, /var, /run and the trial's working directory. /logs and the shim's
control directory (/rollout) are bind mounts of `<base>/logs` and `<base>/control`, which the
runner is given as `Sandbox.paths`. Everything a trial writes elsewhere lands under
`<base>/root`, so two trials never see each other's files. `docker_image` is not used.

The sandbox runs `unshare --mount --pid --fork` (as root) or `unshare --user --map-root-user
--mount --pid --fork` (as any other user, where the kernel allows unprivileged user namespaces):
its first process mounts the root (`MOUNT_SCRIPT`), then becomes the shim, as PID 1 of the new
pid namespace in a session of its own, as a container runtime starts it. The shim's log (its
stderr) goes to `<base>/sandbox.log`. Where namespaces are not available (macOS, kernels that
refuse them, no util-linux), `host_sandbox_unavailable` says so and names `type: docker`; the
host sandbox never falls back to sharing the host's paths.

Not enforced in this version: the trial's cpus and memory (no cgroup is made), and network
policy (the sandbox has the host's network; egress restrictions do not apply).

Users are the host's: a task's `[agent] user` must exist in the host's /etc/passwd (the task's
image and its users are not there). As root, a job's `isolate_agents` works: the runner adds its
user to the sandbox's copy-on-write /etc, never the host's. As another user, the user namespace
maps only that user (as root inside): no other user exists, so `isolate_agents` and `[agent] user`
fail the trial in its setup (`environment_start_failed`: "creating the agent user rollout-agent
failed ...: cannot create /etc/passwd: Permission denied", or "chown: invalid user"), and files
only the host's root may read (/etc/shadow) are unreadable inside. Run as root, or use
`type: docker`, for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rollout.api.wire.shim import CONTROL_DIR, shim_command
from rollout.local.sandbox import Sandbox, SandboxPaths, SandboxStartFailed

log = logging.getLogger(__name__)

DEFAULT_WORKDIR = "/app"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_SEC = 30.0
"""How long the mounts may take before the sandbox counts as failed to start."""
STOP_TIMEOUT_SEC = 30.0
LOG_TAIL_CHARS = 2000

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt")
"""The host's directories bound read-only into the sandbox, where they exist."""
PRIVATE_DIRS = ("tests", "oracle", "installed-agent", "home", "var", "run")
"""Fresh empty directories of the sandbox (and /tmp and /root, which have modes of their own)."""
_MOUNT_POINTS = ("etc", "proc", "dev", "logs", CONTROL_DIR.strip("/"))
_TOOLS = ("unshare", "mount", "setsid")
"""util-linux commands the sandbox needs on the host."""

_STARTED = b"s"

# Runs as PID 1 of the new namespaces: mounts the root (binding the host's directories named in
# $3), then becomes the sandbox's command (the shim) in a session of its own with the root and
# working directory set, once it has said so on its stdin (the write end of a pipe; dash cannot
# name a file descriptor above 9, so no other one would do); the command's stdin is /dev/null.
MOUNT_SCRIPT = r"""
set -e
base=$1 workdir=$2 system_dirs=$3; shift 3
cd "$base/root"
for d in $system_dirs; do
  if [ -d "$d" ] && [ ! -L "$d" ]; then
    mount --bind "/$d" "$d"; mount -o remount,bind,ro "$d"
  fi
done
if ! mount -t overlay overlay \
    -o "lowerdir=/etc,upperdir=$base/etc-upper,workdir=$base/etc-work" etc 2>/dev/null; then
  echo "sandbox: overlayfs refused; /etc is a copy of the host's" >&2
  cp -a /etc/. etc/ || echo "sandbox: some of /etc could not be copied" >&2
  cp -a "$base/etc-upper/." etc/
fi
mount --rbind /dev dev
mount -t proc proc proc
mount --bind "$base/control" rollout
mount --bind "$base/logs" logs
exec setsid unshare --root=. --wd="$workdir" \
  /bin/sh -c 'printf s >&0; exec "$@" </dev/null' sandbox-start "$@"
"""


def host_sandbox_unavailable(path: str | None = None) -> str | None:
    """Why this machine cannot run host sandboxes, or None when it can.

    `path`: where to look for the util-linux tools (default: $PATH). Probes for real: unshare
    with the namespaces `start_host_sandbox` asks for, and a mount in them.
    """
    instead = "use `environment.type: docker` to run the job's trials in containers instead"
    if not sys.platform.startswith("linux"):
        return f"host sandboxes need Linux namespaces, which {sys.platform} lacks: {instead}"
    found = {tool: shutil.which(tool, path=path) for tool in _TOOLS}
    missing = [tool for tool, where in found.items() if where is None]
    unshare = found["unshare"]
    if missing or unshare is None:
        return (
            f"host sandboxes need util-linux's {', '.join(missing)} on PATH "
            f"(Debian: apt-get install util-linux): {instead}"
        )
    try:
        probe = subprocess.run(
            [unshare, *_namespace_options(), "/bin/sh", "-c", "mount -t proc proc /proc"],
            capture_output=True,
            check=False,
            env={"PATH": path or os.environ.get("PATH", PATH)},
            timeout=START_TIMEOUT_SEC,
        )
        refused = probe.stderr.decode(errors="replace").strip() if probe.returncode else None
    except subprocess.TimeoutExpired:
        refused = f"unshare did not finish within {START_TIMEOUT_SEC:g}s"
    if refused is not None:
        who = "root" if os.geteuid() == 0 else "an unprivileged user (user namespaces)"
        return (
            f"this kernel does not let {who} create the host sandbox's namespaces "
            f"({refused}): {instead}"
        )
    return None


def _namespace_options() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [*user, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]


@dataclass(frozen=True)
class HostRoot:
    """The files of one host sandbox under its base directory, made before it starts."""

    base: Path
    workdir: str

    @property
    def root(self) -> Path:
        """The sandbox's root directory; what it writes outside its mounts is here."""
        return self.base / "root"

    @property
    def control_dir(self) -> Path:
        return self.base / "control"

    @property
    def logs_dir(self) -> Path:
        return self.base / "logs"

    @property
    def etc_upper(self) -> Path:
        """The sandbox's changes to /etc (files put here before the start are in its /etc)."""
        return self.base / "etc-upper"

    @property
    def log_path(self) -> Path:
        return self.base / "sandbox.log"

    @classmethod
    def create(cls, base: Path, workdir: str = DEFAULT_WORKDIR) -> HostRoot:
        """Make the directories under `base` (an empty directory); SandboxStartFailed for a
        working directory the sandbox cannot have."""
        layout = cls(base, _checked_workdir(workdir))
        root = layout.root
        root.mkdir()
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                (root / name).symlink_to(os.readlink(host))
            elif host.is_dir():
                (root / name).mkdir()
        for name in (*_MOUNT_POINTS, *PRIVATE_DIRS):
            (root / name).mkdir()
        for name, mode in (("tmp", 0o1777), ("root", 0o700), ("var/tmp", 0o1777)):
            (root / name).mkdir()
            (root / name).chmod(mode)
        (root / layout.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for directory in (layout.control_dir, layout.logs_dir, layout.etc_upper):
            directory.mkdir()
        (base / "etc-work").mkdir()
        return layout


def _checked_workdir(workdir: str) -> str:
    path = PurePosixPath(workdir)
    if not path.is_absolute() or ".." in path.parts:
        raise SandboxStartFailed(
            f"The working directory {workdir!r} is not an absolute path: set the trial's "
            "workdir (or the task's [environment] workdir) to one, such as /app"
        )
    first = path.parts[1] if len(path.parts) > 1 else ""
    if first in (*SYSTEM_DIRS, *_MOUNT_POINTS):
        raise SandboxStartFailed(
            f"The working directory {workdir} cannot be made in a host sandbox: /{first} there "
            "is the host's (or the sandbox's own); choose one elsewhere, such as /app, or use "
            "`environment.type: docker`"
        )
    return str(path)


class HostSandbox(Sandbox):
    """A running host sandbox; see the module docstring. Made by `start_host_sandbox`."""

    def __init__(self, layout: HostRoot, process: subprocess.Popen[bytes], started_fd: int):
        self.layout = layout
        self.paths = SandboxPaths(control_dir=layout.control_dir, logs_dir=layout.logs_dir)
        self.process = process
        """The unshare process; its exit code is the sandbox's first process's."""
        self.user_namespace = os.geteuid() != 0
        self.pid: int | None = None
        """The host pid of the sandbox's PID 1 (the shim), once it started."""
        self._started_fd: int | None = started_fd
        self._pidfd: int | None = None
        self._closed = False

    def log(self) -> str:
        """What the sandbox printed: the mounts' errors, then the shim's log."""
        try:
            return self.layout.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_started(self, timeout: float = START_TIMEOUT_SEC) -> None:
        """Block until the sandbox's root is mounted and its command started; SandboxStartFailed
        (with the log's tail) when the sandbox ended first or took longer than `timeout`."""
        fd = self._started_fd
        if fd is None:
            return
        try:
            readable, _, _ = select.select([fd], [], [], timeout)
            said = os.read(fd, 1) if readable else None  # b"" when it ended
        finally:
            os.close(fd)
            self._started_fd = None
        if said != _STARTED:
            self.terminate()
            what = f"did not start within {timeout:g}s" if said is None else "ended while starting"
            tail = self.log()[-LOG_TAIL_CHARS:].strip() or "(no output)"
            raise SandboxStartFailed(f"The host sandbox {what}; its log ends:\n{tail}")
        self._open_pid_1()

    def _open_pid_1(self) -> None:
        """Find the sandbox's PID 1 (unshare's child) and hold a pidfd of it, so that a pid
        reused after the sandbox ended is never signalled. Nothing when it is gone already."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            pid = int(children.read_text().split()[0])
            self._pidfd = os.pidfd_open(pid)
        except (OSError, IndexError):
            return
        self.pid = pid

    def describe(self) -> str:
        user = " --user --preserve-credentials" if self.user_namespace else ""
        return (
            f"host sandbox in {self.layout.base} (PID 1 is host pid {self.pid}); enter it with: "
            f"nsenter --target {self.pid}{user} --mount --pid --root --wd /bin/sh"
        )

    async def close(self, *, keep: bool = False) -> None:
        if keep:
            if self.process.poll() is None:
                log.info("keeping the %s", self.describe())
            return
        leaked = await asyncio.to_thread(self.terminate)
        if leaked:
            log.warning(
                "the host sandbox in %s left mounts in this machine's mount namespace: %s "
                "(lazily unmounted)",
                self.layout.base,
                ", ".join(leaked),
            )

    def terminate(self) -> list[str]:
        """Kill every process of the sandbox and wait for them; unmount (lazily) whatever mount
        under the base directory is visible here, and return their mount points (none, unless
        something went wrong). Safe to call more than once."""
        if self._closed:
            return []
        self._closed = True
        if self._started_fd is not None:
            os.close(self._started_fd)
            self._started_fd = None
        if self.process.poll() is None:
            if self._pidfd is None:
                self._open_pid_1()
            if self._pidfd is not None:
                # PID 1's end ends the pid namespace: the kernel kills every process in it and
                # waits for them before unshare, its parent, gets PID 1's exit status. PID 1
                # may have exited already (the runner told the shim to): nothing left to kill.
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                self.process.kill()  # no PID 1 yet: nothing else to kill
        self.process.wait(STOP_TIMEOUT_SEC)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return _unmount_under(self.layout.base)


def _unmount_under(base: Path) -> list[str]:
    prefix = f"{base}/"
    leaked = [
        mount_point
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if (mount_point := _unescape(line.split()[4])).startswith(prefix)
    ]
    for mount_point in reversed(leaked):
        subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
    return leaked


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes there."""
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, char)
    return field


def spawn_host_sandbox(
    layout: HostRoot,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> HostSandbox:
    """Start the sandbox laid out in `layout` with `command` (default: the shim) as its PID 1
    and `env` (default: PATH and HOME only, nothing of this process's own); returns at once,
    before the mounts are done (`HostSandbox.wait_started`)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SandboxStartFailed(host_sandbox_unavailable() or "util-linux unshare is missing")
    read_fd, write_fd = os.pipe()
    argv = [
        unshare, *_namespace_options(),
        "/bin/sh", "-c", MOUNT_SCRIPT, "sandbox-setup",
        str(layout.base), layout.workdir, " ".join(SYSTEM_DIRS),
        *(command or shim_command(CONTROL_DIR)),
    ]  # fmt: skip
    try:
        with layout.log_path.open("ab") as log_file:
            process = subprocess.Popen(
                argv,
                stdin=write_fd,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=dict(env or {"PATH": PATH, "HOME": "/root"}),
                start_new_session=True,
            )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return HostSandbox(layout, process, read_fd)


async def start_host_sandbox(base: Path, *, workdir: str | None) -> HostSandbox:
    """Start a trial's host sandbox in `base` (an empty directory the caller owns and removes
    after `close`, unless the sandbox is kept), the shim as its PID 1, in `workdir` (the trial's
    working directory; default /app). Returns once its root is mounted (the runner waits for the
    shim itself); SandboxStartFailed when the sandbox cannot start."""
    layout = await asyncio.to_thread(HostRoot.create, base, workdir or DEFAULT_WORKDIR)
    sandbox = spawn_host_sandbox(layout)
    await asyncio.to_thread(sandbox.wait_started)
    return sandbox
