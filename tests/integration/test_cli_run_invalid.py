"""Bad input to `rollout run`: every problem named with its file and field, exit 1, and nothing
created anywhere (no write request to the API server, no object in storage)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_kit import Cli, Workspace, rollout_job
from s3_kit import S3Settings

from kubeharness.emulator.emulated import kube_api
from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS
from rollout.cli.run import QUICKSTART_HINT

pytestmark = pytest.mark.integration

BASE = """\
name: bad-job
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


@dataclass
class Case:
    """A broken input: the job text (or a change to the workspace) and the problems expected,
    each as the start of an error line: `<file>: <field>` ({job} and {root} are filled in)."""

    expected: list[str]
    text: str = BASE
    environ: dict[str, str | None] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    prepare: Callable[[Path], None] | None = None
    contains: str | None = None


def without_test_script(root: Path) -> None:
    (root / "alpha" / "hello" / "tests" / "test.sh").unlink()


def without_solution(root: Path) -> None:
    shutil.rmtree(root / "alpha" / "count" / "solution")


def second_alpha(root: Path) -> None:
    shutil.copytree(root / "alpha", root / "other" / "alpha")


def old_results(root: Path) -> None:
    (root / "jobs" / "bad-job" / "coder").mkdir(parents=True)


CASES = {
    "unknown key": Case(
        ["{job}: agnets: unknown key 'agnets' (did you mean 'agents'?)"],
        text=BASE + "agnets: []\n",
    ),
    "agent without execute": Case(
        ["{job}: agents[0].execute: agent 'coder' needs an 'execute' script"],
        text=BASE.replace("    execute: echo run\n", ""),
    ),
    "oracle with a script": Case(
        ["{job}: agents[1].install: the reserved agent 'oracle'"],
        text=BASE.replace("  - name: oracle\n", "  - name: oracle\n    install: echo x\n"),
    ),
    "unset variable": Case(
        ["{job}: agents[0].env.MY_API_KEY: environment variable MY_API_KEY is not set"],
        environ={"MY_API_KEY": None},
        contains="agent 'coder' takes MY_API_KEY from ${MY_API_KEY}",
    ),
    "bad reference": Case(
        ["{job}: agents[0].env.MY_API_KEY: unsupported reference '${{1BAD}}'"],
        text=BASE.replace("${MY_API_KEY}", "${1BAD}"),
    ),
    "missing dataset": Case(
        ["{job}: datasets[0]: {root}/missing: dataset directory does not exist"],
        text=BASE.replace("./alpha", "./missing"),
    ),
    "unknown registry version": Case(
        ["{job}: datasets[1]: {root}/registry.json: version: dataset 'beta' has no version '9.9'"],
        text=BASE.replace("'1.0'", "'9.9'"),
    ),
    "local mode's environment type": Case(
        ["{job}: environment.type: is 'local': the host sandbox runs trials on the machine that"],
        text=BASE + "environment:\n  type: local\n",
    ),
    "zero attempts": Case(
        ["{job}: n_attempts: Input should be greater than or equal to 1"],
        text=BASE + "n_attempts: 0\n",
    ),
    "negative multiplier": Case(
        ["{job}: timeout_multiplier: Input should be greater than 0"],
        text=BASE + "timeout_multiplier: -1.0\n",
    ),
    "relative instruction path": Case(
        ["{job}: instruction_path: 'tmp/instruction.md' must be an absolute path"],
        text=BASE + "instruction_path: tmp/instruction.md\n",
    ),
    "duplicate agent": Case(
        ["{job}: agents[1].name: duplicate agent name 'coder' (also agents[0])"],
        text=BASE.replace("  - name: oracle\n", "  - name: coder\n    execute: echo again\n"),
    ),
    "unknown environment type": Case(
        ["{job}: environment.type: Input should be"], text=BASE + "environment:\n  type: vm\n"
    ),
    "unknown metric": Case(
        ["{job}: metrics[0].type: Input should be"], text=BASE + "metrics:\n  - type: median\n"
    ),
    "broken task with --strict": Case(
        [
            "{job}: datasets[0]: task_invalid: Task 'hello' is invalid: tests/test.sh: missing",
            "--strict: the job is refused because 1 task cannot run (above); without --strict, "
            "their trials fail with those errors and the other trials run",
        ],
        prepare=without_test_script,
        args=["--strict"],
    ),
    "oracle without a solution with --strict": Case(
        [
            "{job}: datasets[0]: task_invalid for the oracle agent: Task 'count' is invalid: the "
            "oracle agent needs solution/solve.sh",
            "--strict: the job is refused because 1 task cannot run",
        ],
        prepare=without_solution,
        args=["--strict"],
    ),
    "invalid YAML": Case(["{job}: invalid YAML at line 2"], text="name: x\n  agents: [\n"),
    "two datasets with one name": Case(
        ["{job}: datasets[1]: dataset name 'alpha' is also datasets[0]'s"],
        contains="rename one of the directories or set `name` in its dataset.toml",
        text=BASE.replace("  - registry:", "  - path: ./other/alpha\n  - registry:"),
        prepare=second_alpha,
    ),
    "results already on disk": Case(
        ["{job}: name: jobs/bad-job already holds results of a job named 'bad-job'"],
        prepare=old_results,
    ),
    "bad storage endpoint": Case(
        ["command line: --storage-endpoint: 'minio:9000' must start with http:// or https://"],
        args=["--storage-endpoint", "minio:9000"],
    ),
    "several at once": Case(
        [
            "command line: --storage-endpoint: 'minio:9000' must start with",
            "{job}: agents[0].env.MY_API_KEY: environment variable MY_API_KEY is not set",
            "{job}: datasets[0]: {root}/missing: dataset directory does not exist",
        ],
        text=BASE.replace("./alpha", "./missing"),
        environ={"MY_API_KEY": None},
        args=["--storage-endpoint", "minio:9000"],
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_bad_input_is_named_and_creates_nothing(
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
    args = ["run", str(job), *cli.cluster_args(), *cli.storage_args(), *case.args]
    outcome = await cli.run(capsys, *args, environ=case.environ)

    assert outcome.code == 1
    errors = outcome.stderr.splitlines()
    assert len(errors) == len(case.expected), outcome.stderr
    for line, expected in zip(errors, case.expected, strict=True):
        assert line.startswith("error: " + expected.format(job=job, root=root)), line
    if case.contains is not None:
        assert case.contains in outcome.stderr
    assert outcome.stdout == ""
    assert kube.writes() == []
    assert s3_settings.store().list_keys("") == []


async def test_an_existing_rolloutjob_of_that_name_is_not_touched(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    existing = rollout_job("two-by-two")
    await kube.create(ROLLOUT_JOBS, existing)
    args = ["run", str(workspace.job_file()), *cli.cluster_args(), *cli.storage_args()]
    outcome = await cli.run(capsys, *args)
    assert outcome.code == 1
    assert outcome.stderr == (
        f"error: a RolloutJob two-by-two (Pending) already exists in namespace {kube.namespace} "
        f"({kube.url}, context test): follow it with `rollout status two-by-two --watch`, "
        "delete it with `rollout cancel two-by-two`, or give the job another name in "
        f"{workspace.root / 'two-by-two.yaml'}\n"
    )
    assert kube.writes() == []
    assert s3_settings.store().list_keys("") == []


async def test_results_already_in_storage_under_that_name_are_not_mixed_in(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = s3_settings.store()
    store.put_bytes("jobs/two-by-two/result.json", b"{}")
    args = ["run", str(workspace.job_file()), *cli.cluster_args(), *cli.storage_args()]
    outcome = await cli.run(capsys, *args)
    assert outcome.code == 1
    assert outcome.stderr.startswith(
        f"error: {workspace.root / 'two-by-two.yaml'}: name: storage already holds results of a "
        f"job named 'two-by-two' (s3://{s3_settings.location.bucket}/jobs/two-by-two/)"
    )
    assert kube.writes() == []
    assert store.list_keys("") == ["jobs/two-by-two/result.json"]


async def test_a_cluster_without_the_operator_says_to_install_it(
    tmp_path: Path,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "home").mkdir()
    async with kube_api() as bare:  # no CRDs
        cli = Cli(bare.write_kubeconfig(tmp_path / "kubeconfig"), s3_settings, tmp_path / "home")
        args = ["run", str(workspace.job_file()), *cli.cluster_args(), *cli.storage_args()]
        outcome = await cli.run(capsys, *args)
        assert bare.writes() == []
    assert outcome.code == 1
    assert "the RolloutJob resource (rolloutjobs.rollout.dev) is not installed" in outcome.stderr
    assert s3_settings.store().list_keys("") == []


async def test_no_bucket_anywhere_names_every_way_to_give_one(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", str(workspace.job_file()), *cli.cluster_args()]
    outcome = await cli.run(capsys, *args)
    assert outcome.code == 1
    assert outcome.stderr == (
        "error: command line: --storage-bucket: no object storage bucket is configured: pass "
        f"--storage-bucket, set ROLLOUT_STORAGE_BUCKET or `storage.bucket` in "
        f"{cli.environ['ROLLOUT_CONFIG']}\n"
        f"hint: {QUICKSTART_HINT}\n"
    )
    assert kube.writes() == []
