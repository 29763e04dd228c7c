"""Extracting a task archive (`rollout.api.archive`) safely: the runner's copy of the task.

The archive comes from storage, so nothing in it is trusted: every name and link is checked
before anything is written, and links again once all are in place.
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath
from typing import NoReturn

from rollout.api.archive import ARCHIVE_LABEL, EXECUTABLE_MODE, FILE_MODE, link_escapes
from rollout.api.errors import ErrorType, InvalidInput


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
            if member.linkname.startswith("/") or link_escapes(normal, member.linkname):
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
    os.chmod(path, EXECUTABLE_MODE if member.mode & 0o100 else FILE_MODE)


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


def _refuse(name: str, why: str) -> NoReturn:
    raise InvalidInput.one(ARCHIVE_LABEL, name, f"refused: {why}", ErrorType.TASK_INVALID)
