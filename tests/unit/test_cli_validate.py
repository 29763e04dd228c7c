"""`rollout validate`: ok lines for good inputs, problems with file and field for bad ones."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paths import (
    HARBOR,
    SHARED_TASKS,
    TERMINAL_BENCH,
    requires_shared_tasks,
    shared_task_dirs,
    task_dirs,
)
from rollout.cli.main import main

OWN_TASK_DIRS = task_dirs(HARBOR) + task_dirs(TERMINAL_BENCH)


def run(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[str]]:
    code = main(["validate", *map(str, paths)])
    return code, capsys.readouterr().out.splitlines()


def test_every_task_and_dataset_of_each_format_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(OWN_TASK_DIRS) == 5
    code, lines = run(capsys, *OWN_TASK_DIRS, HARBOR, TERMINAL_BENCH)
    expected = [f"ok {p} (task)" for p in OWN_TASK_DIRS]
    expected += [f"ok {HARBOR} (dataset)", f"ok {TERMINAL_BENCH} (dataset)"]
    assert (code, lines) == (0, expected)


@requires_shared_tasks
def test_every_shared_task_and_dataset_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    shared_tasks = shared_task_dirs()
    shared_datasets = task_dirs(SHARED_TASKS)
    assert len(shared_tasks) == 9
    code, lines = run(capsys, *shared_tasks, *shared_datasets)
    expected = [f"ok {p} (task)" for p in shared_tasks]
    expected += [f"ok {p} (dataset)" for p in shared_datasets]
    assert (code, lines) == (0, expected)


def test_job_with_local_dataset_and_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HARBOR, tmp_path / "tasks")
    registry = tmp_path / "registry.json"
    registry.write_text(
        json.dumps(
            [
                {
                    "name": "bench",
                    "version": "1.0",
                    "description": "",
                    "tasks": [{"name": "t", "git_url": "file:///nowhere.git", "path": "t"}],
                }
            ]
        )
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: demo\nagents:\n  - name: oracle\ndatasets:\n  - path: ./tasks\n"
        "  - registry:\n      path: ./registry.json\n    name: bench\n    version: '1.0'\n"
    )
    code, lines = run(capsys, job, registry)
    assert (code, lines) == (0, [f"ok {job} (job)", f"ok {registry} (registry)"])


def test_job_naming_a_missing_dataset_and_an_unknown_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "registry.json").write_text(
        '[{"name": "bench", "version": "1.0", "description": "", "tasks": []}]'
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        "agents:\n  - name: oracle\ndatasets:\n  - path: ./missing\n"
        "  - registry:\n      path: ./registry.json\n    name: bench\n    version: '9.9'\n"
    )
    code, lines = run(capsys, job)
    assert code == 1
    assert len(lines) == 2
    assert lines[0].startswith(f"error {job}: datasets[0]: ")
    assert "missing" in lines[0]
    assert lines[1].startswith(f"error {job}: datasets[1]: ")
    assert "9.9" in lines[1]


def test_broken_task_lists_every_problem_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "broken"
    shutil.copytree(HARBOR / "hello-world", task)
    (task / "instruction.md").unlink()
    (task / "tests" / "test.sh").unlink()
    good = OWN_TASK_DIRS[0]
    code, lines = run(capsys, task, good)
    assert code == 1
    assert any("instruction.md" in line for line in lines)
    assert any("tests/test.sh" in line for line in lines)
    assert all(line.startswith(f"error {task}") for line in lines[:-1])
    assert lines[-1] == f"ok {good} (task)"


def test_registry_that_is_not_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "registry.json"
    registry.write_text('{"name": "bench"}')
    code, lines = run(capsys, registry)
    assert code == 1
    assert lines
    assert all(line.startswith(f"error {registry}") for line in lines)


def test_missing_path_and_unknown_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    code, lines = run(capsys, tmp_path / "nope", other)
    assert code == 1
    assert lines == [
        f"error {tmp_path / 'nope'}: no such file or directory",
        f"error {other}: not a task directory, dataset directory, job file (.yaml, .yml, .json)"
        " or registry.json",
    ]


def test_console_script_help_has_an_example() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rollout.cli.main", "validate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "rollout validate ./tasks/hello-world" in out
