"""`rollout validate JOB.yaml` says what `rollout run` and `rollout render` will say, in the same
words: each problem that makes run refuse the job is an error of validate, each warning run gives
before it starts is a warning of validate. Both commands run for real, run against the suite's
Kubernetes API and S3."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_kit import Cli, Workspace
from s3_kit import S3Settings

from kubeharness.kube import Kube

pytestmark = pytest.mark.integration

BASE = """\
name: checked
agents:
  - name: coder
    execute: echo run
    env:
      MY_API_KEY: ${MY_API_KEY}
  - name: oracle
datasets:
  - path: ./alpha
  - registry:
      path: ./registry.json
    name: beta
    version: '1.0'
"""


def without_images(stdout: str) -> list[str]:
    """validate's lines but its `image <task>: ...` ones (where each task's image comes from)."""
    return [line for line in stdout.splitlines() if not line.startswith("image ")]


def second_alpha(root: Path) -> None:
    shutil.copytree(root / "alpha", root / "other" / "alpha")


def missing_commit(root: Path) -> None:
    registry = json.loads((root / "registry.json").read_text())
    registry[0]["tasks"][1]["git_commit_id"] = "0" * 40
    (root / "registry.json").write_text(json.dumps(registry))


def second_beta(root: Path) -> None:
    registry = json.loads((root / "registry.json").read_text())
    registry.append({**registry[0], "version": "2.0"})
    (root / "registry.json").write_text(json.dumps(registry))


@dataclass
class Case:
    """A job that run refuses: the problems both commands name ({job} and {root} filled in)."""

    expected: list[str]
    text: str = BASE
    environ: dict[str, str | None] = field(default_factory=dict)
    prepare: Callable[[Path], None] | None = None


REFUSED = {
    "unset variable": Case(
        [
            "{job}: agents[0].env.MY_API_KEY: environment variable MY_API_KEY is not set (agent "
            "'coder' takes MY_API_KEY from ${{MY_API_KEY}})"
        ],
        environ={"MY_API_KEY": None},
    ),
    "a built-in agent's key unset": Case(
        [
            "{job}: agents[2].env.ANTHROPIC_API_KEY: environment variable ANTHROPIC_API_KEY is "
            "not set (the built-in agent 'claude-code' needs it; export it, or give "
            "env.ANTHROPIC_API_KEY in the job)"
        ],
        text=BASE.replace("  - name: oracle\n", "  - name: oracle\n  - name: claude-code\n"),
    ),
    "local mode's environment type": Case(
        [
            "{job}: environment.type: is 'local': the host sandbox runs trials on the machine "
            "that runs `rollout run --local`, never on a cluster; use 'docker' or 'kubernetes' "
            "there"
        ],
        text=BASE + "environment:\n  type: local\n",
    ),
    "two dataset directories with one name": Case(
        [
            "{job}: datasets[1]: dataset name 'alpha' is also datasets[0]'s, and the two "
            "datasets' trials would share result directories (<agent>/alpha/): rename one of "
            "the directories or set `name` in its dataset.toml"
        ],
        text=BASE.replace("  - registry:", "  - path: ./other/alpha\n  - registry:"),
        prepare=second_alpha,
    ),
    "two versions of one registry dataset": Case(
        [
            "{job}: datasets[2]: dataset name 'beta' is also datasets[1]'s, and the two "
            "datasets' trials would share result directories (<agent>/beta/): two registry "
            "datasets of one name cannot run in one job; run them as two jobs"
        ],
        text=BASE
        + "  - registry:\n      path: ./registry.json\n    name: beta\n    version: '2.0'\n",
        prepare=second_beta,
    ),
    "a registry commit that does not exist": Case(
        [
            "{job}: datasets[1]: {url}: git_commit_id 0000000000000000000000000000000000000000 "
            "is not a commit in the repository"
        ],
        prepare=missing_commit,
    ),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
async def test_validate_names_what_run_refuses_in_the_same_words(
    case: Case,
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(workspace.root)
    root = workspace.root
    job = root / "job.yaml"
    job.write_text(case.text)
    if case.prepare is not None:
        case.prepare(root)
    url = (root / "beta-repo").as_uri()
    expected = [line.format(job=job, root=root, url=url) for line in case.expected]

    checked = await cli.run(capsys, "validate", str(job), environ=case.environ)
    args = ["run", str(job), *cli.cluster_args(), *cli.storage_args()]
    ran = await cli.run(capsys, *args, environ=case.environ)

    assert (checked.code, ran.code) == (1, 1), ran.stderr
    assert checked.stdout.splitlines() == [f"error {line}" for line in expected]
    assert ran.stderr.splitlines() == [f"error: {line}" for line in expected]
    assert kube.writes() == []
    assert s3_settings.store().list_keys("") == []


async def test_no_env_makes_an_unset_variable_a_warning(
    cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    job = workspace.job_file()
    outcome = await cli.run(capsys, "validate", "--no-env", str(job), environ={"MY_API_KEY": None})
    assert outcome.code == 0, outcome.stdout
    assert without_images(outcome.stdout) == [
        f"warning {job}: agents[0].env.MY_API_KEY: environment variable MY_API_KEY is not set "
        "(agent 'coder' takes MY_API_KEY from ${MY_API_KEY})",
        f"ok {job} (job)",
    ]


async def test_offline_leaves_registry_tasks_unfetched(
    cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    missing_commit(workspace.root)
    job = workspace.job_file()
    outcome = await cli.run(capsys, "validate", "--offline", str(job))
    assert (outcome.code, without_images(outcome.stdout)) == (0, [f"ok {job} (job)"])
    assert not (Path(cli.environ["ROLLOUT_CACHE_DIR"]) / "git").exists()


async def test_a_task_that_needs_a_build_is_said_and_one_without_a_dockerfile_warned_alike(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    count = workspace.root / "alpha" / "count"
    toml = count / "task.toml"
    toml.write_text("[agent]\ntimeout_sec = 60.0\n")
    dockerfile = count / "environment" / "Dockerfile"
    dockerfile.write_text("FROM debian:bookworm-slim\nRUN apt-get install -y git\n")
    job = workspace.job_file()
    checked = await cli.run(capsys, "validate", str(job))
    assert checked.code == 0, checked.stdout
    # A Dockerfile to build: said, no warning (the operator builds it).
    assert f"image {count}: build environment/Dockerfile" in checked.stdout.splitlines()
    assert "warning" not in checked.stdout
    # No Dockerfile to build: its trials will fail, and validate, run and render say so alike.
    dockerfile.unlink()
    message = (
        f"{toml}: environment.docker_image: its trials will fail with environment_build_failed: "
        "it has no docker_image, and its environment/ has no Dockerfile to build"
    )
    checked = await cli.run(capsys, "validate", str(job))
    assert (checked.code, without_images(checked.stdout)) == (
        0,
        [f"warning {message}", f"ok {job} (job)"],
    )
    args = ["run", str(job), "--detach", *cli.cluster_args(), *cli.storage_args()]
    ran = await cli.run(capsys, *args)
    assert ran.code == 0, ran.stderr
    assert f"warning: {message}" in ran.stderr.splitlines()

    rendered = await cli.run(capsys, "render", str(job))
    assert rendered.code == 0, rendered.stderr
    assert f"warning: {message}" in rendered.stderr.splitlines()
