"""Datasets as content-addressed bundles: one archive per task plus a manifest.

The archive of a task is deterministic (sorted entries, mtime 0, owner 0, modes from the
executable bit alone, gzip without timestamp or name), so the same task gives the same bytes on
any machine with the same zlib, and extracting it gives back a tree with the same content hash.
Where bundles are stored (the object keys) is decided elsewhere; this module only makes bytes,
digests and models.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import posixpath
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

from pydantic import Field

from rollout.api.base import FileModel
from rollout.api.dataset import Dataset
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.task import TaskConfig, parse_task_config
from rollout.api.taskdir import EntryKind, task_content_hash, walk_tree

ARCHIVE_LABEL = "task archive"


def task_archive(task_dir: str | Path) -> bytes:
    """A deterministic tar.gz of the task directory, with names relative to it.

    A symlink pointing outside the task is refused here, where the author can fix it, rather
    than when a runner extracts the archive.
    """
    root = Path(task_dir)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in walk_tree(root):
            info = tarfile.TarInfo(entry.path)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if entry.kind is EntryKind.DIRECTORY:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif entry.kind is EntryKind.SYMLINK:
                target = entry.link_target or ""
                if _link_escapes(entry.path, target):
                    raise InvalidInput.one(
                        entry.source,
                        None,
                        f"symbolic link to {target!r} points outside the task",
                        ErrorType.TASK_INVALID,
                    )
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mode = 0o777
                tar.addfile(info)
            else:
                data = entry.source.read_bytes()
                info.size = len(data)
                info.mode = 0o755 if entry.executable else 0o644
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def extract_task_archive(data: bytes, dest: str | Path) -> None:
    """Extract a task archive into `dest` (missing or empty), refusing anything unsafe.

    Refused: absolute names, `..`, symlinks that leave `dest` (also through other symlinks),
    members written through a symlink, hard links, devices and other special files, duplicate
    names. Names are checked before anything is written; symlinks are checked again once all
    are in place, and on any refusal `dest` is emptied again.
    """
    target = Path(dest)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInput.one(target, None, "extraction needs a missing or empty directory")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            _check_members(members)
            target.mkdir(parents=True, exist_ok=True)
            try:
                for member in members:
                    _extract_member(tar, member, target)
                _check_links_stay_inside(members, target)
            except BaseException:
                _empty(target)
                raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise InvalidInput.one(
            ARCHIVE_LABEL, None, f"not a valid tar.gz: {err}", ErrorType.TASK_INVALID
        ) from None


def _check_members(members: list[tarfile.TarInfo]) -> None:
    seen: set[str] = set()
    links: set[str] = set()
    for member in members:
        name = member.name
        pure = PurePosixPath(name)
        if name.startswith("/") or pure.is_absolute():
            _refuse(name, "absolute path")
        if ".." in pure.parts:
            _refuse(name, "path leaves the task directory")
        normal = posixpath.normpath(name) if name else ""
        if normal in ("", "."):
            if member.isdir():
                continue  # "./", as `tar -C dir .` writes it: the destination itself
            _refuse(name, "names the task directory itself")
        if normal in seen:
            _refuse(name, "appears twice")
        if any(str(parent) in links for parent in PurePosixPath(normal).parents):
            _refuse(name, "would be written through a symbolic link")
        if member.issym():
            if member.linkname.startswith("/") or _link_escapes(normal, member.linkname):
                _refuse(name, f"symbolic link to {member.linkname!r} leaves the task directory")
            links.add(normal)
        elif member.islnk():
            _refuse(name, "hard links are not allowed")
        elif not (member.isfile() or member.isdir()):
            _refuse(name, "devices, FIFOs and other special files are not allowed")
        seen.add(normal)


def _extract_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    path = dest / posixpath.normpath(member.name)
    if member.isdir():
        path.mkdir(parents=True, exist_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if member.issym():
        os.symlink(member.linkname, path)
        return
    source = tar.extractfile(member)
    if source is None:  # cannot happen for a regular file; keeps the type checker honest
        _refuse(member.name, "has no data")
    with source, open(path, "xb") as out:
        out.write(source.read())
    os.chmod(path, 0o755 if member.mode & 0o100 else 0o644)


def _check_links_stay_inside(members: list[tarfile.TarInfo], dest: Path) -> None:
    # A link that is harmless on its own can leave through another link ("a" -> ".",
    # "b" -> "a/.."); resolving the real paths catches every chain.
    root = os.path.realpath(dest)
    for member in members:
        if member.issym():
            resolved = os.path.realpath(dest / posixpath.normpath(member.name))
            if resolved != root and not resolved.startswith(root + os.sep):
                _refuse(member.name, f"symbolic link to {member.linkname!r} leaves the task")


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _link_escapes(link_path: str, target: str) -> bool:
    """True if `target`, read relative to the link's directory, leaves the root."""
    if target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link_path), target))
    return resolved == ".." or resolved.startswith("../")


def _refuse(name: str, why: str) -> NoReturn:
    raise InvalidInput.one(ARCHIVE_LABEL, name, f"refused: {why}", ErrorType.TASK_INVALID)


# --- Manifest -------------------------------------------------------------------------------


class ManifestTask(FileModel):
    """One task of a published dataset: what the operator needs without fetching the archive."""

    name: str = Field(description="The task's name in trial names and result paths.")
    content_hash: str = Field(description="sha256 of the task's content; names its archive.")
    config: dict[str, Any] = Field(description="The task's parsed task.toml.")
    has_solution: bool = Field(description="Whether solution/solve.sh exists (oracle agent).")

    def task_config(self) -> TaskConfig:
        return parse_task_config(self.config, f"manifest task {self.name}")


class DatasetManifest(FileModel):
    """A published dataset: its name and its tasks in trial order."""

    name: str
    tasks: list[ManifestTask]


def build_manifest(dataset: Dataset) -> DatasetManifest:
    """The manifest of a loaded dataset (hashes every task's files)."""
    return DatasetManifest(
        name=dataset.name,
        tasks=[
            ManifestTask(
                name=task.name,
                content_hash=task_content_hash(task.path),
                config=task.config.to_dict(),
                has_solution=task.has_solution,
            )
            for task in dataset.tasks
        ],
    )


def canonical_json(manifest: DatasetManifest) -> bytes:
    """The manifest as canonical JSON: sorted keys, no whitespace, UTF-8."""
    data = manifest.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def manifest_digest(manifest: DatasetManifest) -> str:
    """sha256 hex of the manifest's canonical JSON: the dataset's identity in storage."""
    return hashlib.sha256(canonical_json(manifest)).hexdigest()
