"""Issue 20's fault tests on the loopback API, and where each of its five faults is tested.

1. The operator SIGKILLed again and again through a 200-trial job: every (agent, task,
   attempt) runs exactly once and no Pod is left. Here, the `rollout-operator` process killed
   six times through the job (the job takes seconds on the loopback API, where a cluster's
   takes minutes); in-process kills at chosen points, and a single SIGKILL of a 12-trial job,
   are in test_operator_restarts.py; on a cluster, the operator Deployment's Pod deleted with
   grace 0 every 20 s (tests/e2e/test_faults_e2e.py).
2. Object storage unreachable mid-job loses no result: test_faults_storage.py (real runner
   processes, the endpoint refusing connections for a few seconds) and the e2e test (30 s).
3. A trial Pod deleted mid-run is retried under spec.maxInfraRetries and its first try's files
   stay under `retries/1/`: test_faults_storage.py (a real runner stopped as the kubelet stops
   it, also with the operator away until the runner has reported); the operator's side with a
   fake runner in test_operator_pods.py
   (`test_a_pod_deleted_under_a_running_trial_is_replaced_and_the_trial_finishes`, evictions in
   `test_an_evicted_pod_is_retried_then_the_trial_fails_with_internal_error`); and the e2e test.
4. A RolloutJob deleted mid-run leaves no Pod, trial or finalizer: with the operator running in
   test_operator_lifecycle.py (`test_deleting_a_running_job_takes_its_trials_and_pods_with_it`);
   with the operator killed at the time of the deletion and started later, below; with no
   operator ever coming back, `rollout release` (test_operator_lifecycle.py); on a cluster, the
   e2e test.
5. 50 malformed RolloutJobs, each refused by the API server (the CRD's schema) or ending with
   an Invalid condition while a valid job beside them completes: test_faults_malformed.py, on
   both backends with the same expected answers (the emulator refuses what kube-apiserver
   refuses, in its words).

Each test runs on the session's backend (a real kube-apiserver where installed, else the
emulator): `ROLLOUT_TEST_KUBE=real|emulator` chooses.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from operator_kit import (
    BackgroundKubelet,
    OperatorProcess,
    job_manifest,
    job_phase,
    make_dataset,
    publish,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.layout import job_result_key
from rollout.api.results import JobResult
from rollout.api.trials import enumerate_trials, trial_resource_name

pytestmark = pytest.mark.integration

AGENTS = [{"name": "oracle"}, {"name": "claude", "execute": "claude -p hello"}]
TASKS = [f"task-{i:02d}" for i in range(10)]
ATTEMPTS = 10  # 2 agents x 10 tasks x 10 attempts: 200 trials
KILLS_AT = (15, 45, 80, 115, 150, 185)
"""The operator is SIGKILLed as soon as this many trials have finished: six times through the
job, each at whatever point of its work it is (it works on 25 trials at once: creating trials and
Pods, patching statuses, deleting Pods). A cluster's e2e test kills it every 20 s instead; here
the whole job takes a few seconds."""


def trial_names(job: str, dataset: str) -> list[str]:
    keys = enumerate_trials([a["name"] for a in AGENTS], [(dataset, TASKS)], ATTEMPTS)
    return [trial_resource_name(job, k.agent, k.dataset, k.task, k.attempt) for k in keys]


def posted(kube: Kube, resource: str) -> Counter[str | None]:
    """The POSTs of `resource` by name. A request the SIGKILL cut off mid-body has no name in a
    real API server's audit log (no object was read from it, so none was made): not counted."""
    return Counter(
        c.name for c in kube.calls() if c.method == "POST" and c.resource == resource and c.name
    )


