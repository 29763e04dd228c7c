"""Bundling a dataset for storage: one deterministic archive per task, and the manifest.

The archive's format is `rollout.api.archive`'s and the manifest's model `rollout.api.manifest`;
this module only makes the bytes and the models from task directories.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from rollout.api.archive import (
    DIRECTORY_MODE,
    EXECUTABLE_MODE,
    FILE_MODE,
    SYMLINK_MODE,
    link_escapes,
)
from rollout.api.dataset import Dataset
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.manifest import DatasetManifest, ManifestTask
from rollout.api.results import TrialError
from rollout.api.taskdir import (
    BrokenTask,
    EntryKind,
    Task,
    environment_hash,
    task_content_hash,
    walk_tree,
)


def task_archive(task_dir: str | Path, *, what: str = "the task") -> bytes:
    """A deterministic tar.gz of the task directory (or of its environment/ alone, a build's
    context), with names relative to it.

    A symlink pointing outside the directory is refused here, where the author can fix it,
    rather than when a runner or a builder extracts the archive.
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
                info.mode = DIRECTORY_MODE
                tar.addfile(info)
            elif entry.kind is EntryKind.SYMLINK:
                target = entry.link_target or ""
                if link_escapes(entry.path, target):
                    raise InvalidInput.one(
                        entry.source,
                        None,
                        f"symbolic link to {target!r} points outside {what}",
                        ErrorType.TASK_INVALID,
                    )
                info.type = tarfile.SYMTYPE
                info.linkname = target
                info.mode = SYMLINK_MODE
                tar.addfile(info)
            else:
                data = entry.source.read_bytes()
                info.size = len(data)
                info.mode = EXECUTABLE_MODE if entry.executable else FILE_MODE
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def environment_archive(task: Task) -> bytes:
    """A deterministic tar.gz of the task's environment/ alone: an image build's context."""
    return task_archive(
        task.environment_dir, what="environment/ (a build context cannot follow it)"
    )


def build_manifest(dataset: Dataset) -> DatasetManifest:
    """The manifest of a loaded dataset (hashes every task's files); a broken task is listed
    with its error and no archive."""
    return DatasetManifest(name=dataset.name, tasks=[_entry(task) for task in dataset.tasks])


def _entry(task: Task | BrokenTask) -> ManifestTask:
    if isinstance(task, BrokenTask):
        error = TrialError(type=task.error_type, message=task.message)
        return ManifestTask(name=task.name, error=error)
    return ManifestTask(
        name=task.name,
        content_hash=task_content_hash(task.path),
        # Only what can be built: an environment/ without a Dockerfile has no image to build.
        environment_hash=environment_hash(task.path) if task.dockerfile.is_file() else None,
        config=task.config.to_dict(),
        has_solution=task.has_solution,
    )
