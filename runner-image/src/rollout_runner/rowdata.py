"""A data dataset's rows as a shard's runner reads them: the rows archive, fetched once.

The archive (`tasks/<taskContentHash>.tar.gz`, made by `rollout.datasets.bundle.stage_rows`)
holds rows.jsonl, one row per line with its id, question, instruction, answer (absent when the
row has none), kwargs and metadata, and the files of the dataset's Python verifier, if it has
one. Like a task's archive it is checked against its content hash before anything is read.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.manifest import ROWS_FILE
from rollout.api.taskdir import tree_hash
from rollout_runner.archive import extract_task_archive


@dataclass(frozen=True)
class RowData:
    """One row: what the agent is shown and what its verifier compares with."""

    id: str
    question: str
    instruction: str
    answer: Any
    """The ground truth; None when the row has none (the archive leaves it out then)."""
    kwargs: dict[str, Any]
    metadata: dict[str, Any]


def unpack_rows(data: bytes, destination: Path, content_hash: str) -> dict[str, RowData]:
    """Extract the rows archive into `destination` and read its rows by id; InvalidInput
    (task_invalid) for an archive that is not what its name says or not a rows archive."""
    shutil.rmtree(destination, ignore_errors=True)
    extract_task_archive(data, destination)
    found = tree_hash(destination)
    if found != content_hash:
        raise InvalidInput.one(
            "rows archive",
            None,
            f"its content hash is {found}, not {content_hash} as its name says",
            ErrorType.TASK_INVALID,
        )
    return read_rows(destination / ROWS_FILE)


def read_rows(path: Path) -> dict[str, RowData]:
    rows: dict[str, RowData] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(
            "rows archive", ROWS_FILE, f"cannot be read: {err}", ErrorType.TASK_INVALID
        ) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            row = RowData(
                id=str(item["id"]),
                question=str(item["question"]),
                instruction=str(item["instruction"]),
                answer=item.get("answer"),
                kwargs=dict(item.get("kwargs") or {}),
                metadata=dict(item.get("metadata") or {}),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise InvalidInput.one(
                "rows archive",
                f"{ROWS_FILE} line {number}",
                f"is not a row: {err}",
                ErrorType.TASK_INVALID,
            ) from None
        rows[row.id] = row
    return rows
