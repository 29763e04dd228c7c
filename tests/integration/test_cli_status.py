"""`rollout status`: the jobs of a namespace, one job's figures, and following one to its end."""

from __future__ import annotations

import asyncio

import pytest
from cli_kit import (
    TRIALS,
    Cli,
    create_job,
    job_status,
    rewards_of,
    rollout_job,
    wait_for_watch,
)

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS
from rollout.api.translate import resource_name

pytestmark = pytest.mark.integration

REWARDS = rewards_of(TRIALS)
EVAL = "My Eval"
EVAL_RESOURCE = resource_name(EVAL)


@pytest.fixture
async def jobs(kube: Kube) -> str:
    """Two jobs in the test's namespace, one in another namespace (whose name is returned)."""
    evals = await kube.new_namespace("evals")
    await create_job(
        kube,
        rollout_job(
            EVAL_RESOURCE, job_name=EVAL, status=job_status("Running", REWARDS, finished=3)
        ),
    )
    await create_job(kube, rollout_job("nightly", status=job_status("Completed", REWARDS)))
    await create_job(kube, rollout_job("other", namespace=evals))
    return evals


def cells(line: str) -> list[str]:
    return line.split()


async def test_status_lists_the_jobs_of_the_namespace(
    kube: Kube, cli: Cli, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await cli.run(capsys, "status", *cli.cluster_args())
    assert outcome.code == 0, outcome.stderr
    header, *rows = outcome.stdout.splitlines()
    assert cells(header) == ["NAME", "JOB", "PHASE", "DONE", "FAILED", "PASS", "RATE", "AGE"]
    assert [cells(row)[:-1] for row in rows] == [
        [EVAL_RESOURCE, "My", "Eval", "Running", "3/8", "0", "66.7%"],
        ["nightly", "nightly", "Completed", "8/8", "1", "85.7%"],
    ]
    assert all(cells(row)[-1].endswith("s") for row in rows)  # created seconds ago

    everywhere = await cli.run(capsys, "status", "-A", *cli.cluster_args())
    ours = {kube.namespace, jobs}  # a shared real control plane has other tests' namespaces
    listed = [cells(row)[:2] for row in everywhere.stdout.splitlines()[1:]]
    # Oldest first, then by namespace and name (whatever order the API server lists them in).
    assert [row for row in listed if row[0] in ours] == [
        [kube.namespace, EVAL_RESOURCE],
        [kube.namespace, "nightly"],
        [jobs, "other"],
    ]
    empty = await cli.run(capsys, "status", "-n", "kube-system", *cli.cluster_args())
    assert empty.stdout.startswith("no RolloutJobs in namespace kube-system (")


async def test_status_of_one_job_by_its_job_name(
    kube: Kube, cli: Cli, jobs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await cli.run(capsys, "status", EVAL, *cli.cluster_args())
    assert outcome.code == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[:6] == [
        f"Job:         My Eval (RolloutJob {EVAL_RESOURCE} in namespace {kube.namespace})",
        "Phase:       Running",
        "Trials:      3/8 done, 5 running, 3 completed, 0 failed",
        "Pass rate:   66.7%",
        "Mean reward: 0.667",
        "Metrics:     mean 0.667, max 1.000",
    ]
    assert kube.writes() == []


async def test_status_of_a_missing_job(
    kube: Kube, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await cli.run(capsys, "status", "nope", *cli.cluster_args())
    assert outcome.code == 1
    assert outcome.stderr == (
        f"error: no RolloutJob nope in namespace {kube.namespace} ({kube.url}, context test)\n"
    )


@pytest.mark.parametrize(("phase", "code"), [("Completed", 0), ("Failed", 1)])
async def test_status_watch_follows_the_job_to_its_end(
    kube: Kube, cli: Cli, jobs: str, capsys: pytest.CaptureFixture[str], phase: str, code: int
) -> None:
    watch = asyncio.create_task(cli.run(capsys, "status", EVAL, "--watch", *cli.cluster_args()))
    await wait_for_watch(kube)
    message = "the storage bucket is gone" if phase == "Failed" else None
    await kube.patch_status(
        ROLLOUT_JOBS, EVAL_RESOURCE, job_status(phase, REWARDS, message=message)
    )
    outcome = await watch
    assert outcome.code == code, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0].startswith("My Eval Running: 3/8 trials done")
    assert lines[1].startswith(f"My Eval {phase}: 8/8 trials done")
    assert f"Phase:       {phase}" in lines
    if message:
        assert f"Problem:     {message}" in lines
