"""A published dataset's manifest: its tasks in trial order, each named by its content hash.

The manifest and one archive per task (`rollout.api.archive`) make a dataset's bundle in
storage; where they are stored (the object keys) is `rollout.api.layout`'s business. The
manifest's digest, over its canonical JSON, is the dataset's identity. `rollout.datasets.bundle`
builds manifests from task directories.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from rollout.api.base import FileModel
from rollout.api.task import TaskConfig, parse_task_config


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


def canonical_json(manifest: DatasetManifest) -> bytes:
    """The manifest as canonical JSON: sorted keys, no whitespace, UTF-8."""
    data = manifest.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def manifest_digest(manifest: DatasetManifest) -> str:
    """sha256 hex of the manifest's canonical JSON: the dataset's identity in storage."""
    return hashlib.sha256(canonical_json(manifest)).hexdigest()
