"""A fake container for tests of the shim: real shells and processes, no container runtime.

`fake_container(tmp_path)` plays the trial Pod's `environment` container on this machine (as root,
without Docker): it is the product's host sandbox (`rollout.local.host`: its own mount and pid
namespaces, a root of read-only bind mounts of the host's /usr, /bin, /lib..., a copy-on-write
/etc, the host's /dev, a fresh /proc, fresh writable /tmp, /app (the working directory), /root and
/home, the control directory and the logs directory bind-mounted at /rollout and /logs) with a
user `agent` (uid 1000, home /home/agent) added to its /etc. The test process (and the
`ShimEnvironment` in it) reaches the control and logs directories at their host paths, as the
runner container would. Whatever the container writes outside those mounts (/app, /tmp, /tests,
...) is visible on the host under `.root`.

The shim runs as the fake container's PID 1, in a session of its own, as a container runtime
starts it. `shell` picks the userland:

- "/bin/sh": the host's /bin/sh (dash on Debian) runs the shim and the commands.
- "busybox": busybox stands in for /bin/sh and its applets come first on PATH (setsid, sleep, cp,
  ...), as on Alpine. Debian's busybox has no `su`, so util-linux su is used for users.
- "/bin/bash": `bash --posix` runs the shim; commands still run with /bin/sh.

`hide` names tools (say `setsid`, `su`) that the container must lack, to exercise the shim's
fallbacks: /dev/null is mounted over them, which no shell takes for a command. `local_bin` gives
the container a /usr/local/bin of its own (first on PATH), writable from the host at
`FakeContainer.local_bin`: stand-in programs go there. The busybox, hidden-tool and /usr/local/bin
mounts are made by a prelude (`_PRELUDE`) that PID 1 runs in the container's root before it
becomes the shim.

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
from rollout.local.host import PATH, HostRoot, host_sandbox_unavailable, spawn_host_sandbox
from rollout.local.sandbox import SandboxStartFailed

SHELLS = ("/bin/sh", "busybox", "/bin/bash")
AGENT_USER = "agent"
AGENT_UID = 1000
WORKDIR = "/app"
BUSYBOX_APPLETS = "/bb"
LOCAL_BIN = "/rollout-local-bin"
"""Inside the container: the directory mounted over /usr/local/bin when `local_bin` is asked."""

# Runs as the container's PID 1 in its root, before it becomes the shim: busybox over /bin/sh
# ($1, or '' for none), /dev/null over the tools named in $2, and the directory $3 (or '') over
# /usr/local/bin.
_PRELUDE = r"""
busybox=$1 hide=$2 local_bin=$3; shift 3
set -e
if [ -n "$busybox" ]; then mount --bind "$busybox" "$(readlink -f /bin/sh)"; fi
if [ -n "$local_bin" ]; then mount --bind "$local_bin" /usr/local/bin; fi
for tool in $hide; do
  for d in /usr/local/bin /usr/local/sbin /usr/bin /usr/sbin; do
    if [ -f "$d/$tool" ] && [ ! -L "$d/$tool" ]; then mount --bind /dev/null "$d/$tool"; fi
  done
done
exec "$@"
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
        return "a fake container needs root (mount and pid namespaces, and its user agent)"
    return host_sandbox_unavailable()


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
        local_bin: bool = False,
    ) -> None:
        if shell not in SHELLS:
            raise ValueError(f"shell must be one of {SHELLS}, got {shell!r}")
        self.shell = shell
        layout = HostRoot.create(base, WORKDIR)
        self.root = layout.root
        self.control_dir = layout.control_dir
        self.logs_dir = layout.logs_dir
        busybox = shutil.which("busybox") if shell == "busybox" else None
        if shell == "busybox" and busybox is None:
            raise RuntimeError(busybox_missing_reason())
        _add_agent_user(layout.etc_upper, unterminated=unterminated_etc)
        home = self.root / "home" / AGENT_USER
        home.mkdir()
        os.chown(home, AGENT_UID, AGENT_UID)
        if busybox is not None:
            _add_busybox_applets(self.root, busybox, hide)
        if command is None:
            command = shim_command(CONTROL_DIR)
            if shell == "/bin/bash":
                command = ["/bin/bash", "--posix", "-c", SHIM_TEXT, SHIM_NAME, CONTROL_DIR]
        self.local_bin: Path | None = None
        if local_bin:
            self.local_bin = self.root / LOCAL_BIN.lstrip("/")
            self.local_bin.mkdir()
        if busybox or hide or local_bin:
            tools = " ".join(hide)
            mounted = LOCAL_BIN if local_bin else ""
            command = [
                "/bin/sh",
                "-c",
                _PRELUDE,
                "prelude",
                busybox or "",
                tools,
                mounted,
                *command,
            ]
        path = f"{BUSYBOX_APPLETS}:{PATH}" if busybox else PATH
        self.sandbox = spawn_host_sandbox(layout, command, env={"PATH": path, "HOME": "/root"})
        self.process = self.sandbox.process
        try:
            self.sandbox.wait_started()
        except SandboxStartFailed as err:
            raise RuntimeError(err.message) from None

    def log(self) -> str:
        """What the container printed (the shim logs to stderr)."""
        return self.sandbox.log()

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
        return [] if init is None else namespace_processes(init)

    def processes_running(self, argument: str) -> list[ContainerProcess]:
        """Live (not zombie) processes with `argument` among their arguments."""
        return [p for p in self.processes() if argument in p.argv and p.state != "Z"]

    def zombies(self) -> list[ContainerProcess]:
        return [p for p in self.processes() if p.state == "Z"]

    def wait_exit(self, timeout: float) -> int:
        """Wait for the container to end (its PID 1 exits) and return its exit code."""
        return self.process.wait(timeout)

    def close(self) -> None:
        leaked = self.sandbox.terminate()
        if leaked:
            raise RuntimeError(f"the fake container leaked mounts into the host: {leaked}")


def namespace_processes(init_host_pid: int) -> list[ContainerProcess]:
    """Every process in the pid namespace whose PID 1 has the host pid given, zombies included."""
    try:
        namespace = os.readlink(f"/proc/{init_host_pid}/ns/pid")
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


def _add_busybox_applets(root: Path, busybox: str, hide: Sequence[str]) -> None:
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
    local_bin: bool = False,
) -> Iterator[FakeContainer]:
    """Run a fake container in `tmp_path` with the shim (or `command`) as its PID 1
    (`unterminated_etc`: its /etc/passwd, group, shadow end without a newline; `local_bin`: a
    /usr/local/bin of its own, see the module docstring)."""
    container = FakeContainer(tmp_path, shell, command, hide, unterminated_etc, local_bin)
    try:
        yield container
    finally:
        container.close()
