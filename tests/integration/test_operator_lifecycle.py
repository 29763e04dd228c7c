"""A RolloutJob's life beyond the happy path: status while it runs, its own storage, deletion
(its trials and Pods go with it) and ttlSecondsAfterFinished."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_kit import Cli
from operator_kit import (
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    publish,
    runner_message,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import EVENTS, PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.layout import job_result_key, trial_prefix
from rollout.api.resources import FINALIZER
from rollout.api.results import JobResult, TrialResult
from rollout.api.trials import trial_resource_name

pytestmark = pytest.mark.integration


def trial_key(job: str, task: str) -> str:
    """The trial's files in the test's bucket."""
    return trial_prefix("", job, "oracle", "set", task, 1)


async def trial_phase(kube: Kube, name: str, phase: str) -> bool:
    found = await kube.find(ROLLOUT_TRIALS, name)
    return ((found or {}).get("status") or {}).get("phase") == phase


def trial(job: str, task: str) -> str:
    return trial_resource_name(job, "oracle", "set", task, 1)


async def status_of(kube: Kube, job: str) -> dict[str, Any]:
    found = await kube.find(ROLLOUT_JOBS, job)
    return (found or {}).get("status") or {}


async def finish(kube: Kube, pod: str, reward: float) -> None:
    await kube.wait_for(lambda: kube.find(PODS, pod), what=f"Pod {pod}")
    await kube.run_pod(pod)
    await kube.finish_pod(pod, messages={"runner": runner_message(reward)})


async def test_the_job_status_follows_its_trials_while_it_runs(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "set", ["a", "b"]))
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("steady", [dataset], n_concurrent=1))
        await kube.wait_for(lambda: kube.find(PODS, trial("steady", "a")), what="first Pod")
        assert await kube.find(ROLLOUT_TRIALS, trial("steady", "b")) is None  # concurrency 1
        await finish(kube, trial("steady", "a"), 0.25)

        async def one_done() -> dict[str, Any] | None:
            status = await status_of(kube, "steady")
            return status if status.get("counts", {}).get("completed") == 1 else None

        midway = await kube.wait_for(one_done, what="the job status after the first trial")
        assert midway["phase"] == "Running"
        assert midway["counts"]["total"] == 2
        assert midway["meanReward"] == 0.25
        assert midway["passRate"] == 0.0
        assert "endedAt" not in midway
        assert midway["startedAt"]

        await finish(kube, trial("steady", "b"), 1.0)
        done = await kube.wait_for(lambda: job_phase(kube, "steady", "Completed"))
    assert done["status"]["meanReward"] == 0.625
    assert done["status"]["passRate"] == 0.5
    assert done["status"]["endedAt"] >= done["status"]["startedAt"]


async def test_a_job_with_its_own_storage_reads_and_writes_there(
    kube: Kube, make_s3_settings: Any, s3_settings: S3Settings, tmp_path: Path
) -> None:
    own = make_s3_settings(prefix="team/a")
    own_store = own.store()
    own_store.ensure_bucket()
    dataset = publish(own_store, make_dataset(tmp_path / "set", ["a"]))
    storage = {"bucket": own.location.bucket, "prefix": "team/a", "endpoint": own.location.endpoint,
               "pathStyle": True, "credentialsSecret": "team-a-s3"}  # fmt: skip
    config = operator_config(s3_settings)  # the operator's default bucket is another one
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("own", [dataset], storage=storage))
        await finish(kube, trial("own", "a"), 1.0)
        done = await kube.wait_for(lambda: job_phase(kube, "own", "Completed"))
    made = await kube.get(ROLLOUT_TRIALS, trial("own", "a"))
    assert made["spec"]["storage"] == storage
    key = job_result_key("team/a", "own")
    assert key == "team/a/jobs/own/result.json"
    assert done["status"]["resultUri"] == f"s3://{own.location.bucket}/{key}"
    assert JobResult.from_json(own_store.get_bytes(key)).pass_rate == 1.0
    assert s3_settings.store().list_keys("") == []  # nothing in the default bucket


async def test_deleting_a_running_job_takes_its_trials_and_pods_with_it(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    store = s3_settings.store()
    dataset = publish(store, make_dataset(tmp_path / "set", ["a", "b"]))
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("doomed", [dataset]))
        await kube.wait_for(lambda: kube.find(PODS, trial("doomed", "b")), what="both Pods")
        await kube.run_pod(trial("doomed", "a"))
        await kube.wait_for(lambda: trial_phase(kube, trial("doomed", "a"), "Running"))
        mark = kube.mark()
        await kube.delete(ROLLOUT_JOBS, "doomed")
        await kube.wait_for(
            lambda: _none_left(kube, "doomed"), what="the job, its trials and Pods gone"
        )
        await kube.settle(quiet=0.3)
    assert await kube.list(ROLLOUT_TRIALS, kube.namespace) == []
    assert await kube.list(PODS, kube.namespace) == []
    # Nothing was made again for a job on its way out (its trials vanish before it does).
    assert [
        str(c) for c in kube.calls(since=mark) if c.method == "POST" and c.resource != EVENTS
    ] == []
    # The trial whose runner never started got its record from the operator as the job went;
    # the running one's runner writes its own as its Pod stops (no kubelet plays here).
    record = TrialResult.from_json(store.get_bytes(trial_key("doomed", "b") + "result.json"))
    assert record.error is not None
    assert record.error.type == "internal_error"
    assert "was deleted (the job was cancelled)" in record.error.message
    assert record.rollout is not None
    assert record.rollout.failure_class == "infrastructure"
    assert store.exists(trial_key("doomed", "b") + "error.txt")
    assert store.list_keys(trial_key("doomed", "a")) == []


async def test_a_finished_job_is_deleted_after_its_ttl(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "set", ["a"]))
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        job = job_manifest("brief", [dataset], ttlSecondsAfterFinished=1)
        await kube.create(ROLLOUT_JOBS, job)
        await finish(kube, trial("brief", "a"), 1.0)
        done = await kube.wait_for(lambda: job_phase(kube, "brief", "Completed"))
        assert done["status"]["resultUri"]
        await kube.wait_for(lambda: _none_left(kube, "brief"), timeout=10, what="TTL deletion")
    deletes = [c for c in kube.calls() if c.method == "DELETE" and c.resource == ROLLOUT_JOBS]
    assert [c.name for c in deletes] == ["brief"]
    assert s3_settings.store().exists(job_result_key("", "brief"))  # results stay


async def _none_left(kube: Kube, job: str) -> bool:
    return (
        await kube.find(ROLLOUT_JOBS, job) is None
        and not await kube.list(ROLLOUT_TRIALS, kube.namespace, labels={"rollout.dev/job": job})
        and not await kube.list(PODS, kube.namespace, labels={"rollout.dev/job": job})
    )


async def test_a_job_deleted_with_no_operator_waits_until_rollout_release_frees_it(
    kube: Kube,
    s3_settings: S3Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The operator's finalizer outlives the operator: a job deleted while none runs stays,
    deleting (and its namespace with it), until `rollout release` removes the finalizer."""
    kube.needs_garbage_collector()  # owner references cascade
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "set", ["a", "b"]))
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("orphan", [dataset]))
        await kube.wait_for(lambda: kube.find(PODS, trial("orphan", "b")), what="both Pods")
    # The operator is gone (uninstalled, scaled to zero); the user cancels the job.
    (tmp_path / "home").mkdir()
    cli = Cli(kube.write_kubeconfig(tmp_path / "kubeconfig"), s3_settings, tmp_path / "home")
    cancel = await cli.run(capsys, "cancel", "orphan", *cli.cluster_args(), *cli.storage_args())
    assert cancel.code == 0, cancel.stderr
    assert "free it with: rollout release orphan" in cancel.stdout
    await kube.settle(quiet=0.3)
    stuck = await kube.get(ROLLOUT_JOBS, "orphan")
    assert stuck["metadata"]["deletionTimestamp"]
    assert stuck["metadata"]["finalizers"] == [FINALIZER]
    assert len(await kube.list(ROLLOUT_TRIALS, kube.namespace)) == 2

    early = await cli.run(capsys, "release", "orphan", "--grace", "600", *cli.cluster_args())
    assert early.code == 1
    assert "an operator may still be finishing it; left alone" in early.stdout
    released = await cli.run(capsys, "release", "--all", "--grace", "0", *cli.cluster_args())
    assert released.code == 0, released.stderr
    assert released.stdout.startswith(
        f"released RolloutJob orphan in namespace {kube.namespace} (deleted "
    )
    await kube.wait_for(lambda: kube.gone(ROLLOUT_JOBS, "orphan"), what="the job gone")
    await kube.wait_for(lambda: _none_left(kube, "orphan"), what="its trials and Pods gone")
    nothing = await cli.run(capsys, "release", "--all", *cli.cluster_args())
    assert nothing.stdout.startswith("no deleted RolloutJob waits for an operator in namespace")
