"""`DirectoryStore`: objects as files under a local directory, for local mode (no bucket).

A key is a path under the root: `<root>/<prefix>/jobs/<job>/.../result.json` is the object
`<prefix>/jobs/<job>/.../result.json`, the same keys as in a bucket, so the runner writes the
seed's layout straight into a directory. The semantics follow `ObjectStore` where they overlap:

- a reader never sees half an object: each write goes to a temporary file, then is renamed into
  place (replacing the old object, as S3 does) or, for `put_new`, hard-linked, which refuses to
  replace anything;
- `list_keys` gives keys in S3's order (by their UTF-8 bytes), regular files only;
- a missing object is `ObjectNotFound`; any other failure on the store's side is a
  `StorageError`, not retried (a local disk has no throttling to wait out); a problem with a
  local source file is the OSError it is, as with ObjectStore;
- a key that is not a safe relative path (`rollout.api.layout.check_relative_path`: absolute,
  an empty, '.' or '..' segment, a backslash or NUL) is refused with `InvalidKey`, and no write
  goes through a symlink that leads out of the root.

Temporary files live in `<root>/.rollout-tmp/` (on the root's filesystem, so that the rename is
atomic), where no key can be: a key's first segment is a prefix, `jobs` or `tasks`.

With `jobs_dir`, the jobs tree lives elsewhere: `<prefix>/jobs/<job>/...` is the file
`<jobs_dir>/<job>/...`, so local mode writes a job's results straight into the user's jobs
directory (job.yaml's jobs_dir) while task archives stay in a cache. Each tree has its own
temporary directory, so a rename never crosses filesystems.

Unlike S3, one key cannot be both an object and the folder of others ("a/b" and "a/b/c"): the
second write is a StorageError. The layout never does that.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from rollout.api.layout import check_relative_path, normalize_prefix
from rollout.storage.retry import InvalidKey, ObjectNotFound, StorageError

JOBS_DIR = "jobs"
"""The first key segment (after the prefix) of every job's objects."""

TEMP_DIR = ".rollout-tmp"
"""Under the root: files being written. Never a key (nor the start of one)."""

COPY_CHUNK = 1024 * 1024


