"""The runner's side of the shim's file protocol: what the shim reports when ready, and the
request directories through which the runner asks it to run a command (see `rollout.api.wire.shim`
for the protocol itself)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rollout.api.wire import shim
from rollout_runner.environment import EnvironmentFailure

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShimInfo:
    """What the shim reported when it became ready."""

    version: int
    pid: int
    control_dir: str
    """The control directory as the shim sees it: paths in commands use this."""
    cwd: str
    """The container's working directory: where commands run unless given a cwd."""
    has_setsid: bool
    user_switch: str
    """The tool that runs commands as another user (`su`, `runuser`, `setpriv`), or ''."""
    uid: int | None
    notifies_done: bool = False
    """The shim writes each request's id to the runner's FIFO `done` when it ends (`DoneFifo`)."""

    @classmethod
    def parse(cls, text: str) -> ShimInfo:
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        try:
            return cls(
                version=int(fields["version"]),
                pid=int(fields["pid"]),
                control_dir=fields["dir"],
                cwd=fields["cwd"],
                has_setsid=bool(fields["setsid"]),
                user_switch=fields["su"],
                uid=int(fields["uid"]) if fields["uid"].isdigit() else None,
                notifies_done=fields.get("done") == "1",
            )
        except (KeyError, ValueError) as err:
            raise EnvironmentFailure(
                f"the shim's ready file is malformed ({err}): {text!r}"
            ) from err


def encode_env(env: Mapping[str, str]) -> str:
    """The `env` request file: one `export NAME='value'` line per variable, for sh's `eval`."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"env: {name!r} is not a valid environment variable name")
        if "\0" in value:
            # Never quote the value: it may be a secret.
            raise ValueError(f"env: the value of {name} contains a NUL character")
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines)


def one_line(what: str, value: str) -> bytes:
    """`value` as a request file's one line; a value that is not one line is an error."""
    if not value or "\n" in value or "\0" in value:
        raise ValueError(f"{what} must be a non-empty single line, got {value!r}")
    return value.encode() + b"\n"


