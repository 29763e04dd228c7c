"""A fake container for tests of the shim: real shells and processes, no container runtime.

`fake_container(tmp_path)` plays the trial Pod's `environment` container on this machine (as root,
without Docker): `unshare --mount --pid --fork` gives it its own mount and pid namespaces, and
`unshare --root` puts it in a temporary root filesystem made of read-only bind mounts of the
host's /usr (and /bin, /lib, ... where they are directories rather than symlinks into /usr), a
writable copy-on-write /etc (overlayfs over the host's; a plain copy where overlayfs is missing)
with a user `agent` (uid 1000), the host's /dev, a fresh /proc, and fresh writable /tmp, /app (the
working directory), /root and /home/agent. The control directory and the logs directory are host
directories bind-mounted at /rollout and /logs, so the test process (and the `ShimEnvironment` in
it) reaches them at their host paths, as the runner container would. Whatever the container writes
outside those mounts (/app, /tmp, /tests, ...) is visible on the host under `.root`.

The shim runs as the fake container's PID 1, in a session of its own, as a container runtime
starts it. `shell` picks the userland:

- "/bin/sh": the host's /bin/sh (dash on Debian) runs the shim and the commands.
- "busybox": busybox stands in for /bin/sh and its applets come first on PATH (setsid, sleep, cp,
  ...), as on Alpine. Debian's busybox has no `su`, so util-linux su is used for users.
- "/bin/bash": `bash --posix` runs the shim; commands still run with /bin/sh.

`hide` names tools (say `setsid`, `su`) that the container must lack, to exercise the shim's
fallbacks: /dev/null is mounted over them, which no shell takes for a command.

Leaving the context kills the whole pid namespace (PID 1 dies, so the kernel kills the rest) and
checks that no mount leaked into the host's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from rollout.api.wire.shim import CONTROL_DIR, SHIM_NAME, SHIM_TEXT, shim_command

SHELLS = ("/bin/sh", "busybox", "/bin/bash")
AGENT_USER = "agent"
AGENT_UID = 1000
LOGS_DIR = "/logs"
WORKDIR = "/app"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUSYBOX_APPLETS = "/bb"

# Runs as PID 1 of the new namespaces: mounts the root, then becomes the container's command.
# $1 the container's base dir (root/, control/, logs/, etc-upper/, etc-work/ in it), $2 busybox
# or '', $3 tools to hide, $4... the command.
_SETUP = r"""
set -e
base=$1 busybox=$2 hide=$3; shift 3
cd "$base/root"
for d in usr bin sbin lib lib32 lib64 libx32; do
  if [ -d "$d" ] && [ ! -L "$d" ]; then
    mount --bind "/$d" "$d"; mount -o remount,bind,ro "$d"
  fi
done
# /etc: the host's, copy-on-write, with the changed files (the agent user) from etc-upper.
if ! mount -t overlay overlay \
    -o "lowerdir=/etc,upperdir=$base/etc-upper,workdir=$base/etc-work" etc 2>/dev/null; then
  cp -a /etc/. etc/; cp -a "$base/etc-upper/." etc/
fi
mount --rbind /dev dev
mount -t proc proc proc
mount --bind "$base/control" rollout
mount --bind "$base/logs" logs
if [ -n "$busybox" ]; then mount --bind "$busybox" "./$(readlink -f /bin/sh)"; fi
for tool in $hide; do
  for d in usr/local/bin usr/local/sbin usr/bin usr/sbin; do
    if [ -f "$d/$tool" ] && [ ! -L "$d/$tool" ]; then mount --bind /dev/null "$d/$tool"; fi
  done
done
exec setsid unshare --root=. --wd=/app "$@"
"""


@dataclass(frozen=True)
class ContainerProcess:
    """A process in the fake container, seen from the host."""

    pid: int
    """The pid inside the container."""
    host_pid: int
    state: str
    """The one-letter state from /proc (R, S, D, Z, ...)."""
    argv: list[str]


@functools.cache
def unavailable_reason() -> str | None:
    """Why a fake container cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "a fake container needs root (mount and pid namespaces)"
    if shutil.which("unshare") is None:
        return "a fake container needs util-linux unshare"
    probe = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return f"unshare cannot create namespaces here: {probe.stderr.decode().strip()}"
    return None


def busybox_missing_reason() -> str | None:
    if shutil.which("busybox") is None:
        return "busybox is not on PATH (Debian: apt-get install busybox; CI installs it)"
    return None


def requires_fake_container() -> pytest.MarkDecorator:
    """Skip marker for tests that need a fake container."""
    reason = unavailable_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def shell_params() -> list[object]:
    """The shells every shim test runs under: the host's /bin/sh (dash) and busybox sh."""
    reason = busybox_missing_reason()
    return [
        pytest.param("/bin/sh", id="sh"),
        pytest.param(
            "busybox",
            id="busybox",
            marks=pytest.mark.skipif(reason is not None, reason=reason or ""),
        ),
    ]


