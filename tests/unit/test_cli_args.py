"""The command line itself: `rollout JOB.yaml` as `rollout run`, an example in every --help, and
the TRIAL and DATASET argument syntaxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.api.errors import InvalidInput
from rollout.cli.logs import TrialPlace, parse_trial_path
from rollout.cli.main import build_parser, main
from rollout.cli.publish import parse_dataset_argument

COMMANDS = [
    "run",
    "status",
    "logs",
    "download",
    "cancel",
    "release",
    "render",
    "publish",
    "validate",
    "check",
    "login",
    "benchmarks",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"], {})
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"rollout {command} " in out or (command == "run" and "rollout job.yaml" in out)


def test_run_help_says_what_docker_means_on_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"], {})
    out = " ".join(capsys.readouterr().out.split())
    assert "environment.type: docker (job.yaml's default) runs each trial as a Pod" in out
    # The bridge runs a remote Docker engine's trials and the cloud providers'.
    assert "the cluster's bridge controller (rollout-bridge) runs each trial's container" in out
    assert "modal, daytona and e2b run each trial in a sandbox of that provider" in out


def test_a_job_file_first_means_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "job.yaml"]).command == "run"
    missing = tmp_path / "job.yaml"
    environ = {"HOME": str(tmp_path), "ROLLOUT_STORAGE_BUCKET": "b"}
    assert main([str(missing)], environ) == 1
    assert capsys.readouterr().err.startswith(f"error: {missing}: no such file\n")


def test_an_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--frobnicate"], {})
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("text", "place"),
    [
        ("oracle/tasks/hello__1", TrialPlace("oracle", "tasks", "hello", 1)),
        ("my agent/bench/fix__git__12", TrialPlace("my agent", "bench", "fix__git", 12)),
    ],
)
def test_trial_paths(text: str, place: TrialPlace) -> None:
    assert parse_trial_path(text) == place


@pytest.mark.parametrize(
    "text", ["oracle/tasks/hello", "oracle/hello__1", "a/b/c/d__1", "a/b/t__0", "a/../t__1"]
)
def test_bad_trial_paths(text: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_trial_path(text)
    (problem,) = raised.value.problems
    assert (problem.file, problem.field) == ("command line", "TRIAL")


def test_dataset_arguments(tmp_path: Path) -> None:
    local = parse_dataset_argument("./tasks")
    assert local.path == str(Path("./tasks").absolute())
    registry = parse_dataset_argument("reg/registry.json#terminal-bench@2.0")
    assert registry.registry is not None
    assert registry.registry.path == str(Path("reg/registry.json").absolute())
    assert (registry.name, registry.version) == ("terminal-bench", "2.0")
    url = parse_dataset_argument("https://example.com/registry.json#hello world")
    assert url.registry is not None
    assert (url.registry.url, url.name, url.version) == (
        "https://example.com/registry.json",
        "hello world",
        None,
    )
    (tmp_path / "registry.json").write_text("[]")
    with pytest.raises(InvalidInput, match="needs the dataset's name"):
        parse_dataset_argument(str(tmp_path / "registry.json"))
    with pytest.raises(InvalidInput, match=r"REGISTRY#NAME\[@VERSION\]"):
        parse_dataset_argument("registry.json#")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "name the jobs to release, or give --all (not both)"),
        (["a", "--all"], "name the jobs to release, or give --all (not both)"),
        (["a", "-A"], "-A/--all-namespaces goes with --all"),
        (["--all", "--grace", "-1"], "--grace: -1 is negative"),
    ],
)
def test_release_says_what_it_needs(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["release", *args], {}) == 1
    assert capsys.readouterr().err == f"error: command line: {says}\n"


def test_run_says_every_problem_at_once_and_where_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No bucket, no kubeconfig and a job file that is not there: three errors in one run, and
    the quickstart named (they once came one run at a time)."""
    missing = tmp_path / "job.yaml"
    environ = {"HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "nowhere")}
    assert main(["run", str(missing)], environ) == 1
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["error", "error", "error", "hint"]
    assert "no object storage bucket is configured" in lines[0]
    assert lines[1] == f"error: {missing}: no such file"
    assert lines[2].startswith(f"error: no kubeconfig at {tmp_path / 'nowhere'}")
    assert "examples/quickstart.sh" in lines[3]


def test_run_says_an_api_that_does_not_answer_with_the_other_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: evals}}]\n"
    )
    job = tmp_path / "job.yaml"
    job.write_text("name: hello\nagents:\n  - name: oracle\ndatasets: []\n")
    environ = {"HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
    assert main(["run", str(job)], environ) == 1
    lines = capsys.readouterr().err.splitlines()
    assert "no object storage bucket is configured" in lines[0]
    assert any("http://127.0.0.1:9" in line and "did not answer" in line for line in lines[1:-1]), (
        lines
    )
    assert lines[-1].startswith("hint: ")
