"""Bundling a dataset for storage: one deterministic archive per task, and the manifest.

The archive's format is `rollout.api.archive`'s and the manifest's model `rollout.api.manifest`;
this module only makes the bytes and the models from task directories. A task's archive is its
`rollout.api.taskdir.task_tree`: its directory, plus its dataset.toml defaults (DEFAULTS_FILE)
when they change its config, and the manifest names it by the hash of that same tree.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from rollout.api.archive import (
    DIRECTORY_MODE,
    EXECUTABLE_MODE,
    FILE_MODE,
    SYMLINK_MODE,
    link_escapes,
)
from rollout.api.dataset import DataRows, Dataset
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.manifest import ROWS_FILE, DatasetManifest, ManifestRows, ManifestTask
from rollout.api.results import TrialError
from rollout.api.rowrun import RowVerifier
from rollout.api.taskdir import (
    BrokenTask,
    EntryKind,
    Task,
    environment_hash,
    task_content_hash,
    task_tree,
    tree_hash,
    walk_tree,
)


def task_archive(task: Task | str | Path, *, what: str = "the task") -> bytes:
    """A deterministic tar.gz of a task (or of a directory: its environment/ alone, a build's
    context), with names relative to it.

    A loaded Task's archive is its `task_tree`: its directory, with its dataset.toml defaults as
    `rollout.api.taskdir.DEFAULTS_FILE` when it inherits any that change its config, so that the
    runner loads the config its manifest holds; its name is `task_content_hash(task)`. A path's
    is the directory as it is.

    A symlink pointing outside the directory is refused here, where the author can fix it,
    rather than when a runner or a builder extracts the archive.
    """
    entries = task_tree(task) if isinstance(task, Task) else walk_tree(Path(task))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
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
                data = entry.read_bytes()
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
    """The manifest of a loaded dataset (hashes every task's files, or its rows); a broken task
    is listed with its error and no archive."""
    if dataset.rows is not None:
        return DatasetManifest(name=dataset.name, tasks=[], rows=rows_manifest(dataset.rows))
    return DatasetManifest(name=dataset.name, tasks=[_entry(task) for task in dataset.tasks])


# --- data datasets ------------------------------------------------------------------------------


def stage_rows(rows: DataRows, dest: Path) -> None:
    """Lay out a data dataset's archive in `dest` (empty): rows.jsonl, one row per line, and a
    Python verifier's directory (tests/ for tests/evaluate.py; the script alone at the root), so
    that the verifier can read the files beside it. Nothing else of the dataset goes in: its
    data/ is in rows.jsonl already, and a runner fetches the whole archive for every shard."""
    lines = []
    for row in rows.rows:
        line: dict[str, object] = {"id": row.id, "question": row.question}
        line["instruction"] = row.instruction
        if row.answer is not None:
            line["answer"] = row.answer
        line["kwargs"] = row.kwargs
        line["metadata"] = row.metadata
        lines.append(json.dumps(line, ensure_ascii=False, sort_keys=True, allow_nan=False))
    (dest / ROWS_FILE).write_text("".join(f"{text}\n" for text in lines), encoding="utf-8")
    script = rows.verifier.script
    if script is None:
        return
    relative = PurePosixPath(script)
    source = rows.root / relative
    if len(relative.parts) == 1:
        shutil.copy2(source, dest / relative.name)
    else:
        top = relative.parts[0]
        shutil.copytree(rows.root / top, dest / top, symlinks=True)


def rows_manifest(rows: DataRows) -> ManifestRows:
    """The manifest entry of a data dataset: its ids, defaults, verifier and archive's hash."""
    with tempfile.TemporaryDirectory(prefix="rollout-rows-") as scratch:
        stage_rows(rows, Path(scratch))
        content_hash = tree_hash(scratch)
    return ManifestRows(
        content_hash=content_hash,
        split=rows.split,
        ids=[row.id for row in rows.rows],
        config=rows.config.to_dict(),
        verifier=RowVerifier.of(rows.verifier).model_dump(mode="json", by_alias=False),
    )


def rows_archive(rows: DataRows) -> bytes:
    """The archive of a data dataset (`stage_rows`), deterministic like a task's."""
    with tempfile.TemporaryDirectory(prefix="rollout-rows-") as scratch:
        stage_rows(rows, Path(scratch))
        return task_archive(scratch, what="the dataset")


def _entry(task: Task | BrokenTask) -> ManifestTask:
    if isinstance(task, BrokenTask):
        error = TrialError(type=task.error_type, message=task.message)
        return ManifestTask(name=task.name, error=error)
    return ManifestTask(
        name=task.name,
        content_hash=task_content_hash(task),
        # Only what can be built: an environment/ without a Dockerfile has no image to build.
        environment_hash=environment_hash(task.path) if task.dockerfile.is_file() else None,
        config=task.config.to_dict(),
        has_solution=task.has_solution,
    )