async def test_an_operator_sigkilled_six_times_through_a_200_trial_job_runs_each_trial_once(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    dataset = publish(store, make_dataset(tmp_path / "many", TASKS))
    await kube.create(
        ROLLOUT_JOBS,
        job_manifest("killed", [dataset], agents=AGENTS, n_attempts=ATTEMPTS, n_concurrent=25),
    )
    operator = OperatorProcess(kube, tmp_path, s3_settings)
    async with BackgroundKubelet(kube):
        try:
            for count in KILLS_AT:
                await operator.start()
                await kube.wait_for(
                    lambda count=count: _finished_at_least(kube, count),
                    timeout=60,
                    what=f"{count} trials finished",
                )
                await operator.kill()
            await operator.start()
            await kube.wait_for(
                lambda: job_phase(kube, "killed", "Completed"), timeout=60, what="completed"
            )
            await kube.settle(quiet=0.3)
        finally:
            await operator.kill()

    names = trial_names("killed", dataset["name"])
    # Each (agent, task, attempt) has one trial and ran in one Pod, each created exactly once.
    assert posted(kube, ROLLOUT_TRIALS) == Counter(names)
    assert posted(kube, PODS) == Counter(names)
    trials = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    assert sorted(t["metadata"]["name"] for t in trials) == sorted(names)
    for trial in trials:
        status = trial["status"]
        assert (status["phase"], status["reward"]) == ("Succeeded", 1.0), trial["metadata"]
        assert status.get("infraRetries", 0) == 0
    job = await kube.get(ROLLOUT_JOBS, "killed")
    counts = job["status"]["counts"]
    assert (counts["total"], counts["completed"], counts["failed"]) == (200, 200, 0)
    assert job["status"]["passRate"] == 1.0
    result = JobResult.from_json(store.get_bytes(job_result_key("", "killed")))
    assert (result.total_trials, result.completed_trials) == (200, 200)
    assert await kube.list(PODS, kube.namespace) == []  # no Pod left


async def test_a_job_deleted_while_the_operator_is_down_is_gone_once_it_is_back(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """The operator killed mid-job, the job deleted meanwhile (it waits on the operator's
    finalizer), the operator started again: the job, its trials and Pods all go, no finalizer
    is left anywhere, and nothing was made for the job after its deletion."""
    kube.needs_garbage_collector()  # owner references cascade
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "few", ["a", "b", "c"]))
    await kube.create(ROLLOUT_JOBS, job_manifest("doomed", [dataset], n_concurrent=2))
    operator = OperatorProcess(kube, tmp_path, s3_settings)
    await operator.start()
    try:
        pods = await kube.wait_for(
            lambda: _two(kube.list(PODS, kube.namespace)), what="two trial Pods"
        )
        await kube.run_pod(pods[0]["metadata"]["name"])  # one running, one not started
        await operator.kill()
        deleted_at = kube.mark()
        await kube.delete(ROLLOUT_JOBS, "doomed")
        await kube.settle(quiet=0.3)
        stuck = await kube.get(ROLLOUT_JOBS, "doomed")  # the finalizer holds it...
        assert stuck["metadata"]["deletionTimestamp"]
        assert len(await kube.list(ROLLOUT_TRIALS, kube.namespace)) == 2  # ...and its trials

        await operator.start()
        await kube.wait_for(lambda: _nothing_left(kube), timeout=60, what="the job's objects gone")
        await kube.settle(quiet=0.3)
    finally:
        await operator.kill()
    assert await _nothing_left(kube)
    made = [
        str(c)
        for c in kube.calls(since=deleted_at)
        if c.method == "POST" and c.resource in (ROLLOUT_TRIALS, PODS)
    ]
    assert made == []  # no trial or Pod was made for a job on its way out


async def _finished_at_least(kube: Kube, count: int) -> bool:
    trials = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    return sum(1 for t in trials if (t.get("status") or {}).get("phase") == "Succeeded") >= count


async def _two(listing: Any) -> list[dict[str, Any]] | None:
    items = await listing
    return items if len(items) >= 2 else None


async def _nothing_left(kube: Kube) -> bool:
    """No RolloutJob, RolloutTrial or Pod in the test's namespace, so no finalizer either."""
    for resource in (ROLLOUT_JOBS, ROLLOUT_TRIALS, PODS):
        if await kube.list(resource, kube.namespace):
            return False
    return True
