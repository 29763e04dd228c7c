"""The rows of a data benchmark (seed 002's JSONL, seed 004's Shape A): reading and checking them.

Each row becomes a trial, named by its id, so a row is checked as strictly as a task directory:
every problem of every row is reported at once, each naming the file, the line and the field, so
that a dataset of ten thousand rows is fixed in one round rather than one row per run.

A row's fields (seed 002, "Benchmark Data Format"), each under any one of its aliases:

- `id` (`task_id`): a string or an integer, unique in the file, usable as one directory name
  (the row's trials are `<id>__<attempt>` directories); an integer becomes its decimal string.
- `question` (`query`, `input`): a string, what was asked (results.jsonl's `question`).
- `answer` (`ground_truth`, `expected`): the ground truth, any JSON value; optional.
- `kwargs`: an object of parameters for the agent's tools; optional.

A field given under two aliases with different values is an error (which one was meant?); with
the same value it is harmless. A null value counts as absent, here and in templates.

What the agent is shown, `instruction`, comes from seed 004's sources in priority order: the
dataset's instruction template rendered with the row, else the row's value of the dataset's
`instruction_field` (a string), else the question. The question is required only when it is the
instruction: with a template or an `instruction_field`, a row without one takes the
`instruction_field` value (else the rendered instruction) as its question, so that results.jsonl
still says what was asked.

A template sees the row as written plus the canonical names (`id`, `question`, `answer`) of
fields written under an alias, so `{{question}}` works for a row that says `query`.

`metadata` is seed 004's side channel to the verifier: the row as written, or only the fields
`metadata_fields` names, plus `ground_truth` (the answer) whenever there is an answer, which is
where a seed 004 verifier looks for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.errors import InvalidInput, Problem
from rollout.api.layout import check_component
from rollout.api.rowtemplate import placeholders, render_row

ROW_ALIASES: Mapping[str, tuple[str, ...]] = {
    "id": ("id", "task_id"),
    "question": ("question", "query", "input"),
    "answer": ("answer", "ground_truth", "expected"),
    "kwargs": ("kwargs",),
}
"""Each canonical field of a row and the keys it may be written under, preferred first."""

GROUND_TRUTH = "ground_truth"
"""The metadata key a seed 004 verifier reads the answer from."""

ROW_SUFFIXES = (".jsonl", ".json")


@dataclass(frozen=True, slots=True)
class DataRow:
    """One checked row: a trial's worth of data."""

    id: str
    """Unique in its file and safe as one directory name."""
    question: str
    instruction: str
    """What the agent is shown (template, else instruction_field, else the question)."""
    answer: Any | None
    """The ground truth; None when the row has none."""
    kwargs: dict[str, Any]
    metadata: dict[str, Any]
    """The row as written (or its `metadata_fields`), plus `ground_truth` when there is one."""
    line: int
    """1-based line in a .jsonl file, or 1-based position in a .json list."""


