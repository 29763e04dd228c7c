"""Files into and out of a bridge sandbox as tar archives, shared by the docker, modal, e2b
and daytona sandboxes.

Every provider carries a tar archive better than a tree of files (one call, modes and links
kept), and `tar` in the sandbox or the engine unpacks it. A put's archive holds the file under
the name it gets in the sandbox, or a directory's contents, so it unpacks into one directory
(`placement`); a get's archive holds the path's tree under its own name, and what comes out of
a sandbox is not to be trusted: `extract` keeps only what tarfile's 'data' filter lets through.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from rollout_runner.environment import Environment, FileTransferError
from rollout_runner.transfer import after_prepare, check_transfer, unstage

log = logging.getLogger(__name__)

TRANSFER_TIMEOUT_SEC = 600.0
"""How long a file copy (and its commands) may take."""


async def placement(local_path: Path, container_path: str) -> tuple[PurePosixPath, str | None]:
    """Where the archive of a put of `local_path` to `container_path` unpacks, and the name of
    the file in it (None: `local_path` is a directory, whose contents the archive holds);
    FileTransferError when `local_path` is neither a file nor a directory."""
    is_dir = await asyncio.to_thread(local_path.is_dir)
    if not is_dir and not await asyncio.to_thread(local_path.is_file):
        raise FileTransferError(f"{local_path} is neither a file nor a directory")
    target = PurePosixPath(container_path)
    return (target, None) if is_dir else (target.parent, target.name)


async def make_directory(
    environment: Environment,
    directory: PurePosixPath,
    *,
    prepare: str | None,
    timeout_sec: float,
    what: str,
) -> None:
    """Run `prepare` (when given) and then make `directory` in `environment`, as the default
    user: FileTransferError saying `what` failed otherwise."""
    make = f"mkdir -p {shlex.quote(str(directory))}"
    result = await environment.run(
        make if prepare is None else after_prepare(prepare, make), timeout_sec=timeout_sec
    )
    check_transfer(result, f"preparing for and {what}" if prepare is not None else what)


def pack(
    local_path: Path,
    file_name: str | None,
    owner: tuple[int, int] | None,
    archive: IO[bytes],
) -> None:
    """A tar of `local_path` into `archive`, rewound: the file as `file_name`, or a directory's
    contents; with `owner` (uid, gid), every entry that user's (as a copy they made)."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if owner is not None:
            info.uid, info.gid = owner
            info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=archive, mode="w") as tar:
        if file_name is not None:
            tar.add(local_path, arcname=file_name, filter=owned)
        else:
            for child in sorted(local_path.iterdir()):
                tar.add(child, arcname=child.name, filter=owned)
    archive.seek(0)


def extract(archive: Path, destination: Path) -> None:
    """Extract `archive` into `destination`, skipping what the 'data' filter refuses (absolute
    or escaping paths and links, devices): the environment's files are not to be trusted."""
    with tarfile.open(archive) as tar:
        for member in tar:
            try:
                safe = tarfile.data_filter(member, str(destination))
            except tarfile.FilterError as err:
                log.debug("not copying %s out of the environment: %s", member.name, err)
                continue
            tar.extract(safe, destination, filter="fully_trusted")


def unstage_archive(archive: Path, name: str, local_path: Path) -> None:
    """Put the tree `name` of `archive` (a get's archive: `name` at its root) at `local_path`,
    extracted beside the archive first (into `files`, which must not exist)."""
    extracted = archive.parent / "files"
    extracted.mkdir()
    extract(archive, extracted)
    unstage(extracted / name, local_path)
