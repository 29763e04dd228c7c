"""A published dataset's manifest: its tasks in trial order, each named by its content hash.

The manifest, one archive per task and one per task environment/ that has a Dockerfile (the
context of an in-cluster image build; `rollout.api.archive`) make a dataset's bundle in
storage; where they are stored (the object keys) is `rollout.api.layout`'s business. The
manifest's digest, over its canonical JSON, is the dataset's identity. `rollout.datasets.bundle`
builds manifests from task directories.

A broken task (task_invalid, task_not_found) is listed in its place with its `error` and no
archive: the operator fails its trials at creation, with no Pod. A manifest's keys are only those
a runnable task has, for a runnable task (no `"error": null`), so that a dataset without broken
tasks keeps the digest it had before broken tasks could be listed, and a manifest written then
still reads.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from rollout.api.base import FileModel
from rollout.api.errors import ErrorType
from rollout.api.results import TrialError
from rollout.api.task import TaskConfig, parse_task_config

TASK_ERRORS = (ErrorType.TASK_INVALID, ErrorType.TASK_NOT_FOUND)
"""The error types a task itself can have, before any trial of it runs."""

_ABSENT_WHEN_NONE = ("content_hash", "environment_hash", "config", "error")


class ManifestTask(FileModel):
    """One task of a published dataset: what the operator needs without fetching the archive."""

    name: str = Field(description="The task's name in trial names and result paths.")
    content_hash: str | None = Field(
        None, description="sha256 of the task's content; names its archive (none when broken)."
    )
    environment_hash: str | None = Field(
        None,
        description="sha256 of the task's environment/ alone; names its archive, the context of "
        "an in-cluster image build (none when environment/ has no Dockerfile, or when the "
        "dataset was published before builds existed).",
    )
    config: dict[str, Any] | None = Field(
        None, description="The task's parsed task.toml (none when broken)."
    )
    has_solution: bool = Field(
        False, description="Whether it has solution/solve.sh or a root solve.sh (the oracle's)."
    )
    error: TrialError | None = Field(
        None,
        description="Why the task cannot run (task_invalid or task_not_found): its trials fail "
        "with this error and start no container.",
    )

    @model_validator(mode="after")
    def _runnable_or_broken(self) -> ManifestTask:
        if self.error is None:
            if self.content_hash is None or self.config is None:
                raise ValueError("a task without an error needs its content_hash and config")
        elif self.error.type not in TASK_ERRORS:
            raise ValueError(
                f"a task's error is task_invalid or task_not_found, not {self.error.type}"
            )
        elif self.content_hash is not None or self.environment_hash is not None:
            raise ValueError("a broken task (with an error) has no archive, so no content_hash")
        return self

    @model_serializer(mode="wrap")
    def _without_absent_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (k in _ABSENT_WHEN_NONE and v is None)}

    def task_config(self) -> TaskConfig:
        """The task's task.toml; a broken task's is the defaults (its trials never run)."""
        return parse_task_config(self.config or {}, f"manifest task {self.name}")


class ManifestRows(FileModel):
    """A published data dataset (seed 004 Shape A): its rows' ids in order, and the one archive
    (`tasks/<content_hash>.tar.gz`) that holds every row (rows.jsonl, `ROWS_FILE`) and the files
    its Python verifier needs."""

    content_hash: str = Field(description="sha256 of the rows archive's content; names it.")
    split: str = Field(description="The split the rows came from (data/<split>.jsonl).")
    ids: list[str] = Field(description="The rows' ids, in trial order.")
    config: dict[str, Any] = Field(
        description="dataset.toml's defaults as a task.toml (timeouts, resources, image)."
    )
    verifier: dict[str, Any] = Field(
        description="How rows are scored: {kind, metric | script, source} (rollout.api.rowrun)."
    )

    def task_config(self) -> TaskConfig:
        return parse_task_config(self.config, "manifest rows")


ROWS_FILE = "rows.jsonl"
"""In a rows archive: one JSON object per row, {id, question, instruction, answer, kwargs,
metadata} (answer absent when the row has none)."""


class DatasetManifest(FileModel):
    """A published dataset: its name and its tasks in trial order, or its rows."""

    name: str
    tasks: list[ManifestTask]
    rows: ManifestRows | None = Field(
        None, description="A data dataset's rows (its `tasks` are then empty)."
    )

    @model_validator(mode="after")
    def _tasks_or_rows(self) -> DatasetManifest:
        if self.rows is not None and self.tasks:
            raise ValueError("a data dataset lists its rows, not tasks")
        return self

    @model_serializer(mode="wrap")
    def _without_rows_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A task dataset's manifest keeps the digest it had before data datasets existed.
        data: dict[str, Any] = handler(self)
        if data.get("rows") is None:
            data.pop("rows", None)
        return data


def canonical_json(manifest: DatasetManifest) -> bytes:
    """The manifest as canonical JSON: sorted keys, no whitespace, UTF-8."""
    data = manifest.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def manifest_digest(manifest: DatasetManifest) -> str:
    """sha256 hex of the manifest's canonical JSON: the dataset's identity in storage."""
    return hashlib.sha256(canonical_json(manifest)).hexdigest()
