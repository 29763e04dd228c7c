"""Faults 2 and 3 of issue 20 with real runners: each trial Pod run as the kubelet runs it
(`kubeharness.kubelet.TrialPodKubelet`: the shim in a fake container, `rollout-runner` as a
process, storage a real S3 endpoint), so that what is asserted is what a runner does.

2. Object storage unreachable mid-job (connections refused, the open ones reset) for
   `OUTAGE_SEC`: no result is lost. The runner retries every storage call under the storage
   module's policy (`rollout.storage.retry.RetryPolicy`: 20 attempts with jittered exponential
   backoff of 0.5 s doubling to 15 s, within 60 s), and the trials are not failed while it is
   down. With instant refusals the attempts, not the 60 s, bound a call: 20 outlast a 30 s
   outage (10 did not, about one call in five: simulated), which the e2e test
   (tests/e2e/test_faults_e2e.py, a 30 s outage) shows on a cluster.
3. A trial Pod deleted while its agent runs: the kubelet stops it (SIGTERM), the runner uploads
   what it has, and the trial is retried in a new Pod under spec.maxInfraRetries; the first try's
   files are kept under the trial's `retries/1/`, the second try's at the seed's paths. Also when
   the operator first sees the Pod once the stopped runner has reported (it was down, and the
   Pod stayed Terminating): the runner's internal_error is then the Pod's loss, not the trial's
   outcome (it used to fail the trial: fixed in `controller.podstatus`). And when the Pod was
   deleted before its trial said Running, and was gone by the time the operator came back: its
   runner's files in storage say that it ran (`controller.trials.TryCheck`). And when it was
   force-deleted, gone from the API while its runner still uploads: the retry waits for that.

The other faults, and where each is tested: test_faults.py's docstring.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from faults_kit import Outage
from operator_kit import (
    create_storage_secret,
    job_manifest,
    job_phase,
    make_task,
    operator_config,
    operator_memo,
    publish,
)
from s3_kit import S3Settings

from fakecontainer import requires_fake_container
from kubeharness.kube import Kube
from kubeharness.kubelet import TrialPodKubelet
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.layout import task_archive_key, trial_prefix
from rollout.api.results import TrialResult
from rollout.api.taskdir import task_content_hash
from rollout.api.trials import child_name, trial_resource_name
from rollout.datasets.bundle import task_archive
from rollout.storage import ObjectStore
from rollout.storage.retry import RetryPolicy
from s3server import S3Server

pytestmark = [pytest.mark.integration, requires_fake_container()]

OUTAGE_SEC = 4.0
AGENT_SEC = 2
"""How long the oracle's solve.sh runs: the outage and the deletion fall within it."""
SECRET = "storage-credentials"
SOLVE = f"#!/bin/sh\ntouch /logs/agent/started\nsleep {AGENT_SEC}\necho solved\n"


def publish_task(store: ObjectStore, root: Path) -> dict[str, str]:
    """A task whose oracle marks its start in /logs/agent/ and takes AGENT_SEC; published whole
    (the runner fetches its archive)."""
    task = make_task(root / "slow-set", "slow")
    (task / "solution" / "solve.sh").write_text(SOLVE)
    store.put_bytes(task_archive_key("", task_content_hash(task)), task_archive(task))
    return publish(store, task.parent)


def agent_started(kubelet: TrialPodKubelet, pod: str) -> bool:
    return (kubelet.workdir / pod / "environment" / "logs" / "agent" / "started").exists()


def trial_names(job: str, dataset: str, attempts: int) -> list[str]:
    return [trial_resource_name(job, "oracle", dataset, "slow", n) for n in range(1, attempts + 1)]


