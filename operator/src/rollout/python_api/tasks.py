"""Seed 002's `load_tasks`: the rows of a benchmark, from a file or from a list of dicts.

A row is `rollout.api.rows.DataRow` (seed 002's BenchmarkItem): `id` (or `task_id`), `question`
(or `query`, `input`), `answer` (or `ground_truth`, `expected`), `kwargs`, and every other field
in `metadata`; the rules are the CLI's (`rollout.api.rows`), and so are the errors: every
problem at once, each naming the file, the line (`line 3` of a .jsonl file, `row 3` of a .json
list) and the field. For a list given in Python, the place is its index: `tasks[2]: id`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollout.api.dataset import load_dataset_path
from rollout.api.errors import InvalidInput, Problem
from rollout.api.rows import ROW_SUFFIXES, DataRow, parse_rows, read_row_records

BenchmarkItem = DataRow
"""Seed 002's name for a row."""

LIST_SOURCE = "tasks"
"""How problems name a list of rows given in Python (`tasks[2]: id: ...`)."""

_POSITION = re.compile(r"^line (\d+)(.*)$", re.DOTALL)


def load_tasks(
    tasks_or_path: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
) -> list[DataRow]:
    """The rows of a .jsonl file (one per line), a .json file (a list), a data dataset
    directory (`data/<split>.jsonl` with its dataset.toml), or a list of dicts, in their order.

    Raises InvalidInput with every problem found (a line that is not JSON, a row without an id
    or a question, an id used twice, ...), each naming where it is and the field."""
    if isinstance(tasks_or_path, str | os.PathLike):
        return _rows_of_path(Path(tasks_or_path))
    if isinstance(tasks_or_path, Mapping):
        raise InvalidInput.one(
            LIST_SOURCE, None, "is one task (a dict): give a list of tasks, or a file's path"
        )
    records = list(enumerate(tasks_or_path, start=1))
    try:
        return parse_rows(records, file=LIST_SOURCE)
    except InvalidInput as err:
        raise InvalidInput([_indexed(p) for p in err.problems]) from None


def _rows_of_path(path: Path) -> list[DataRow]:
    if path.is_dir():
        dataset = load_dataset_path(path)
        if dataset.rows is None:
            raise InvalidInput.one(
                path, None, "holds task directories, not rows: load_tasks reads a data benchmark"
            )
        return dataset.rows.rows
    if path.suffix not in ROW_SUFFIXES:
        raise InvalidInput.one(path, None, "a tasks file is a .jsonl or a .json file")
    if not path.exists():
        raise InvalidInput.one(path, None, "tasks file does not exist")
    return parse_rows(read_row_records(path), file=str(path))


def _indexed(problem: Problem) -> Problem:
    """A problem of a Python list placed by index: `line 3: id` becomes `tasks[2]: id`."""
    if problem.file != LIST_SOURCE or problem.field is None:
        return problem
    match = _POSITION.match(problem.field)
    if match is None:
        return problem
    index = int(match[1]) - 1
    return Problem(f"{LIST_SOURCE}[{index}]", match[2].removeprefix(": ") or None, problem.message)
