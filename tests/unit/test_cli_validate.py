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
    REPO,
    SHARED_TASKS,
    TERMINAL_BENCH,
    requires_shared_tasks,
    shared_task_dirs,
    task_dirs,
)
from rollout.cli.main import main

OWN_TASK_DIRS = task_dirs(HARBOR) + task_dirs(TERMINAL_BENCH)


def run(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[str]]:
    """The exit status and the printed lines but the `image` ones (their own tests below)."""
    code, lines = run_all(capsys, *paths)
    return code, [line for line in lines if not line.startswith("image ")]


def run_all(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, list[str]]:
    code = main(["validate", *map(str, paths)])
    return code, capsys.readouterr().out.splitlines()


def test_each_task_says_whether_its_image_is_pulled_lifted_or_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def task(name: str, toml: str, dockerfile: str) -> Path:
        path = tmp_path / "tasks" / name
        (path / "environment").mkdir(parents=True)
        (path / "tests").mkdir()
        (path / "instruction.md").write_text("Do it.\n")
        (path / "task.toml").write_text(toml)
        (path / "environment" / "Dockerfile").write_text(dockerfile)
        (path / "tests" / "test.sh").write_text("#!/bin/sh\n")
        return path

    pulled = task("pulled", '[environment]\ndocker_image = "img:1"\n', "FROM x\nRUN y\n")
    lifted = task("lifted", "", "FROM debian:12\nWORKDIR /app\n")
    built = task("built", "", "FROM debian:12\nRUN apt-get update\n")
    code, lines = run_all(capsys, tmp_path / "tasks")
    assert code == 0
    assert [line for line in lines if line.startswith("image ")] == [
        f"image {built}: build environment/Dockerfile",
        f"image {lifted}: lift debian:12 (its Dockerfile needs no build)",
        f"image {pulled}: pull img:1",
    ]
    job = tmp_path / "job.yaml"
    job.write_text(
        "agents: [{name: a, execute: 'true'}]\ndatasets: [{path: tasks}]\n"
        "environment: {force_build: true}\n"
    )
    code, lines = run_all(capsys, job)
    assert code == 0
    assert f"image {pulled}: build environment/Dockerfile (force_build)" in lines
    assert f"image {lifted}: build environment/Dockerfile (force_build)" in lines


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
    shutil.copytree(TERMINAL_BENCH, tmp_path / "tasks")
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
    code = main(["validate", "--offline", str(job), str(registry)])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("image ")]
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


def test_a_dataset_with_a_broken_task_lists_its_problems_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HARBOR, tmp_path / "tasks")
    (tmp_path / "tasks" / "hello-user" / "instruction.md").unlink()
    code, lines = run(capsys, tmp_path / "tasks")
    assert (code, lines) == (
        1,
        [f"error {tmp_path / 'tasks' / 'hello-user' / 'instruction.md'}: missing (the agent's "
         "instruction)"],
    )  # fmt: skip


def test_a_job_lists_its_tasks_that_cannot_run_as_rollout_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HARBOR, tmp_path / "tasks")
    (tmp_path / "tasks" / "hello-user" / "instruction.md").unlink()
    shutil.rmtree(tmp_path / "tasks" / "hello-world" / "solution")
    job = tmp_path / "job.yaml"
    job.write_text("name: demo\nagents:\n  - name: oracle\ndatasets:\n  - path: ./tasks\n")
    code, lines = run(capsys, job)
    assert (code, lines) == (
        1,
        [
            f"error {job}: datasets[0]: task_invalid: Task 'hello-user' is invalid: "
            "instruction.md: missing (the agent's instruction)",
            f"error {job}: datasets[0]: task_invalid for the oracle agent: Task 'hello-world' is "
            "invalid: the oracle agent needs solution/solve.sh (or, as in seed 004, solve.sh at "
            "the task root), and the task has neither",
        ],
    )


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
        f"error {other}: not a task directory, dataset directory, job file (.yaml, .yml, .json),"
        " RolloutJob manifest or registry.json",
    ]


def test_console_script_help_has_an_example() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rollout.cli.main", "validate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "rollout validate ./tasks/hello-world" in out


def test_a_rolloutjob_manifest_is_checked_as_a_rolloutjob(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was read as a job.yaml: six "unknown key / Field required" errors for a good file."""
    example = REPO / "examples" / "rolloutjob.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: rollout.dev/v1alpha1\nkind: RolloutJob\nmetadata: {name: x}\n"
        "spec: {nAttempts: 0, agents: [{name: oracle}]}\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    )
    old = tmp_path / "old.yaml"
    old.write_text("apiVersion: rollout.dev/v1\nkind: RolloutJob\nmetadata: {name: x}\n")
    code, lines = run(capsys, example, bad, old)
    assert code == 1
    assert lines == [
        f"ok {example} (RolloutJob)",
        f"error {bad} (document 1): spec.nAttempts: Input should be greater than or equal to 1",
        f"error {bad} (document 1): spec.datasets: Field required",
        f"error {bad} (document 2): kind: a Kubernetes ConfigMap (v1), which rollout validate "
        "does not check: it checks job files (job.yaml), RolloutJob manifests, task and dataset "
        "directories, and registry.json files",
        f"error {old}: apiVersion: is 'rollout.dev/v1'; RolloutJobs are rollout.dev/v1alpha1",
    ]


def test_what_rollout_render_writes_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Secret beside the RolloutJob (the agent env of `rollout render`) is left alone."""
    manifests = tmp_path / "rendered.yaml"
    manifests.write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {KEY: v}\n---\n"
        + (REPO / "examples" / "rolloutjob.yaml").read_text()
    )
    assert run(capsys, manifests) == (0, [f"ok {manifests} (RolloutJob)"])


