"""The operator's side of the bridge: a RolloutJob whose trials run on a remote Docker engine gets
its RolloutTrials, made as any job's are, and no Pod, no image build: those trials are the
bridge's. Deleted before a bridge took them, they get the operator's cancellation record."""

from __future__ import annotations

from pathlib import Path

import pytest
from operator_kit import (
    job_manifest,
    make_dataset,
    operator_config,
    operator_memo,
    publish,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.layout import trial_prefix
from rollout.api.resources import UNBUILT_IMAGE
from rollout.api.results import TrialResult
from rollout.api.trials import trial_resource_name

pytestmark = pytest.mark.integration

REMOTE = {"type": "docker", "dockerHost": "tcp://docker.example:2376", "forceBuild": False}


def trial(job: str, task: str) -> str:
    return trial_resource_name(job, "oracle", "set", task, 1)


async def test_a_remote_docker_job_gets_trials_for_the_bridge_and_no_pod(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "set", ["a"]))
    config = operator_config(s3_settings)
    job = job_manifest("remote", [dataset], environment=REMOTE, maxInfraRetries=1)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job)
        made = await kube.wait_for(lambda: kube.find(ROLLOUT_TRIALS, trial("remote", "a")))
        await kube.settle(quiet=0.5)
        made = await kube.get(ROLLOUT_TRIALS, trial("remote", "a"))
        job_status = (await kube.get(ROLLOUT_JOBS, "remote"))["status"]
    spec = made["spec"]
    assert spec["environmentType"] == "docker"
    # The label the bridge's watch selects its trials by.
    assert made["metadata"]["labels"]["rollout.dev/environment"] == "docker"
    assert spec["dockerHost"] == "tcp://docker.example:2376"
    assert spec["maxInfraRetries"] == 1
    assert spec.get("forceBuild", False) is False  # (the CRD defaults it)
    assert "imageBuild" not in spec
    assert await kube.list(PODS, kube.namespace) == []
    assert (made.get("status") or {}).get("phase") in (None, "Pending")  # nobody claimed it
    conditions = {c["type"]: c["status"] for c in job_status["conditions"]}
    assert conditions["Valid"] == "True"
    assert job_status["phase"] == "Running"


async def test_a_remote_docker_trial_of_a_task_without_an_image_is_left_to_the_bridge_to_build(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """Without a registry the operator fails a Pod trial whose image needs a build; a bridge
    trial goes to the bridge, whose engine builds it from environment/."""
    dataset = publish(
        s3_settings.store(),
        make_dataset(tmp_path / "set", ["a"], image=None, dockerfile="FROM busybox\nRUN true\n"),
    )
    job = job_manifest("build", [dataset], environment={**REMOTE, "forceBuild": True})
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await kube.create(ROLLOUT_JOBS, job)
        made = await kube.wait_for(lambda: kube.find(ROLLOUT_TRIALS, trial("build", "a")))
        await kube.settle(quiet=0.5)
        made = await kube.get(ROLLOUT_TRIALS, trial("build", "a"))
    assert made["spec"]["image"] == UNBUILT_IMAGE
    assert made["spec"]["forceBuild"] is True
    assert (made.get("status") or {}).get("phase") in (None, "Pending")  # not failed


async def test_a_bridge_trial_nobody_claimed_gets_the_cancellation_record_when_its_job_goes(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    store = s3_settings.store()
    dataset = publish(store, make_dataset(tmp_path / "set", ["a"]))
    job = job_manifest("gone", [dataset], environment=REMOTE)
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await kube.create(ROLLOUT_JOBS, job)
        await kube.wait_for(lambda: kube.find(ROLLOUT_TRIALS, trial("gone", "a")))
        await kube.delete(ROLLOUT_JOBS, "gone")
        await kube.wait_for(
            lambda: _gone(kube, "gone"), what="the job and its trial gone", timeout=30
        )
    key = trial_prefix("", "gone", "oracle", "set", "a", 1) + "result.json"
    record = TrialResult.from_json(store.get_bytes(key))
    assert record.error is not None
    assert record.error.type == "internal_error"
    assert "was deleted (the job was cancelled)" in record.error.message


async def _gone(kube: Kube, job: str) -> bool:
    return await kube.find(ROLLOUT_JOBS, job) is None and not await kube.list(
        ROLLOUT_TRIALS, kube.namespace
    )