async def trial_phase(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    trial = await kube.find(ROLLOUT_TRIALS, name)
    status = (trial or {}).get("status") or {}
    return status if status.get("phase") == phase else None


async def test_storage_unreachable_mid_job_loses_no_result(
    kube: Kube, s3_server: S3Server, make_s3_settings: Any, tmp_path: Path
) -> None:
    async with Outage(s3_server.port) as outage:
        through_proxy = make_s3_settings(endpoint_url=outage.endpoint_url)
        bucket = through_proxy.location.bucket
        store = make_s3_settings(bucket=bucket).store()  # the test's own reads: not cut off
        store.ensure_bucket()
        dataset = publish_task(store, tmp_path)
        await create_storage_secret(kube, through_proxy, SECRET)
        config = operator_config(through_proxy, storage_credentials_secret=SECRET)
        names = trial_names("outage", dataset["name"], 3)
        async with (
            kube.operator(memo=operator_memo(kube, config)),
            TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet") as kubelet,
        ):
            # At warning, the runners log each storage retry.
            job = job_manifest("outage", [dataset], n_attempts=3, n_concurrent=3)
            await kube.create(ROLLOUT_JOBS, {**job, "spec": {**job["spec"], "logLevel": "warning"}})
            await kube.wait_for(
                lambda: all(agent_started(kubelet, name) for name in names),
                timeout=60,
                what="every trial's agent running",
            )
            # The agents run on; their uploads come while the store is unreachable.
            await outage.down()
            await asyncio.sleep(OUTAGE_SEC)
            await outage.up()
            job = await kube.wait_for(
                lambda: job_phase(kube, "outage", "Completed"), timeout=90, what="completed"
            )

    counts = job["status"]["counts"]
    assert (counts["completed"], counts["failed"]) == (3, 0)
    retried = [
        name
        for name in names
        if f"failed on attempt 1 of {RetryPolicy().max_attempts}" in kubelet.outcomes[name].stderr
    ]
    assert retried, "no runner met the outage: " + kubelet.outcomes[names[0]].stderr
    for attempt, name in enumerate(names, start=1):
        status = (await kube.get(ROLLOUT_TRIALS, name))["status"]
        assert (status["phase"], status["reward"]) == ("Succeeded", 1.0), status
        assert status.get("infraRetries", 0) == 0
        message = json.loads(kubelet.outcomes[name].message)
        assert message["upload_error"] is None
        prefix = trial_prefix("", "outage", "oracle", dataset["name"], "slow", attempt)
        record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert (record.reward, record.error) == (1.0, None)
        assert store.exists(prefix + "logs/agent/started")
        assert store.exists(prefix + "logs/verifier/reward.txt")


async def test_a_trial_pod_deleted_mid_run_is_retried_and_its_first_try_is_kept(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    dataset = publish_task(store, tmp_path)
    await create_storage_secret(kube, s3_settings, SECRET)
    config = operator_config(s3_settings, storage_credentials_secret=SECRET)
    (trial,) = trial_names("deleted", dataset["name"], 1)
    retry_pod = child_name(trial, "r1")
    async with (
        kube.operator(memo=operator_memo(kube, config)),
        TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet") as kubelet,
    ):
        await kube.create(ROLLOUT_JOBS, job_manifest("deleted", [dataset], maxInfraRetries=1))
        await kube.wait_for(
            lambda: agent_started(kubelet, trial), timeout=60, what="the agent running"
        )
        await kube.delete(PODS, trial)  # as `kubectl delete pod` does, with its grace period
        status = await kube.wait_for(
            lambda: trial_phase(kube, trial, "Succeeded"), timeout=60, what="the retry succeeds"
        )
        await kube.wait_for(lambda: job_phase(kube, "deleted", "Completed"), what="completed")

    assert status["infraRetries"] == 1
    assert status["podName"] == retry_pod
    assert status["reward"] == 1.0
    # The first runner was stopped, and said so.
    first = json.loads(kubelet.outcomes[trial].message)
    assert first["error"]["type"] == "internal_error"
    assert "SIGTERM" in first["error"]["message"]
    assert kubelet.outcomes[trial].exit_code == 0
    # Its files are kept under retries/1/; the second try's are at the seed's paths.
    prefix = trial_prefix("", "deleted", "oracle", dataset["name"], "slow", 1)
    kept = TrialResult.from_json(store.get_bytes(prefix + "retries/1/result.json"))
    assert kept.error is not None
    assert kept.error.type == "internal_error"
    assert "SIGTERM" in kept.error.message
    assert store.exists(prefix + "retries/1/logs/agent/started")
    assert store.exists(prefix + "retries/1/error.txt")
    final = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert (final.reward, final.error) == (1.0, None)
    assert final.rollout is not None
    assert final.rollout.tries == 2
    pods_made = [c.name for c in kube.calls() if c.method == "POST" and c.resource == PODS]
    assert pods_made == [trial, retry_pod]


async def test_a_deleted_pod_still_terminating_when_the_operator_looks_is_retried(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """The operator sees the deleted Pod only once its stopped runner has reported (it was down
    meanwhile; a kubelet unmounting volumes keeps such a Pod Terminating): the runner's
    internal_error is the Pod's loss, to retry, not the trial's outcome."""
    store = s3_settings.store()
    dataset = publish_task(store, tmp_path)
    await create_storage_secret(kube, s3_settings, SECRET)
    config = operator_config(s3_settings, storage_credentials_secret=SECRET)
    (trial,) = trial_names("lingers", dataset["name"], 1)
    async with TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet", linger=60) as kubelet:
        async with kube.operator(memo=operator_memo(kube, config)) as operator:
            await kube.create(ROLLOUT_JOBS, job_manifest("lingers", [dataset], maxInfraRetries=1))
            await kube.wait_for(
                lambda: agent_started(kubelet, trial), timeout=60, what="the agent running"
            )
            await operator.kill()
        await kube.delete(PODS, trial)
        await kube.wait_for(lambda: trial in kubelet.outcomes, timeout=60, what="runner stopped")
        terminating = await kube.get(PODS, trial)
        assert terminating["metadata"]["deletionTimestamp"]
        async with kube.operator(memo=operator_memo(kube, config)):
            status = await kube.wait_for(
                lambda: _trial_ended(kube, trial), timeout=90, what="the trial ends"
            )
    assert (status["phase"], status.get("infraRetries")) == ("Succeeded", 1), status


async def test_a_pod_deleted_unseen_before_its_trial_said_running_is_a_lost_try(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """Deleted in its runner's first seconds (the trial's status not yet Running) while the
    operator is down, the Pod is gone when the operator starts again: nothing in the API says
    it was ever made, and it used to be made again as the same try over the first's files. Its
    runner's files in storage say it ran (`controller.trials.TryCheck`): the trial is retried,
    the first try's files kept under retries/1/."""
    store = s3_settings.store()
    dataset = publish_task(store, tmp_path)
    await create_storage_secret(kube, s3_settings, SECRET)
    config = operator_config(s3_settings, storage_credentials_secret=SECRET)
    (trial,) = trial_names("unseen", dataset["name"], 1)
    async with TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet") as kubelet:
        async with kube.operator(memo=operator_memo(kube, config)) as operator:
            await kube.create(ROLLOUT_JOBS, job_manifest("unseen", [dataset], maxInfraRetries=1))
            await kube.wait_for(
                lambda: agent_started(kubelet, trial), timeout=60, what="the agent running"
            )
            await operator.kill()
        assert ((await kube.get(ROLLOUT_TRIALS, trial)).get("status") or {}).get("phase") in (
            None,
            "Pending",
        )
        await kube.delete(PODS, trial)
        await kube.wait_for(lambda: _gone(kube, trial), timeout=60, what="the Pod gone")
        async with kube.operator(memo=operator_memo(kube, config)):
            status = await kube.wait_for(
                lambda: _trial_ended(kube, trial), timeout=90, what="the trial ends"
            )

    assert (status["phase"], status.get("infraRetries")) == ("Succeeded", 1), status
    assert status["podName"] == child_name(trial, "r1")
    prefix = first_try_kept(store, "unseen", dataset)
    assert store.exists(prefix + "retries/1/logs/agent/started")


async def test_a_force_deleted_pods_runner_is_waited_for_before_its_files_are_kept(
    kube: Kube, s3_server: S3Server, make_s3_settings: Any, tmp_path: Path
) -> None:
    """A force-deleted Pod is gone from the API at once while its runner, stopped, still
    uploads what it has: here for the seconds its storage is out of reach. The retry (and the
    keeping of the first try's files before it) waits for it (`trials.OLD_RUNNER_MARGIN_SEC`
    from the Pod's going), so the first try's files all go under retries/1/ and none is left
    among the second try's. The operator reaches storage directly, the runners through a proxy
    that goes down."""
    async with Outage(s3_server.port) as outage:
        direct = make_s3_settings()
        store = direct.store()
        store.ensure_bucket()
        through_proxy = make_s3_settings(
            endpoint_url=outage.endpoint_url, bucket=direct.location.bucket
        )
        dataset = publish_task(store, tmp_path)
        await create_storage_secret(kube, direct, SECRET)
        storage = {
            **through_proxy.location.model_dump(mode="json", by_alias=True, exclude_none=True),
            "credentialsSecret": SECRET,
        }
        config = operator_config(direct, storage_credentials_secret=SECRET)
        (trial,) = trial_names("forced", dataset["name"], 1)
        async with (
            kube.operator(memo=operator_memo(kube, config)),
            TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet") as kubelet,
        ):
            job = job_manifest("forced", [dataset], maxInfraRetries=1, storage=storage)
            await kube.create(ROLLOUT_JOBS, job)
            await kube.wait_for(
                lambda: agent_started(kubelet, trial), timeout=60, what="the agent running"
            )
            await outage.down()
            # As `kubectl delete pod --force --grace-period=0`: gone from the API at once (the
            # test kubelet's finalizer let go first), its kubelet stopping it after.
            await kube.patch(PODS, trial, {"metadata": {"finalizers": None}})
            await kube.delete(PODS, trial)
            await kube.wait_for(lambda: _gone(kube, trial), timeout=10, what="the Pod gone")
            await asyncio.sleep(3)  # the stopped runner's uploads wait for storage
            await outage.up()
            status = await kube.wait_for(
                lambda: _trial_ended(kube, trial), timeout=90, what="the trial ends"
            )

    assert (status["phase"], status.get("infraRetries")) == ("Succeeded", 1), status
    first_try_kept(store, "forced", dataset)


def first_try_kept(store: ObjectStore, job: str, dataset: Mapping[str, str]) -> str:
    """The job's one trial ran twice: its stopped first try's files under retries/1/, and the
    second try's, alone, at the seed's paths. Its prefix."""
    prefix = trial_prefix("", job, "oracle", dataset["name"], "slow", 1)
    kept = TrialResult.from_json(store.get_bytes(prefix + "retries/1/result.json"))
    assert kept.error is not None
    assert "SIGTERM" in kept.error.message
    assert store.exists(prefix + "retries/1/error.txt")
    final = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert (final.reward, final.error) == (1.0, None)
    assert final.rollout is not None
    assert final.rollout.tries == 2
    assert not store.exists(prefix + "error.txt")  # the first try's, among the second's
    return prefix


async def _gone(kube: Kube, pod: str) -> bool:
    return await kube.find(PODS, pod) is None


async def _trial_ended(kube: Kube, name: str) -> dict[str, Any] | None:
    trial = await kube.find(ROLLOUT_TRIALS, name)
    status = (trial or {}).get("status") or {}
    return status if status.get("phase") in ("Succeeded", "Failed") else None
