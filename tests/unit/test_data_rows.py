"""Data rows (seed 002's JSONL, seed 004's Shape A): fields and aliases, metadata, instruction
sources, and every malformed row reported with its file, line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.api.errors import InvalidInput, Problem
from rollout.api.rows import GROUND_TRUTH, ROW_ALIASES, DataRow, parse_rows, read_row_records

FILE = "/data/test.jsonl"


def rows(*records: Any, **options: Any) -> list[DataRow]:
    """parse_rows of records numbered from line 1."""
    return parse_rows(list(enumerate(records, start=1)), file=FILE, **options)


def problems(*records: Any, **options: Any) -> list[Problem]:
    with pytest.raises(InvalidInput) as caught:
        rows(*records, **options)
    return caught.value.problems


def write_jsonl(path: Path, *lines: str) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


# --- Fields and aliases -----------------------------------------------------------------------


def test_the_standard_row() -> None:
    (row,) = rows({"id": "task_001", "question": "Capital of France?", "answer": "Paris"})
    assert row == DataRow(
        id="task_001",
        question="Capital of France?",
        instruction="Capital of France?",
        answer="Paris",
        kwargs={},
        metadata={
            "id": "task_001",
            "question": "Capital of France?",
            "answer": "Paris",
            GROUND_TRUTH: "Paris",
        },
        line=1,
    )


def test_the_aliases_documented() -> None:
    assert ROW_ALIASES["id"] == ("id", "task_id")
    assert ROW_ALIASES["question"] == ("question", "query", "input")
    assert ROW_ALIASES["answer"] == ("answer", "ground_truth", "expected")
    assert ROW_ALIASES["kwargs"] == ("kwargs",)


@pytest.mark.parametrize("id_key", ["id", "task_id"])
@pytest.mark.parametrize("question_key", ["question", "query", "input"])
@pytest.mark.parametrize("answer_key", ["answer", "ground_truth", "expected"])
def test_every_alias(id_key: str, question_key: str, answer_key: str) -> None:
    (row,) = rows({id_key: "r1", question_key: "Q?", answer_key: "A"})
    assert (row.id, row.question, row.instruction, row.answer) == ("r1", "Q?", "Q?", "A")
    assert row.metadata[GROUND_TRUTH] == "A"
    assert row.metadata[question_key] == "Q?"


def test_an_integer_id_becomes_its_decimal_string() -> None:
    (row,) = rows({"task_id": 7, "query": "q"})
    assert row.id == "7"


def test_the_answer_is_optional_and_may_be_any_json_value() -> None:
    no_answer, numeric, listed = rows(
        {"id": "a", "question": "q"},
        {"id": "b", "question": "q", "expected": 405},
        {"id": "c", "question": "q", "answer": ["x", "y"]},
    )
    assert no_answer.answer is None
    assert GROUND_TRUTH not in no_answer.metadata
    assert numeric.answer == 405
    assert numeric.metadata[GROUND_TRUTH] == 405
    assert listed.answer == ["x", "y"]


def test_kwargs_and_every_other_field_reach_the_metadata() -> None:
    record = {
        "id": "doc_001",
        "question": "Deadline?",
        "answer": "March 15, 2025",
        "kwargs": {"seed_path": "/data/docs/project_plan.pdf"},
        "difficulty": "easy",
        "choices": ["a", "b"],
    }
    (row,) = rows(record)
    assert row.kwargs == {"seed_path": "/data/docs/project_plan.pdf"}
    assert row.metadata == {**record, GROUND_TRUTH: "March 15, 2025"}


def test_metadata_fields_narrow_the_metadata_but_keep_the_ground_truth() -> None:
    first, second = rows(
        {"id": "1", "question": "q", "answer": "4", "difficulty": "easy", "source": "x"},
        {"id": "2", "question": "q", "choices": ["a"]},
        metadata_fields=["difficulty", "choices"],
    )
    assert first.metadata == {"difficulty": "easy", GROUND_TRUTH: "4"}
    assert second.metadata == {"choices": ["a"]}


def test_metadata_fields_naming_a_field_no_row_has() -> None:
    found = problems(
        {"id": "1", "question": "q", "difficulty": "easy"},
        metadata_fields=["difficulty", "dificulty"],
        config_file="/ds/dataset.toml",
    )
    assert found == [
        Problem(
            "/ds/dataset.toml", "metadata_fields", f"names 'dificulty', which no row of {FILE} has"
        )
    ]


def test_the_same_value_under_two_aliases_is_harmless() -> None:
    (row,) = rows({"id": "1", "task_id": "1", "question": "q", "answer": 2, "ground_truth": 2})
    assert (row.id, row.answer) == ("1", 2)


def test_null_counts_as_absent() -> None:
    (row,) = rows({"id": None, "task_id": "t", "question": "q", "answer": None, "kwargs": None})
    assert (row.id, row.answer, row.kwargs) == ("t", None, {})
    assert GROUND_TRUTH not in row.metadata


def test_rows_keep_their_lines_and_order() -> None:
    parsed = parse_rows(
        [(1, {"id": "b", "question": "q"}), (4, {"id": "a", "question": "q"})], file=FILE
    )
    assert [(r.id, r.line) for r in parsed] == [("b", 1), ("a", 4)]


# --- Instruction sources ----------------------------------------------------------------------


def test_the_template_comes_first() -> None:
    (row,) = rows(
        {"id": "1", "query": "Which?", "prompt": "unused", "choices": ["x", "y"]},
        template="{{question}}\n{{choices}}",
        instruction_field="prompt",
    )
    assert row.instruction == "Which?\n(A) x\n(B) y"
    assert row.question == "Which?"


def test_the_instruction_field_comes_next() -> None:
    (row,) = rows(
        {"id": "1", "question": "short", "prompt": "Solve: 1+1"}, instruction_field="prompt"
    )
    assert (row.instruction, row.question) == ("Solve: 1+1", "short")


def test_a_row_without_question_takes_the_instruction_field_or_the_rendered_template() -> None:
    (by_field,) = rows({"id": "1", "problem": "Solve x"}, instruction_field="problem")
    assert (by_field.question, by_field.instruction) == ("Solve x", "Solve x")
    (by_template,) = rows({"id": "1", "problem": "Solve x"}, template="Task: {{ problem }}")
    assert (by_template.question, by_template.instruction) == ("Task: Solve x", "Task: Solve x")


def test_a_template_sees_the_canonical_names_of_aliased_fields() -> None:
    (row,) = rows({"task_id": 3, "input": "q", "expected": "a"}, template="{{id}}|{{question}}")
    assert row.instruction == "3|q"


# --- Malformed rows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "field", "message"),
    [
        (["not", "an", "object"], None, "a row is a JSON object, and this is a list"),
        ("text", None, "a row is a JSON object, and this is a string"),
        ({"question": "q"}, "id", "missing: a row needs an `id` (or `task_id`)"),
        ({"id": True, "question": "q"}, "id", "must be a string or an integer, found a boolean"),
        ({"id": 1.5, "question": "q"}, "id", "must be a string or an integer, found a number"),
        ({"id": ["x"], "question": "q"}, "id", "must be a string or an integer, found a list"),
        ({"id": "1"}, "question", "missing: a row needs its question"),
        ({"id": "1", "question": 5}, "question", "must be a string, found a number"),
        ({"id": "1", "query": {"a": 1}}, "query", "must be a string, found an object"),
        ({"id": "1", "question": "  "}, "question", "is empty: the agent would get no instruction"),
        ({"id": "1", "question": "q", "kwargs": [1]}, "kwargs", "must be an object, found a list"),
        (
            {"id": "1", "question": "q", "answer": "a", "expected": "b"},
            "answer",
            "given twice with different values, as 'answer' (\"a\") and as 'expected' (\"b\")",
        ),
        (
            {"id": "1", "task_id": "2", "question": "q"},
            "id",
            "given twice with different values, as 'id' (\"1\") and as 'task_id' (\"2\")",
        ),
        (
            {"id": "1", "question": "q", "query": "other"},
            "question",
            "given twice with different values",
        ),
    ],
)
def test_a_malformed_row_names_its_file_line_and_field(
    record: Any, field: str | None, message: str
) -> None:
    good = {"id": "ok", "question": "fine"}
    (problem,) = problems(good, record)
    assert problem.file == FILE
    assert problem.field == ("line 2" if field is None else f"line 2: {field}")
    assert message in problem.message


@pytest.mark.parametrize(
    ("row_id", "said"),
    [
        ("", "cannot be used as a directory name"),
        (".", "cannot be used as a directory name"),
        ("..", "cannot be used as a directory name"),
        ("a/b", "contains a slash"),
        ("a\\b", "contains a backslash"),
        ("a\0b", "contains a NUL character"),
    ],
)
def test_an_id_that_cannot_be_a_directory_name(row_id: str, said: str) -> None:
    (problem,) = problems({"id": row_id, "question": "q"})
    assert (problem.file, problem.field) == (FILE, "line 1: id")
    assert said in problem.message
    assert "trial directories" in problem.message


def test_a_duplicate_id_names_both_lines() -> None:
    found = problems(
        {"id": "a", "question": "q"},
        {"id": "b", "question": "q"},
        {"id": "a", "question": "again"},
        {"task_id": 1, "question": "q"},
        {"id": "1", "question": "q"},
    )
    assert [(p.field, p.message) for p in found] == [
        (
            "line 3: id",
            "duplicate id 'a': line 1 has it too (a row's id names its trials, so it "
            "must be unique)",
        ),
        (
            "line 5: id",
            "duplicate id '1': line 4 has it too (a row's id names its trials, so it "
            "must be unique)",
        ),
    ]


def test_a_missing_instruction_field() -> None:
    found = problems(
        {"id": "1", "question": "q", "prompt": "p"},
        {"id": "2", "question": "q"},
        {"id": "3", "question": "q", "prompt": 4},
        instruction_field="prompt",
        config_file="/ds/dataset.toml",
    )
    assert [(p.field, p.message) for p in found] == [
        ("line 2: prompt", "missing: dataset.toml's instruction_field names it"),
        (
            "line 3: prompt",
            "must be a string (the instruction, as dataset.toml's instruction_field says), "
            "found a number",
        ),
    ]


def test_a_template_placeholder_the_row_lacks() -> None:
    found = problems(
        {"id": "1", "question": "q", "choices": ["a"]},
        {"id": "2", "question": "q", "choices": None},
        template="{{question}} {{ choices }} {{extra}}",
    )
    assert [(p.field, p.message) for p in found] == [
        ("line 1: extra", "missing: the instruction template uses {{extra}}"),
        ("line 2: choices", "missing: the instruction template uses {{choices}}"),
        ("line 2: extra", "missing: the instruction template uses {{extra}}"),
    ]


def test_every_problem_of_every_row_is_reported_at_once() -> None:
    found = problems(
        {"question": "q", "kwargs": 3},
        7,
        {"id": "x/y"},
        {"id": "ok", "question": "q"},
    )
    assert [p.field for p in found] == [
        "line 1: id",
        "line 1: kwargs",
        "line 2",
        "line 3: id",
        "line 3: question",
    ]


def test_rows_of_a_json_list_are_named_by_position() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_rows([(1, {"id": "a", "question": "q"}), (2, {"id": "a"})], file="/d/rows.json")
    assert [p.field for p in caught.value.problems] == ["row 2: question", "row 2: id"]


# --- Reading files ----------------------------------------------------------------------------


def test_a_jsonl_file_skips_blank_lines_and_keeps_line_numbers(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "test.jsonl", '{"id": 1}', "", "   ", '{"id": 2}', "[3]")
    assert read_row_records(path) == [(1, {"id": 1}), (4, {"id": 2}), (5, [3])]


def test_a_jsonl_file_with_windows_line_ends_and_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": 1}\r\n{"id": 2}\r\n')
    assert read_row_records(path) == [(1, {"id": 1}), (2, {"id": 2})]


def test_every_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "test.jsonl", '{"id": 1}', "{oops", '{"id": 3}', "'single'")
    with pytest.raises(InvalidInput) as caught:
        read_row_records(path)
    assert [(p.file, p.field) for p in caught.value.problems] == [
        (str(path), "line 2"),
        (str(path), "line 4"),
    ]
    assert all(p.message.startswith("not JSON: ") for p in caught.value.problems)
    assert "(column 2)" in caught.value.problems[0].message


def test_text_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "test.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": "\xff"}\n')
    with pytest.raises(InvalidInput) as caught:
        read_row_records(path)
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == (str(path), "line 2")
    assert problem.message.startswith("not UTF-8 text")


def test_a_json_file_holds_a_list(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"id": "a"}, {"id": "b"}]))
    assert read_row_records(path) == [(1, {"id": "a"}), (2, {"id": "b"})]
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(InvalidInput) as caught:
        read_row_records(path)
    assert str(caught.value) == (
        f"{path}: a .json rows file holds a list of row objects, and this holds an object"
    )
    path.write_text('[\n  {"id": "a"},\n  {"id": }\n]\n')
    with pytest.raises(InvalidInput) as caught:
        read_row_records(path)
    (problem,) = caught.value.problems
    assert (problem.field, problem.message.split(":")[0]) == ("line 3", "not JSON")


def test_only_jsonl_and_json_files_hold_rows(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,question\n")
    with pytest.raises(InvalidInput, match=r"a rows file is a \.jsonl or a \.json file"):
        read_row_records(path)
    with pytest.raises(InvalidInput, match="cannot be read"):
        read_row_records(tmp_path / "absent.jsonl")