def read_row_records(path: Path) -> list[tuple[int, Any]]:
    """The JSON values of a rows file with their line (.jsonl) or position (.json), unchecked.

    A .jsonl file holds one JSON value per line, blank lines skipped; a .json file holds a list.
    Raises InvalidInput naming the file and the line for every line that is not JSON, for text
    that is not UTF-8, or a .json file that is not a list."""
    if path.suffix not in ROW_SUFFIXES:
        raise InvalidInput.one(path, None, "a rows file is a .jsonl or a .json file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        bad_line = data[: err.start].count(b"\n") + 1
        where = f"line {bad_line}"
        raise InvalidInput.one(path, where, f"not UTF-8 text ({err.reason})") from None
    if path.suffix == ".json":
        return _json_list(path, text)
    records: list[tuple[int, Any]] = []
    problems: list[Problem] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            problems.append(
                Problem(str(path), f"line {number}", f"not JSON: {err.msg} (column {err.colno})")
            )
    if problems:
        raise InvalidInput(problems)
    return records


def _json_list(path: Path, text: str) -> list[tuple[int, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}"
        raise InvalidInput.one(path, where, f"not JSON: {err.msg} (column {err.colno})") from None
    if not isinstance(data, list):
        found = _kind(data)
        raise InvalidInput.one(
            path, None, f"a .json rows file holds a list of row objects, and this holds {found}"
        )
    return list(enumerate(data, start=1))


def parse_rows(
    records: Iterable[tuple[int, Any]],
    *,
    file: str,
    template: str | None = None,
    instruction_field: str | None = None,
    metadata_fields: Sequence[str] | None = None,
    template_file: str = "the instruction template",
    config_file: str | None = None,
) -> list[DataRow]:
    """Check every record as a row (see the module's rules) and return the rows in file order.

    Raises InvalidInput with every problem found: each names `file` and `line N: <field>` (`row
    N` for a .json list). `template_file` and `config_file` (dataset.toml) name where the
    template and `instruction_field`/`metadata_fields` came from in the messages; a
    `metadata_fields` entry that no row has is a problem of `config_file` (else of `file`)."""
    unit = "row" if file.endswith(".json") else "line"
    config = Path(config_file).name if config_file else "dataset.toml"  # in prose: its name
    problems: list[Problem] = []
    rows: list[DataRow] = []
    first_line: dict[str, int] = {}
    seen_keys: set[str] = set()
    any_object = False
    for number, record in records:
        where = f"{unit} {number}"
        if not isinstance(record, dict):
            message = f"a row is a JSON object, and this is {_kind(record)}"
            problems.append(Problem(file, where, message))
            continue
        any_object = True
        seen_keys.update(record)
        ctx = _Context(file, where, template, instruction_field, template_file, config)
        row_id, row = _row(record, number, ctx, metadata_fields, problems)
        if row_id is None:
            continue
        first = first_line.setdefault(row_id, number)
        if first != number:
            message = (
                f"duplicate id {row_id!r}: {unit} {first} has it too (a row's id names its "
                "trials, so it must be unique)"
            )
            problems.append(ctx.problem("id", message))
        elif row is not None:
            rows.append(row)
    if metadata_fields is not None and any_object:
        for name in dict.fromkeys(metadata_fields):
            if name not in seen_keys:
                message = f"names {name!r}, which no row of {file} has"
                problems.append(Problem(config_file or file, "metadata_fields", message))
    if problems:
        raise InvalidInput(problems)
    return rows


@dataclass(frozen=True)
class _Context:
    """Where a row is, and the dataset's instruction sources, for messages."""

    file: str
    where: str
    template: str | None
    instruction_field: str | None
    template_file: str
    config_file: str

    def problem(self, field: str, message: str) -> Problem:
        return Problem(self.file, f"{self.where}: {field}", message)


def _row(
    record: dict[str, Any],
    number: int,
    ctx: _Context,
    metadata_fields: Sequence[str] | None,
    problems: list[Problem],
) -> tuple[str | None, DataRow | None]:
    """The record's id (when usable, for the duplicate check) and the row, which is None when
    the record has problems (added to `problems`)."""
    before = len(problems)
    fields = {name: _field(record, name, ctx, problems) for name in ROW_ALIASES}
    row_id = _row_id(fields["id"], ctx, problems)
    kwargs = fields["kwargs"]
    if kwargs is not None and not isinstance(kwargs, dict):
        problems.append(ctx.problem("kwargs", f"must be an object, found {_kind(kwargs)}"))
    question = fields["question"]
    if question is not None and not isinstance(question, str):
        message = f"must be a string, found {_kind(question)}"
        problems.append(ctx.problem(_written_as(record, "question"), message))
        question = None
    instruction = _instruction(record, fields, ctx, problems)
    if fields["question"] is None:
        if ctx.template is None and ctx.instruction_field is None:
            message = (
                "missing: a row needs its question (`question`, `query` or `input`), which is "
                "what the agent is shown"
            )
            problems.append(ctx.problem("question", message))
        own = record.get(ctx.instruction_field) if ctx.instruction_field else None
        question = own if isinstance(own, str) else instruction
    if len(problems) > before or row_id is None or question is None or instruction is None:
        return row_id, None
    answer = fields["answer"]
    row = DataRow(
        id=row_id,
        question=question,
        instruction=instruction,
        answer=answer,
        kwargs=dict(kwargs or {}),
        metadata=_metadata(record, answer, metadata_fields),
        line=number,
    )
    return row_id, row


def _field(
    record: Mapping[str, Any], name: str, ctx: _Context, problems: list[Problem]
) -> Any | None:
    """The row's value of canonical field `name` under whichever alias it is written."""
    given = [(key, record[key]) for key in ROW_ALIASES[name] if record.get(key) is not None]
    if not given:
        return None
    key, value = given[0]
    for other, other_value in given[1:]:
        if other_value != value:
            problems.append(
                ctx.problem(
                    name,
                    f"given twice with different values, as {key!r} ({_short(value)}) and as "
                    f"{other!r} ({_short(other_value)}): keep one",
                )
            )
            break
    return value


def _row_id(value: Any, ctx: _Context, problems: list[Problem]) -> str | None:
    if value is None:
        problems.append(ctx.problem("id", "missing: a row needs an `id` (or `task_id`)"))
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        problems.append(ctx.problem("id", f"must be a string or an integer, found {_kind(value)}"))
        return None
    row_id = str(value)
    try:
        check_component(row_id, "id")
    except ValueError as err:
        problems.append(ctx.problem("id", f"{err} (a row's id names its trial directories)"))
        return None
    return row_id


def _instruction(
    record: Mapping[str, Any],
    fields: Mapping[str, Any],
    ctx: _Context,
    problems: list[Problem],
) -> str | None:
    """What the agent is shown: template, else instruction_field, else the question."""
    if ctx.template is not None:
        view = {k: v for k, v in record.items() if v is not None}
        view |= {k: v for k, v in fields.items() if v is not None and k not in view}
        missing = [name for name in placeholders(ctx.template) if name not in view]
        for name in missing:
            problems.append(ctx.problem(name, f"missing: {ctx.template_file} uses {{{{{name}}}}}"))
        if missing:
            return None
        return _not_empty(
            render_row(ctx.template, view),
            ctx,
            "instruction",
            problems,
            f"{ctx.template_file} renders to nothing for this row",
        )
    if ctx.instruction_field is not None:
        field = ctx.instruction_field
        value = record.get(field)
        if value is None:
            problems.append(
                ctx.problem(field, f"missing: {ctx.config_file}'s instruction_field names it")
            )
            return None
        if not isinstance(value, str):
            problems.append(
                ctx.problem(
                    field,
                    f"must be a string (the instruction, as {ctx.config_file}'s "
                    f"instruction_field says), found {_kind(value)}",
                )
            )
            return None
        return _not_empty(
            value, ctx, field, problems, "is empty: the agent would get no instruction"
        )
    question = fields["question"]
    if not isinstance(question, str):
        return None  # missing or of the wrong type: reported as the question's problem
    return _not_empty(
        question,
        ctx,
        _written_as(record, "question"),
        problems,
        "is empty: the agent would get no instruction",
    )


def _not_empty(
    text: str, ctx: _Context, field: str, problems: list[Problem], message: str
) -> str | None:
    if text.strip():
        return text
    problems.append(ctx.problem(field, message))
    return None


def _metadata(
    record: Mapping[str, Any], answer: Any | None, fields: Sequence[str] | None
) -> dict[str, Any]:
    kept = dict(record) if fields is None else {k: record[k] for k in fields if k in record}
    if answer is not None:
        kept[GROUND_TRUTH] = answer
    return kept


def agent_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What an agent may see of a row's metadata (seed 003's `task.metadata`): seed 002's "any
    other fields", so neither the ground truth (under any of its keys) nor the id, question
    or kwargs, which the agent gets otherwise."""
    hidden = {GROUND_TRUTH, *(key for keys in ROW_ALIASES.values() for key in keys)}
    return {key: value for key, value in metadata.items() if key not in hidden}


def _written_as(record: Mapping[str, Any], name: str) -> str:
    """The key the row uses for canonical field `name` (the canonical name when absent)."""
    return next((k for k in ROW_ALIASES[name] if record.get(k) is not None), name)


def _kind(value: Any) -> str:
    """A JSON value's kind in the user's terms: `a string`, `a list`, `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."