def request_file_exists(path: Path) -> bool:
    """Whether the shim has written `path` yet: there and not empty (a shim of version 3 writes
    `rc` in one write, so an empty one is not written yet; the others' files are never empty)."""
    # One stat per poll, inline: cheaper than handing each one to a thread.
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def write_request(
    request: Path,
    line: str,
    files: Mapping[str, bytes],
    secret: Mapping[str, bytes],
    owner: int | None = None,
) -> None:
    """Write request `request` for the shim: its files, its secret files (mode 0600), and last
    its `go` file, by rename, so that the shim never sees half a request. With `owner` (the
    shim's uid, when not the runner's), the request is given to it first: the shim reads the
    secret files and writes its answer into the request's directory."""
    request.mkdir(parents=True)
    for name, data in files.items():
        (request / name).write_bytes(data)
    for name, data in secret.items():
        fd = os.open(request / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
    give_to(request, owner)
    (request / shim.GO_TEMP_FILE).write_text(line + "\n", encoding="utf-8")
    # The rename is what the shim waits for: the request is complete once `go` exists.
    os.rename(request / shim.GO_TEMP_FILE, request / shim.GO_FILE)


def wake_shim(fifo: Path) -> None:
    """Write one line into the shim's wake FIFO, without ever blocking: the shim holds it open,
    so the write lands in the pipe even while the shim is busy. A write that cannot be made (a
    full pipe holds wakes already; a FIFO the runner may not open) is left to the shim's
    one-second ticker."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        log.debug("cannot open the shim's wake FIFO %s: %s", fifo, err)
        return
    try:
        os.write(fd, b"\n")
    except OSError as err:
        log.debug("cannot wake the shim through %s: %s", fifo, err)
    finally:
        os.close(fd)


def give_to(tree: Path, owner: int | None) -> None:
    """Make `owner` (a uid; None: nobody else) the owner of `tree` and everything in it."""
    if owner is None:
        return
    for directory, _, names in os.walk(tree):
        os.chown(directory, owner, -1, follow_symlinks=False)
        for name in names:
            os.chown(os.path.join(directory, name), owner, -1, follow_symlinks=False)


def cancel_unstarted(request: Path, version: int) -> bool:
    """Claim the request before the shim does (a shim of `version`); True when it will never
    start. From `CLAIM_BY_CREATE_VERSION` on, the one who creates `taken` has it; before, the
    one who renames `go` away."""
    if version >= shim.CLAIM_BY_CREATE_VERSION:
        try:
            fd = os.open(request / shim.TAKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        try:
            os.write(fd, b"cancelled\n")
        finally:
            os.close(fd)
        return True
    try:
        os.rename(request / shim.GO_FILE, request / shim.CANCELLED_FILE)
    except FileNotFoundError:
        return False
    return True


def read_result(request: Path) -> tuple[int | None, bytes, bytes]:
    """The shim's answer to `request`: exit code (None while running), stdout, stderr."""

    def read(name: str) -> bytes:
        try:
            return (request / name).read_bytes()
        except FileNotFoundError:
            return b""

    rc = read(shim.RC_FILE).strip()
    try:
        exit_code = int(rc) if rc else None
    except ValueError as err:
        raise EnvironmentFailure(f"request {request.name}: the shim wrote rc {rc!r}") from err
    return exit_code, read(shim.STDOUT_FILE), read(shim.STDERR_FILE)


class DoneFifoUnusable(Exception):
    """The done FIFO cannot be opened or watched (it was replaced, say): poll instead."""


class DoneFifo:
    """The runner's end of the FIFO `done`, to which the shim writes a request's id when it ends.

    The runner makes the FIFO (`create`); it is open here only while some request is awaited
    (`watching`), read-write and non-blocking, so that it never reads EOF and never blocks, and
    the running event loop reads it. The shim's lines are only a hint: an id that comes while
    nobody watches is dropped, which is why a watcher looks for its `rc` after it starts
    watching, and then after each wake.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchers: dict[str, list[asyncio.Event]] = {}
        self._partial = b""

    @classmethod
    def create(cls, path: Path, owner: int | None) -> DoneFifo | None:
        """Make the FIFO `path` for the shim (mode 0600, given to `owner`, the shim's uid when
        not ours); None, logged, when it cannot be made (the runner then polls)."""
        try:
            try:
                os.mkfifo(path, 0o600)
            except FileExistsError:
                # A FIFO a runner made before (the runner's container restarted) serves again.
                if not stat.S_ISFIFO(os.lstat(path).st_mode):
                    raise
            if owner is not None:
                os.chown(path, owner, -1, follow_symlinks=False)
        except OSError as err:
            log.debug("cannot make the done FIFO %s, polling for answers instead: %s", path, err)
            return None
        return cls(path)

    @contextlib.contextmanager
    def watching(self, request_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever the shim says that request `request_id` ended, while inside;
        `DoneFifoUnusable` before entering when the FIFO cannot serve."""
        event = asyncio.Event()
        if self._fd is None:
            self._open()
        self._watchers.setdefault(request_id, []).append(event)
        try:
            yield event
        finally:
            events = self._watchers[request_id]
            events.remove(event)
            if not events:
                del self._watchers[request_id]
            if not self._watchers:
                self._close()

    def _open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as err:
            raise DoneFifoUnusable(f"cannot open {self.path}: {err}") from err
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                raise DoneFifoUnusable(f"{self.path} is no longer a FIFO")
            loop.add_reader(fd, self._read)
        except BaseException as err:
            os.close(fd)
            if isinstance(err, OSError):
                raise DoneFifoUnusable(f"cannot watch {self.path}: {err}") from err
            raise
        self._fd, self._loop, self._partial = fd, loop, b""

    def _close(self) -> None:
        fd, loop = self._fd, self._loop
        self._fd = self._loop = None
        if fd is None:
            return
        if loop is not None and not loop.is_closed():
            loop.remove_reader(fd)
        os.close(fd)

    def _read(self) -> None:
        if self._fd is None:
            return
        data = self._partial
        try:
            while chunk := os.read(self._fd, 4096):
                data += chunk
        except BlockingIOError:
            pass
        except OSError as err:
            log.debug("reading the done FIFO %s: %s", self.path, err)
        *lines, self._partial = data.split(b"\n")
        for line in lines:
            for event in self._watchers.get(line.decode(errors="replace"), ()):
                event.set()