async def eventually(condition: Callable[[], bool], what: str, within: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test with `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within}s: {what}")
        await asyncio.sleep(0.02)


class FakeContainer:
    """A running fake container; see the module docstring."""

    def __init__(
        self,
        base: Path,
        shell: str,
        command: Sequence[str] | None,
        hide: Sequence[str],
        unterminated_etc: bool = False,
    ) -> None:
        if shell not in SHELLS:
            raise ValueError(f"shell must be one of {SHELLS}, got {shell!r}")
        self.shell = shell
        self.root = base / "root"
        self.control_dir = base / "control"
        self.logs_dir = base / "logs"
        self.log_path = base / "container.log"
        self.control_dir.mkdir()
        self.logs_dir.mkdir()
        busybox = shutil.which("busybox") if shell == "busybox" else None
        if shell == "busybox" and busybox is None:
            raise RuntimeError(busybox_missing_reason())
        _build_root(base, busybox, hide, unterminated_etc)
        if command is None:
            command = shim_command(CONTROL_DIR)
            if shell == "/bin/bash":
                command = ["/bin/bash", "--posix", "-c", SHIM_TEXT, SHIM_NAME, CONTROL_DIR]
        path = f"{BUSYBOX_APPLETS}:{PATH}" if busybox else PATH
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    "unshare", "--mount", "--pid", "--fork", "--kill-child",
                    "--propagation", "private",
                    "/bin/sh", "-c", _SETUP, "setup", str(base), busybox or "", " ".join(hide),
                    *command,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={"PATH": path, "HOME": "/root"},
                start_new_session=True,
            )  # fmt: skip

    def log(self) -> str:
        """What the container printed (the shim logs to stderr)."""
        return self.log_path.read_text(errors="replace")

    def init_host_pid(self) -> int | None:
        """The host pid of the container's PID 1, or None when it is not running."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            pids = children.read_text().split()
        except OSError:
            return None
        return int(pids[0]) if pids else None

    def processes(self) -> list[ContainerProcess]:
        """Every process in the container's pid namespace, zombies included."""
        init = self.init_host_pid()
        if init is None:
            return []
        try:
            namespace = os.readlink(f"/proc/{init}/ns/pid")
        except OSError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(entry / "ns" / "pid") != namespace:
                    continue
                status = dict(
                    line.split(":\t", 1) for line in (entry / "status").read_text().splitlines()
                )
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                continue  # it ended while we looked
            found.append(
                ContainerProcess(
                    pid=int(status["NSpid"].split()[-1]),
                    host_pid=int(entry.name),
                    state=status["State"].split()[0],
                    argv=[arg.decode(errors="replace") for arg in argv if arg],
                )
            )
        return sorted(found, key=lambda p: p.pid)

    def processes_running(self, argument: str) -> list[ContainerProcess]:
        """Live (not zombie) processes with `argument` among their arguments."""
        return [p for p in self.processes() if argument in p.argv and p.state != "Z"]

    def zombies(self) -> list[ContainerProcess]:
        return [p for p in self.processes() if p.state == "Z"]

    def wait_exit(self, timeout: float) -> int:
        """Wait for the container to end (its PID 1 exits) and return its exit code."""
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # unshare --kill-child passes SIGKILL on to PID 1
        self.process.wait(30)
        leaked = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.root))
        ]
        for mount_point in reversed(leaked):
            subprocess.run(["umount", "-l", mount_point], check=False)
        if leaked:
            raise RuntimeError(f"the fake container leaked mounts into the host: {leaked}")


def _build_root(
    base: Path, busybox: str | None, hide: Sequence[str], unterminated_etc: bool = False
) -> None:
    root = base / "root"
    root.mkdir()
    for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / name).mkdir()
    (base / "etc-upper").mkdir()
    (base / "etc-work").mkdir()
    _add_agent_user(base / "etc-upper", unterminated=unterminated_etc)
    for name in ("etc", "proc", "dev", "rollout", "logs", "app", "home"):
        (root / name).mkdir()
    for name, mode in (("tmp", 0o1777), ("root", 0o700)):
        (root / name).mkdir()
        (root / name).chmod(mode)
    home = root / "home" / AGENT_USER
    home.mkdir()
    os.chown(home, AGENT_UID, AGENT_UID)
    if busybox is not None:
        applets_dir = root / BUSYBOX_APPLETS.lstrip("/")
        applets_dir.mkdir()
        applets = subprocess.run(
            [busybox, "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        for applet in set(applets) - set(hide):
            (applets_dir / applet).symlink_to("/usr/bin/busybox")


def _add_agent_user(etc: Path, *, unterminated: bool = False) -> None:
    """Write to `etc` the host's user files plus a user and group `agent` with id 1000 (replacing
    any other user or group with that name or id); `unterminated`: without a final newline, as a
    hand-edited image may have them."""
    entries = {
        "passwd": f"{AGENT_USER}:x:{AGENT_UID}:{AGENT_UID}::/home/{AGENT_USER}:/bin/sh",
        "group": f"{AGENT_USER}:x:{AGENT_UID}:",
        "shadow": f"{AGENT_USER}:*:19000:0:99999:7:::",
        "gshadow": f"{AGENT_USER}:!::",
    }
    for name, entry in entries.items():
        host = Path("/etc") / name
        if not host.exists():
            continue
        path = etc / name
        shutil.copy2(host, path)
        os.chown(path, host.stat().st_uid, host.stat().st_gid)
        kept = []
        for line in host.read_text().splitlines():
            fields = line.split(":")
            clashes = fields[0] == AGENT_USER or (
                name in ("passwd", "group") and len(fields) > 2 and fields[2] == str(AGENT_UID)
            )
            if not clashes:
                kept.append(line)
        path.write_text("\n".join([*kept, entry]) + ("" if unterminated else "\n"))


@contextlib.contextmanager
def fake_container(
    tmp_path: Path,
    shell: str = "/bin/sh",
    *,
    command: Sequence[str] | None = None,
    hide: Sequence[str] = (),
    unterminated_etc: bool = False,
) -> Iterator[FakeContainer]:
    """Run a fake container in `tmp_path` with the shim (or `command`) as its PID 1
    (`unterminated_etc`: its /etc/passwd, group, shadow end without a newline)."""
    container = FakeContainer(tmp_path, shell, command, hide, unterminated_etc)
    try:
        yield container
    finally:
        container.close()
