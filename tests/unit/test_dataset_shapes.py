"""What a job's `path` may name (seed 004): Shape A rows, bare row files, task directories, a
single task, `[[tasks]]`; dataset.toml's defaults and shared verifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.api.dataset import Dataset, load_dataset_path, load_local_dataset
from rollout.api.errors import ErrorType, InvalidInput, Problem
from rollout.api.rows import GROUND_TRUTH
from rollout.api.task import TaskConfig
from rollout.api.taskdir import BrokenTask, Task, load_task, merge_task_defaults
from rollout.api.verifiers import Metric, VerifierChoice, VerifierSource

DEFAULT = VerifierChoice.of_metric(Metric.EXACT_MATCH, VerifierSource.DEFAULT)


def make_task(root: Path, name: str, task_toml: str = "") -> Path:
    """A small valid task directory."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text(f"Do {name}.\n")
    (task / "task.toml").write_text(task_toml)
    (task / "environment" / "Dockerfile").write_text("FROM alpine:3.20\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    return task


def make_rows(
    root: Path, split: str = "test", *records: dict[str, Any], suffix: str = "jsonl"
) -> Path:
    """data/<split>.<suffix> under `root` with `records` (two simple rows by default)."""
    records = records or (
        {"id": "q1", "question": "1+1?", "answer": "2"},
        {"id": "q2", "question": "2+2?", "answer": "4"},
    )
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    path = data / f"{split}.{suffix}"
    if suffix == "json":
        path.write_text(json.dumps(list(records)))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_toml(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "dataset.toml"
    path.write_text(text)
    return path


def refused(path: Path, **options: Any) -> list[Problem]:
    with pytest.raises(InvalidInput) as caught:
        load_dataset_path(path, **options)
    return caught.value.problems


def rows_of(dataset: Dataset) -> Any:
    assert dataset.rows is not None
    return dataset.rows


# --- Shape A ----------------------------------------------------------------------------------


def test_a_data_dataset(tmp_path: Path) -> None:
    root = tmp_path / "gsm8k-dir"
    write_toml(root, 'name = "gsm8k"\ncategory = "math"\n')
    data_file = make_rows(root)
    dataset = load_dataset_path(root)
    assert (dataset.name, dataset.tasks, dataset.problems()) == ("gsm8k", [], [])
    assert dataset.source == f"directory {root}"
    assert dataset.config.category == "math"
    rows = rows_of(dataset)
    assert [r.id for r in rows.rows] == ["q1", "q2"]
    assert rows.rows[0].metadata[GROUND_TRUTH] == "2"
    assert (rows.split, rows.data_file, rows.root) == ("test", data_file, root)
    assert rows.config == TaskConfig()
    assert rows.verifier == DEFAULT


def test_a_data_dataset_needs_no_dataset_toml_and_may_use_json(tmp_path: Path) -> None:
    root = tmp_path / "mcq"
    make_rows(root, "validation", {"task_id": 1, "query": "q"}, suffix="json")
    dataset = load_dataset_path(root)
    assert dataset.name == "mcq"
    rows = rows_of(dataset)
    assert rows.split == "validation"
    assert [(r.id, r.line) for r in rows.rows] == [("1", 1)]


@pytest.mark.parametrize(
    ("toml", "given", "chosen"),
    [
        ("", "train", "train"),
        ('split = "train"\n', None, "train"),
        ('default_split = "dev"\n', None, "dev"),
        ('split = "train"\n', "dev", "dev"),
        ('split = "dev"\ndefault_split = "dev"\n', None, "dev"),
        ("", None, "test"),
    ],
    ids=["asked", "split", "default_split", "asked wins", "both agreeing", "test"],
)
def test_which_split(tmp_path: Path, toml: str, given: str | None, chosen: str) -> None:
    write_toml(tmp_path, toml)
    for split in ("dev", "test", "train"):
        make_rows(tmp_path, split, {"id": split, "question": "q"})
    rows = rows_of(load_dataset_path(tmp_path, split=given))
    assert rows.split == chosen
    assert [r.id for r in rows.rows] == [chosen]
    assert rows.data_file == tmp_path / "data" / f"{chosen}.jsonl"


def test_the_only_split_is_taken(tmp_path: Path) -> None:
    make_rows(tmp_path, "train")
    (tmp_path / "data" / "README.md").write_text("not rows")
    assert rows_of(load_dataset_path(tmp_path)).split == "train"


def test_an_unknown_split_names_the_ones_there_are(tmp_path: Path) -> None:
    make_rows(tmp_path, "dev")
    make_rows(tmp_path, "train")
    data = str(tmp_path / "data")
    assert refused(tmp_path, split="tset") == [
        Problem(
            data,
            None,
            "has no split 'tset' (the split asked for): no tset.jsonl or tset.json; its splits: "
            "dev, train",
        )
    ]
    write_toml(tmp_path, 'split = "test"\n')
    (problem,) = refused(tmp_path)
    assert "has no split 'test' (dataset.toml's split)" in problem.message
    write_toml(tmp_path, "")
    assert refused(tmp_path) == [
        Problem(
            data,
            None,
            "holds several splits (dev, train) and none is 'test': say which to run (`split` in "
            "dataset.toml, or the job's split)",
        )
    ]


def test_split_and_default_split_must_agree(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'split = "a"\ndefault_split = "b"\n')
    make_rows(tmp_path, "a")
    (problem,) = refused(tmp_path)
    assert (problem.file, problem.field) == (str(toml), "default_split")
    assert "disagrees with split = 'a'" in problem.message


def test_one_split_in_two_files(tmp_path: Path) -> None:
    make_rows(tmp_path, "test")
    make_rows(tmp_path, "test", suffix="json")
    (problem,) = refused(tmp_path)
    assert problem.message == "holds split 'test' twice, as test.json and test.jsonl: keep one"


def test_the_template_and_the_instruction_field(tmp_path: Path) -> None:
    write_toml(tmp_path, 'instruction_field = "prompt"\n')
    record = {"id": "1", "question": "Which?", "prompt": "Say which.", "choices": ["a", "b"]}
    make_rows(tmp_path, "test", record)
    (row,) = rows_of(load_dataset_path(tmp_path)).rows
    assert row.instruction == "Say which."
    (tmp_path / "instruction.md.tpl").write_text("{{ question }}\n{{choices}}\n")
    (row,) = rows_of(load_dataset_path(tmp_path)).rows
    assert row.instruction == "Which?\n(A) a\n(B) b\n"


def test_template_problems_name_the_row(tmp_path: Path) -> None:
    data_file = make_rows(tmp_path, "test", {"id": "1", "question": "q"})
    (tmp_path / "instruction.md.tpl").write_text("{{question}} {{choices}}")
    assert refused(tmp_path) == [
        Problem(str(data_file), "line 1: choices", "missing: instruction.md.tpl uses {{choices}}")
    ]
    (tmp_path / "instruction.md.tpl").write_text(" \n")
    assert refused(tmp_path) == [
        Problem(
            str(tmp_path / "instruction.md.tpl"),
            None,
            "is empty: the agent would get no instruction",
        )
    ]


def test_metadata_fields_from_dataset_toml(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'metadata_fields = ["level", "levle"]\n')
    make_rows(tmp_path, "test", {"id": "1", "question": "q", "answer": 3, "level": 2})
    assert refused(tmp_path) == [
        Problem(
            str(toml),
            "metadata_fields",
            f"names 'levle', which no row of {tmp_path / 'data' / 'test.jsonl'} has",
        )
    ]
    write_toml(tmp_path, 'metadata_fields = ["level"]\n')
    (row,) = rows_of(load_dataset_path(tmp_path)).rows
    assert row.metadata == {"level": 2, GROUND_TRUTH: 3}


def test_the_dataset_toml_defaults_are_the_rows_config(tmp_path: Path) -> None:
    write_toml(
        tmp_path,
        '[agent]\ntimeout_sec = 30\n[verifier]\nmetric = "numeric_match"\ntimeout_sec = 5\n'
        '[environment]\ndocker_image = "python:3.12-slim"\ncpus = 0.5\n',
    )
    make_rows(tmp_path)
    rows = rows_of(load_dataset_path(tmp_path))
    assert rows.config.agent.timeout_sec == 30
    assert rows.config.agent.install_timeout_sec == 300  # the default where nothing is said
    assert rows.config.verifier.timeout_sec == 5
    assert rows.config.environment.docker_image == "python:3.12-slim"
    assert rows.config.environment.cpus == "500m"
    assert rows.config.verifier.model_extra == {}  # `metric` declares; it configures nothing
    assert rows.verifier == VerifierChoice.of_metric(Metric.NUMERIC_MATCH, VerifierSource.DATASET)


def test_every_problem_of_a_data_dataset_at_once(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, '[agent]\ntimeout_sec = -1\n[verifier]\nmetric = "exact"\n')
    data_file = make_rows(tmp_path, "test", {"id": "1"})
    found = refused(tmp_path)
    assert [(p.file, p.field) for p in found] == [
        (str(toml), "agent.timeout_sec"),
        (str(toml), "verifier.metric"),
        (str(data_file), "line 1: question"),
    ]


def test_an_empty_rows_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.jsonl").write_text("\n\n")
    assert refused(tmp_path) == [
        Problem(str(data / "test.jsonl"), None, "has no rows: a data dataset needs some")
    ]


def test_rows_beside_task_directories_or_listed_tasks(tmp_path: Path) -> None:
    make_rows(tmp_path)
    make_task(tmp_path, "stray")
    (problem,) = refused(tmp_path)
    assert problem.file == str(tmp_path)
    assert "holds rows in data/ and task directories (stray)" in problem.message
    toml = write_toml(tmp_path / "other", '[[tasks]]\npath = "t"\n')
    make_rows(tmp_path / "other")
    (problem,) = refused(tmp_path / "other")
    assert (problem.file, problem.field) == (str(toml), "tasks")


# --- The shared verifier ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "files", "verifier"),
    [
        (
            '[verifier]\nmetric = "f1_score"\n',
            [],
            VerifierChoice.of_metric("f1_score", VerifierSource.DATASET),
        ),
        (
            '[verifier]\npython = "verify/score.py"\n',
            ["verify/score.py"],
            VerifierChoice.of_python("verify/score.py", VerifierSource.DATASET),
        ),
        (
            '[verifier]\nmetric = "contains_answer"\n',
            ["tests/evaluate.py"],
            VerifierChoice.of_metric("contains_answer", VerifierSource.DATASET),
        ),
        (
            "",
            ["tests/evaluate.py"],
            VerifierChoice.of_python("tests/evaluate.py", VerifierSource.FILES),
        ),
        ("", [], DEFAULT),
        ("[verifier]\ntimeout_sec = 9\n", ["tests/other.py"], DEFAULT),
    ],
    ids=["metric", "python", "declared over files", "files", "default", "no declaration"],
)
def test_verifier_resolution(
    tmp_path: Path, toml: str, files: list[str], verifier: VerifierChoice
) -> None:
    write_toml(tmp_path, toml)
    make_rows(tmp_path)
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("def evaluate(metadata, trajectory):\n    return 1.0\n")
    assert rows_of(load_dataset_path(tmp_path)).verifier == verifier


@pytest.mark.parametrize(
    ("toml", "field", "message"),
    [
        (
            '[verifier]\nmetric = "exact_match"\npython = "v.py"\n',
            "verifier",
            "declares both `metric` and `python`: a dataset shares one verifier, keep one",
        ),
        (
            '[verifier]\nmetric = "accuracy"\n',
            "verifier.metric",
            "unknown metric 'accuracy'; the metrics are: exact_match, f1_score, contains_answer, "
            "numeric_match, similarity, llm_judgement",
        ),
        ('[verifier]\npython = "missing.py"\n', "verifier.python", "'missing.py' is not a file"),
        (
            '[verifier]\npython = "../outside.py"\n',
            "verifier.python",
            "must be a relative path to a file inside the dataset",
        ),
        (
            '[verifier]\npython = "/abs/v.py"\n',
            "verifier.python",
            "must be a relative path to a file inside the dataset",
        ),
        ("[verifier]\npython = 3\n", "verifier.python", "must be the path of a Python file"),
    ],
    ids=["both", "unknown metric", "missing file", "outside", "absolute", "not a path"],
)
def test_a_bad_verifier_declaration(tmp_path: Path, toml: str, field: str, message: str) -> None:
    path = write_toml(tmp_path, toml)
    (tmp_path / "v.py").write_text("")
    (tmp_path.parent / "outside.py").write_text("")
    make_rows(tmp_path)
    (problem,) = refused(tmp_path)
    assert (problem.file, problem.field) == (str(path), field)
    assert message in problem.message


def test_a_shell_verifier_cannot_score_rows(tmp_path: Path) -> None:
    make_rows(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (problem,) = refused(tmp_path)
    assert problem.file == str(tmp_path / "tests" / "test.sh")
    assert "declare [verifier] metric or python in dataset.toml" in problem.message
    write_toml(tmp_path, '[verifier]\nmetric = "exact_match"\n')
    assert rows_of(load_dataset_path(tmp_path)).verifier.source is VerifierSource.DATASET


# --- Bare files -------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["jsonl", "json"])
def test_a_bare_rows_file(tmp_path: Path, suffix: str) -> None:
    path = make_rows(tmp_path, "my_bench", suffix=suffix)
    (tmp_path / "data" / "tests").mkdir()
    (tmp_path / "data" / "tests" / "evaluate.py").write_text("")  # beside it: not looked at
    dataset = load_dataset_path(path)
    assert (dataset.name, dataset.tasks, dataset.source) == ("my_bench", [], f"file {path}")
    rows = rows_of(dataset)
    assert (rows.split, rows.data_file, rows.root) == ("my_bench", path, path.parent)
    assert [r.id for r in rows.rows] == ["q1", "q2"]
    assert (rows.config, rows.verifier) == (TaskConfig(), DEFAULT)
    assert load_dataset_path(path, split="my_bench").name == "my_bench"


def test_a_bare_file_has_no_other_split(tmp_path: Path) -> None:
    path = make_rows(tmp_path, "bench")
    (problem,) = refused(path, split="train")
    assert problem.file == str(path)
    assert "is a file of rows, which has no splits to choose 'train' from" in problem.message


def test_a_bare_file_with_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text('{"id": "a", "question": "q"}\n{"id": "a", "question": "q"}\nnope\n')
    (problem,) = refused(path)
    assert (problem.file, problem.field) == (str(path), "line 3")
    path.write_text('{"id": "a", "question": "q"}\n{"id": "a", "question": "q"}\n')
    (problem,) = refused(path)
    assert (problem.file, problem.field) == (str(path), "line 2: id")


def test_what_is_no_dataset(tmp_path: Path) -> None:
    assert refused(tmp_path / "absent.jsonl") == [
        Problem(str(tmp_path / "absent.jsonl"), None, "rows file does not exist")
    ]
    assert refused(tmp_path / "absent") == [
        Problem(str(tmp_path / "absent"), None, "dataset directory does not exist")
    ]
    (tmp_path / "rows.csv").write_text("id\n")
    (problem,) = refused(tmp_path / "rows.csv")
    assert problem.message.startswith("is not a directory, nor a .jsonl or .json file")


# --- Shape B ----------------------------------------------------------------------------------


def test_a_single_task_directory_is_a_dataset_of_that_task(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "hello")
    dataset = load_dataset_path(task_dir)
    (task,) = dataset.tasks
    assert isinstance(task, Task)
    assert (dataset.name, task.name, task.path) == ("hello", "hello", task_dir)
    assert dataset.source == f"task directory {task_dir}"
    assert dataset.rows is None
    assert load_local_dataset(task_dir).tasks == dataset.tasks


def test_a_broken_single_task_is_kept(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "hello")
    (task_dir / "instruction.md").unlink()
    (task,) = load_dataset_path(task_dir).tasks
    assert isinstance(task, BrokenTask)
    assert (
        task.message == "Task 'hello' is invalid: instruction.md: missing (the agent's instruction)"
    )


def test_a_dataset_of_tasks_has_no_splits(tmp_path: Path) -> None:
    make_task(tmp_path / "ds", "a")
    (problem,) = refused(tmp_path / "ds", split="test")
    assert "is a dataset of task directories, which has no splits" in problem.message
    (problem,) = refused(tmp_path / "ds" / "a", split="test")
    assert "is a single task directory, which has no splits" in problem.message


def test_listed_tasks_in_their_order(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_toml(
        root,
        '[[tasks]]\npath = "suite/zeta"\n[[tasks]]\npath = "alpha"\nname = "first-one"\n'
        '[[tasks]]\npath = "gone"\n',
    )
    make_task(root / "suite", "zeta")
    make_task(root, "alpha")
    make_task(root, "unlisted")
    dataset = load_dataset_path(root)
    assert [t.name for t in dataset.tasks] == ["zeta", "first-one", "gone"]
    assert isinstance(dataset.tasks[0], Task)
    assert dataset.tasks[0].path == root / "suite" / "zeta"
    gone = dataset.tasks[2]
    assert isinstance(gone, BrokenTask)
    assert gone.error_type is ErrorType.TASK_NOT_FOUND


@pytest.mark.parametrize(
    ("toml", "field", "message"),
    [
        ("tasks = []\n", "tasks", "lists no tasks"),
        ('[[tasks]]\npath = "/abs"\n', "tasks[0].path", "must be a relative path to a directory"),
        ('[[tasks]]\npath = "../up"\n', "tasks[0].path", "must be a relative path to a directory"),
        ('[[tasks]]\npath = "a"\nname = "x/y"\n', "tasks[0].name", "contains a slash"),
        (
            '[[tasks]]\npath = "a"\n[[tasks]]\npath = "b/a"\n',
            "tasks[1]",
            "task name 'a' is also tasks[0]'s: their trials would collide",
        ),
    ],
    ids=["empty", "absolute", "outside", "bad name", "same name"],
)
def test_bad_listed_tasks(tmp_path: Path, toml: str, field: str, message: str) -> None:
    path = write_toml(tmp_path / "ds", toml)
    (problem,) = refused(tmp_path / "ds")
    assert (problem.file, problem.field) == (str(path), field)
    assert message in problem.message


def test_tasks_inherit_the_dataset_toml_defaults(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_toml(
        root,
        "[verifier]\ntimeout_sec = 99\n"
        "[agent]\ntimeout_sec = 30\n"
        '[environment]\nmemory = "4G"\ncpus = 2\nallow_internet = false\n'
        '[environment.env]\nSHARED = "1"\nOVERRIDDEN = "dataset"\n',
    )
    make_task(root, "plain")
    make_task(
        root,
        "own",
        "[verifier]\ntimeout_sec = 7\n[agent]\ninstall_timeout_sec = 11\n"
        '[environment]\nmemory_mb = 1024\nnetwork_mode = "public"\n'
        '[environment.env]\nOVERRIDDEN = "task"\n',
    )
    own, plain = load_dataset_path(root).tasks  # in name order
    assert isinstance(plain, Task)
    assert isinstance(own, Task)
    assert plain.config.verifier.timeout_sec == 99
    assert plain.config.agent.timeout_sec == 30
    assert (plain.config.environment.memory, plain.config.environment.cpus) == ("4G", "2")
    assert plain.config.environment.allow_internet is False
    assert plain.config.environment.env == {"SHARED": "1", "OVERRIDDEN": "dataset"}
    # task.toml wins, key by key; its memory_mb and network_mode take neither tied default.
    assert own.config.verifier.timeout_sec == 7
    assert (own.config.agent.timeout_sec, own.config.agent.install_timeout_sec) == (30, 11)
    assert own.config.environment.memory == "1024Mi"
    assert own.config.environment.allow_internet is True
    assert own.config.environment.env == {"SHARED": "1", "OVERRIDDEN": "task"}


def test_a_single_task_takes_a_dataset_toml_beside_it(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "solo")
    write_toml(task_dir, 'name = "solo-set"\n[agent]\ntimeout_sec = 12\n')
    dataset = load_dataset_path(task_dir)
    (task,) = dataset.tasks
    assert isinstance(task, Task)
    assert (dataset.name, task.name, task.config.agent.timeout_sec) == ("solo-set", "solo", 12)


def test_a_bad_default_is_the_dataset_tomls_problem_once(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    path = write_toml(root, '[agent]\ntimeout_sec = "soon"\n[environment]\ngpus = -1\n')
    make_task(root, "a")
    make_task(root, "b")
    assert [(p.file, p.field) for p in refused(root)] == [
        (str(path), "agent.timeout_sec"),
        (str(path), "environment.gpus"),
    ]


def test_a_task_toml_problem_stays_the_tasks(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write_toml(root, "[agent]\ntimeout_sec = 30\n")
    make_task(root, "bad", "[agent]\ntimeout_sec = -5\n")
    (task,) = load_dataset_path(root).tasks
    assert isinstance(task, BrokenTask)
    assert [(p.file, p.field) for p in task.problems] == [
        (str(root / "bad" / "task.toml"), "agent.timeout_sec")
    ]


def test_load_task_with_defaults(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path, "t", "[agent]\nuser = 'me'\n")
    defaults = {"agent": {"timeout_sec": 45, "user": "root"}, "verifier": {"env": {"K": "v"}}}
    task = load_task(task_dir, defaults=defaults)
    assert (task.config.agent.timeout_sec, task.config.agent.user) == (45, "me")
    assert task.config.verifier.env == {"K": "v"}
    assert load_task(task_dir).config.agent.timeout_sec == 600


def test_merge_task_defaults_leaves_its_inputs_alone() -> None:
    defaults = {"environment": {"memory": "4G", "env": {"A": "1"}}, "agent": {"x": [1]}}
    own = {"environment": {"memory_mb": 512, "env": {"B": "2"}}, "agent": {"x": [2]}}
    merged = merge_task_defaults(defaults, own)
    assert merged == {
        "environment": {"memory_mb": 512, "env": {"A": "1", "B": "2"}},
        "agent": {"x": [2]},
    }
    assert defaults == {"environment": {"memory": "4G", "env": {"A": "1"}}, "agent": {"x": [1]}}


def test_the_unknown_dataset_toml_keys_are_kept(tmp_path: Path) -> None:
    write_toml(tmp_path, 'default_sandbox = "docker"\ninstruction_field = "q"\n')
    make_rows(tmp_path, "test", {"id": "1", "q": "asked"})
    dataset = load_dataset_path(tmp_path)
    assert dataset.config.model_extra == {"default_sandbox": "docker"}
    (row,) = rows_of(dataset).rows
    assert (row.question, row.instruction) == ("asked", "asked")


@pytest.mark.parametrize("declaration", ['metric = "f1_score"', 'python = "score.py"'])
def test_a_dataset_of_tasks_refuses_a_shared_verifier_of_rows(
    tmp_path: Path, declaration: str
) -> None:
    root = tmp_path / "ds"
    write_toml(root, f"[verifier]\n{declaration}\n")
    (root / "score.py").write_text("def evaluate(m, t): return 1\n")
    make_task(root, "t")
    with pytest.raises(InvalidInput, match=r"verifier\.(metric|python): declares the shared"):
        load_dataset_path(root)