class DirectoryStore:
    """Objects as files under `root` (an absolute path to an existing directory).

    `prefix` is the location's key prefix, as `StorageLocation.prefix` (kept without surrounding
    slashes); `key(*parts)` builds keys under it. Safe to share between threads.
    """

    def __init__(
        self, root: Path | str, prefix: str = "", *, jobs_dir: Path | str | None = None
    ) -> None:
        self.root = _directory(root)
        self.jobs_root = None if jobs_dir is None else _directory(jobs_dir)
        self._prefix = normalize_prefix(prefix).rstrip("/")
        self._jobs_parts = (*PurePosixPath(self._prefix).parts, JOBS_DIR)

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def endpoint_name(self) -> str:
        """The store as error messages name it."""
        return f"directory {self.root}"

    def secrets(self) -> list[str]:
        return []  # a directory needs no credentials

    def key(self, *parts: str) -> str:
        """A full key: the prefix, then `parts` joined with '/'."""
        segments = [self._prefix, *parts] if self._prefix else list(parts)
        return check_relative_path("/".join(s.strip("/") for s in segments), "key").as_posix()

    def uri(self, key: str) -> str:
        return self.path(key).as_uri()

    def path(self, key: str) -> Path:
        """The file of the object `key`; InvalidKey for a key that could leave the root."""
        return self._place(key)[1]

    def _place(self, key: str) -> tuple[Path, Path]:
        """The tree the object `key` is in (the root, or jobs_dir) and its file there."""
        try:
            parts = check_relative_path(key, "key").parts
        except ValueError as err:
            raise self._error(InvalidKey, "use", key, f"{err}: refused") from None
        root = self.root
        jobs = len(self._jobs_parts)
        if self.jobs_root is not None and parts[:jobs] == self._jobs_parts and len(parts) > jobs:
            root, parts = self.jobs_root, parts[jobs:]
        if parts[0] == TEMP_DIR:
            raise self._error(InvalidKey, "use", key, f"{TEMP_DIR}/ is the store's own: refused")
        return root, root.joinpath(*parts)

    # Single objects.

    def get_bytes(self, key: str) -> bytes:
        """The object's content; ObjectNotFound when there is no such key."""
        root, path = self._place(key)
        try:
            _check_inside(path.parent, root)
            # Never blocks on a FIFO, never follows a symlink: only regular files are objects.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    raise FileNotFoundError(f"{path} is not a regular file")
                return file.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._error(ObjectNotFound, "get_bytes", key, "no such object") from None
        except OSError as err:
            if err.errno == errno.ELOOP:  # a symlink (O_NOFOLLOW)
                raise self._error(ObjectNotFound, "get_bytes", key, "no such object") from None
            raise self._error(StorageError, "get_bytes", key, str(err)) from err

    def exists(self, key: str) -> bool:
        path = self.path(key)
        try:
            return stat.S_ISREG(path.lstat().st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as err:
            raise self._error(StorageError, "exists", key, str(err)) from err

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        """Write the object (replacing one that is there). `content_type` is not kept."""
        self._write("put_bytes", key, lambda out: out.write(data), replace=True)

    def put_new(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        """Write the object only where there is none: True when this call wrote it, False when
        an object was there already (it is left as it is). Two writers at once: one wins."""
        return self._write("put_new", key, lambda out: out.write(data), replace=False)

    def upload_file(self, local_path: Path | str, key: str) -> None:
        """Copy a local file in as the object `key` (replacing one that is there)."""
        # Opened before anything is written: a missing source is its OSError, as with S3.
        with Path(local_path).open("rb") as source:
            self._write(
                "upload_file",
                key,
                lambda out: shutil.copyfileobj(source, out, COPY_CHUNK),
                replace=True,
            )

    # Trees of objects.

    def list_keys(self, prefix: str) -> list[str]:
        """Every key that starts with `prefix` (a plain string prefix), in S3's order."""
        trees = [(self.root, "")]
        jobs_prefix = "/".join(self._jobs_parts) + "/"
        if self.jobs_root is not None:
            trees.append((self.jobs_root, jobs_prefix))
        keys: list[str] = []
        for root, key_prefix in trees:
            if key_prefix.startswith(prefix):
                start = root  # the whole tree is under `prefix`
            elif prefix.startswith(key_prefix):
                folder = prefix[len(key_prefix) :].rpartition("/")[0]
                start = root.joinpath(*folder.split("/")) if folder else root
            else:
                continue
            found = self._walk(root, start, key_prefix, prefix)
            if root == self.root and self.jobs_root is not None:
                # Files under the root's own jobs/ are no objects: those keys are in jobs_dir.
                found = [k for k in found if not k.startswith(jobs_prefix)]
            keys += [k for k in found if k.startswith(prefix)]
        return sorted(keys, key=lambda k: k.encode("utf-8", "surrogateescape"))

    def _walk(self, root: Path, start: Path, key_prefix: str, prefix: str) -> list[str]:
        """The keys of the regular files under `start` in the tree `root` (keys `key_prefix`+)."""
        keys: list[str] = []
        try:
            for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
                base = Path(dirpath)
                if base == root:
                    dirnames[:] = [d for d in dirnames if d != TEMP_DIR]
                for name in filenames:
                    path = base / name
                    if not stat.S_ISREG(os.lstat(path).st_mode):
                        continue  # a symlink or a special file is no object
                    keys.append(key_prefix + path.relative_to(root).as_posix())
        except OSError as err:
            raise self._error(StorageError, "list_keys", prefix, str(err)) from err
        return keys

    # Writing.

    def _write(
        self, operation: str, key: str, fill: Callable[[BinaryIO], object], *, replace: bool
    ) -> bool:
        root, target = self._place(key)
        temp_dir = root / TEMP_DIR
        try:
            # Checked before mkdir, which would follow a symlink out of the root.
            _check_inside(target.parent, root)
            temp_dir.mkdir(exist_ok=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temp_name = tempfile.mkstemp(dir=temp_dir, prefix=target.name[:64] + ".")
        except OSError as err:
            raise self._error(StorageError, operation, key, str(err)) from err
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                # On disk before it has its name: result.json's presence means it is complete.
                os.fsync(out.fileno())
            if replace:
                temp.replace(target)
                return True
            try:
                os.link(temp, target)  # fails where any file is: never replaces one
            except FileExistsError:
                return False
            return True
        except OSError as err:
            raise self._error(StorageError, operation, key, str(err)) from err
        finally:
            temp.unlink(missing_ok=True)

    def _error(
        self, kind: type[StorageError], operation: str, key: str, reason: str
    ) -> StorageError:
        return kind(
            f"storage {operation} of {key!r} in {self.endpoint_name} failed: {reason}",
            operation=operation,
            key=key,
            endpoint=self.endpoint_name,
            attempts=1,
            transient=False,
        )


def _directory(path: Path | str) -> Path:
    path = Path(path)
    if not path.is_absolute():
        raise ValueError(f"{str(path)!r} is not an absolute path")
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is not a directory")
    return path.resolve()


def _check_inside(directory: Path, root: Path) -> None:
    """Refuse a directory that a symlink has taken out of its tree's root."""
    if not directory.resolve().is_relative_to(root):
        raise OSError(f"{directory} leads out of {root} through a symlink")
