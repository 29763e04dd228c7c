"""`rollout run JOB.yaml --resume` on a cluster, against the API on loopback with the real
operator and a real S3 endpoint; the test plays the kubelet and the runners (each finished Pod's
runner leaves its result.json in storage, as a real one does).

The first run ends with one trial failed for the infrastructure's reason. `--resume` replaces the
finished RolloutJob with one that has `spec.resume`, the operator runs that trial alone (its
earlier try kept under `retries/1/`), every other trial keeps its record byte for byte, and the
local copy of the results mirrors storage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from cli_kit import TRIALS, Cli, Workspace, job_tree, local_tree
from operator_kit import (
    operator_config,
    operator_memo,
    play_kubelet,
    pod_trial_spec,
    runner_message,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.additions import TrialAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.layout import job_result_key, trial_prefix
from rollout.api.results import JobResult, TrialError, TrialResult
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

JOB = "again-job"
LOST = ("coder", "beta", "sort")


def trial_of(pod: dict[str, Any]) -> tuple[str, str, str]:
    spec = pod_trial_spec(pod)
    return spec["agent"]["name"], spec["datasetName"], spec["taskName"]


def runner(store: ObjectStore, lost: set[tuple[str, str, str]]) -> Callable[[dict[str, Any]], str]:
    """A runner that records each trial (reward 1, or internal_error for those in `lost`) in
    storage, then reports it in its termination message."""

    def run(pod: dict[str, Any]) -> str:
        agent, dataset, task = key = trial_of(pod)
        prefix = trial_prefix("", JOB, agent, dataset, task, 1)
        failed = key in lost
        result = TrialResult(
            task_name=task,
            dataset_name=dataset,
            agent_name=agent,
            attempt=1,
            reward=None if failed else 1.0,
            error=TrialError(type=ErrorType.INTERNAL_ERROR, message="lost") if failed else None,
            rollout=TrialAdditions(
                failure_class=FailureClass.INFRASTRUCTURE if failed else None, tries=1
            ),
        )
        if failed:
            store.put_bytes(prefix + "error.txt", b"internal_error: lost\n", "text/plain")
        store.put_bytes(prefix + "logs/agent/out.txt", f"{pod['metadata']['uid']}\n".encode(), "")
        store.put_bytes(prefix + "result.json", result.to_json().encode(), "application/json")
        if failed:
            return runner_message(None, error=("internal_error", "lost"))
        return runner_message(1.0)

    return run


async def run_with_kubelet(
    kube: Kube, cli: Cli, capsys: pytest.CaptureFixture[str], store: ObjectStore, *argv: str,
    lost: set[tuple[str, str, str]],
) -> Any:  # fmt: skip
    run = asyncio.create_task(cli.run(capsys, *argv))
    finished = await play_kubelet(kube, lambda: asyncio.sleep(0, run.done()), runner(store, lost))
    return await run, finished


async def test_resume_runs_the_infrastructure_failure_again_and_keeps_the_rest(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job_file = workspace.job_file(JOB)
    jobs_dir = workspace.root / "out"
    args = ["run", str(job_file), *cli.cluster_args(), *cli.storage_args(), "--jobs-dir",
            str(jobs_dir)]  # fmt: skip
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        first, pods = await run_with_kubelet(kube, cli, capsys, store, *args, lost={LOST})
        assert first.code == 0, first.stderr
        assert len(pods) == len(TRIALS)
        old = await kube.get(ROLLOUT_JOBS, JOB)
        before = job_tree(store, JOB)

        # Refused without --resume: the name is in use.
        refused = await cli.run(capsys, *args)
        assert refused.code == 1
        assert "already exists" in refused.stderr

        again, pods = await run_with_kubelet(
            kube, cli, capsys, store, *args, "--resume", lost=set()
        )
        assert again.code == 0, again.stderr
        new = await kube.get(ROLLOUT_JOBS, JOB)

    assert "--resume: deleting the finished RolloutJob" in again.stderr
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["resume"] is True
    assert len(pods) == 1  # the lost trial alone ran again
    assert [t["metadata"]["name"] for t in await kube.list(ROLLOUT_TRIALS, kube.namespace)] == [
        name for name in pods
    ]
    after = job_tree(store, JOB)
    lost_dir = "/".join(LOST[:2]) + f"/{LOST[2]}__1/"
    for path, content in before.items():
        if path.startswith(lost_dir):  # moved under retries/1/, byte for byte
            assert after[lost_dir + "retries/1/" + path.removeprefix(lost_dir)] == content
        elif path != "result.json":
            assert after[path] == content, path  # config.json and every kept trial's files
    assert lost_dir + "error.txt" not in after
    result = JobResult.from_json(store.get_bytes(job_result_key("", JOB)))
    assert (result.total_trials, result.completed_trials, result.failed_trials) == (8, 8, 0)
    # The local copy is storage's: the old error.txt went with its move.
    local = local_tree(jobs_dir / JOB)
    assert local == after
    assert "removed 1 local files that storage no longer has there" in again.stderr


async def test_resume_refuses_a_job_that_is_still_running(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = workspace.job_file(JOB)
    await kube.create(
        ROLLOUT_JOBS,
        {"metadata": {"name": JOB}, "spec": {"agents": [{"name": "oracle"}],
         "datasets": [{"name": "alpha", "digest": "a" * 64}]}},
    )  # fmt: skip
    await kube.patch_status(ROLLOUT_JOBS, JOB, {"phase": "Running"}, kube.namespace)
    outcome = await cli.run(
        capsys, "run", str(job_file), *cli.cluster_args(), *cli.storage_args(), "--resume"
    )
    assert outcome.code == 1
    assert f"a RolloutJob {JOB} (Running) is still running" in outcome.stderr
    assert (await kube.get(ROLLOUT_JOBS, JOB))["metadata"].get("deletionTimestamp") is None


async def test_retry_error_needs_resume(
    cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = workspace.job_file(JOB)
    outcome = await cli.run(
        capsys, "run", str(job_file), "--local", "--retry-error", "agent_execution_timeout"
    )
    assert outcome.code == 1
    assert "--retry-error is read only with --resume" in outcome.stderr