def test_a_directory_above_a_dataset_says_where_it_looked_and_where_the_tasks_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, lines = run(capsys, REPO / "examples")
    assert code == 1
    assert lines == [
        f"error {REPO / 'examples'}: no tasks found: a dataset directory holds task directories, "
        "and none of its 4 subdirectories (agents, benchmarks, built, tasks) is a task (a task is "
        "a directory with "
        "instruction.md, task.toml, environment/ and tests/test.sh (or tests/evaluate.py)); these "
        "hold tasks, and are "
        f"datasets: {REPO / 'examples' / 'built'}, {REPO / 'examples' / 'tasks'}"
    ]


def test_a_registry_is_told_from_a_job_file_by_its_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A registry not named registry.json that holds an object was checked as a job file and
    reported as `agents: Field required`."""
    dataset = {
        "name": "bench",
        "version": "1.0",
        "tasks": [{"name": "t", "git_url": "file:///nowhere.git", "path": "t"}],
    }
    one = tmp_path / "bench.json"
    one.write_text(json.dumps(dataset))
    wrapped = tmp_path / "datasets.json"
    wrapped.write_text(json.dumps({"datasets": [dataset]}))
    listed = tmp_path / "my-registry.json"
    listed.write_text(json.dumps([dataset]))
    code, lines = run(capsys, one, wrapped, listed)
    assert code == 1
    assert lines == [
        f"error {one}: a registry is a JSON list of datasets, and this is one dataset (name, "
        "version, tasks) on its own: put it in a list, [{...}]",
        f"error {wrapped}: a registry is a JSON list of datasets, and this is an object with "
        "that list under `datasets` (and no agents, so it is no job file either): make the list "
        "itself the file's content",
        f"ok {listed} (registry)",
    ]


def test_a_job_file_named_like_a_registry_is_checked_as_a_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(TERMINAL_BENCH, tmp_path / "tasks")
    job = tmp_path / "registry.json"
    job.write_text(json.dumps({"agents": [{"name": "oracle"}], "datasets": [{"path": "tasks"}]}))
    assert run(capsys, job) == (0, [f"ok {job} (job)"])


def test_a_task_env_variable_no_agent_sets_is_a_warning_as_rollout_run_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(HARBOR / "hello-world", tmp_path / "tasks" / "hello-world")
    toml = tmp_path / "tasks" / "hello-world" / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]", '[environment]\ndocker_image = "img:1"')
        + '\n[environment.env]\nMODEL_KEY = "${MY_KEY}"\n'
    )
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: demo\nagents:\n  - name: oracle\n  - name: keyed\n    execute: 'true'\n"
        "    env:\n      MY_KEY: literal\ndatasets:\n  - path: ./tasks\n"
    )
    code, lines = run(capsys, job)
    assert code == 0  # a warning: the other agent's trials run
    assert lines == [
        f"warning {toml}: environment.env.MODEL_KEY: the trials of agent 'oracle' will fail with "
        "task_invalid: takes ${MY_KEY}, which agent 'oracle' does not set: give MY_KEY in the "
        "agent's env (job.yaml: `MY_KEY: ${MY_KEY}`)",
        f"ok {job} (job)",
    ]


UNHONOURED_TOML = """\
version = "1.0"

[environment]
docker_image = "mcr.microsoft.com/windows/servercore:ltsc2022"
os = "windows"
gpus = 1
gpu_types = ["H100", "A100"]
allowed_hosts = ["pypi.org"]
mcp_servers = [{ name = "files", transport = "stdio", command = "mcp-files" }]

[environment.tpu]
type = "v6e"
topology = "2x4"

[agent]
network_mode = "allowlist"

[verifier]
network_mode = "no-network"

[verifier.environment]
docker_image = "verifier:1"

[[steps]]
name = "first"
"""

UNHONOURED_KEYS = [
    "environment.os: is 'windows': trials run as Linux Pods",
    "environment.tpu: no TPU is requested",
    "environment.gpu_types: the GPU type is not chosen",
    "environment.mcp_servers: no MCP server is started",
    "environment.allowed_hosts: ignored: the task has full network access",
    "agent.network_mode: per-phase network access is not switched",
    "verifier.network_mode: per-phase network access is not switched",
    "verifier.environment: no separate verifier environment",
    "steps: multi-step tasks are not run step by step",
]


def test_keys_a_trial_cannot_honour_are_each_a_warning_saying_what_happens_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = tmp_path / "set"
    task = dataset / "win"
    shutil.copytree(HARBOR / "hello-world", task)
    (task / "task.toml").write_text(UNHONOURED_TOML)
    job = tmp_path / "job.yaml"
    job.write_text(f"agents:\n  - name: oracle\ndatasets:\n  - path: {dataset}\n")
    for path, kind in ((task, "task"), (dataset, "dataset"), (job, "job")):
        code, lines = run(capsys, path)
        assert (code, lines[-1]) == (0, f"ok {path} ({kind})")
        assert len(lines) == 1 + len(UNHONOURED_KEYS), lines
        for line, key in zip(lines[:-1], UNHONOURED_KEYS, strict=True):
            assert line.startswith(f"warning {task / 'task.toml'}: {key}"), line


def test_a_task_that_asks_only_for_what_trials_honour_gets_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "offline"
    shutil.copytree(HARBOR / "hello-world", task)
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        toml.replace(
            "[environment]\n",
            '[environment]\nos = "linux"\nnetwork_mode = "allowlist"\n'
            'allowed_hosts = ["pypi.org"]\n',
        )
    )
    assert run(capsys, task) == (0, [f"ok {task} (task)"])
