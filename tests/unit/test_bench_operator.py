"""The pure parts of benchmarks/operator_throughput.py (benchmarks/operator_bench_parts.py): the
manifests its cluster modes create, checked against the Kubernetes schema since no cluster runs
them here, the storage settings, and the arithmetic of its figures."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest

from paths import REPO
from rollout.api.resources import RolloutJob
from rollout.api.wire.termination import RunnerTimes, from_result, render
from rollout.controller.config import OperatorConfig
from rollout.controller.pod import render_trial_pod

sys.path.insert(0, str(REPO / "benchmarks"))

from operator_bench_parts import (
    NO_NODE_LABEL,
    BenchStorage,
    Rate,
    api_writes,
    benchmark_task,
    bound_by,
    ceiling_pair,
    containers_like,
    indexed_job,
    job_finished,
    namespace_manifest,
    percentile,
    ratio,
    rollout_job,
    runner_overhead,
    runner_times,
    template,
    unschedulable_selector,
    writes_between,
)

K8S_VERSION = "1.30"
DATASET = {"name": "bench-set", "digest": "a" * 64}


def valid(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def trial(**spec_changes: Any) -> dict[str, Any]:
    """A RolloutTrial as the operator creates it (the parts `render_trial_pod` reads)."""
    spec: dict[str, Any] = {
        "jobName": "ratio",
        "agent": {"name": "oracle"},
        "datasetName": "bench-set",
        "taskName": "noop",
        "attempt": 1,
        "image": "debian:bookworm-slim",
        "runnerImage": "registry.example/rollout-runner:1",
        "resources": {"cpus": "100m", "memory": "128Mi", "storage": "256Mi"},
        "timeouts": {
            "buildSec": 600,
            "agentInstallSec": 60,
            "agentSec": 60,
            "verifierSec": 60,
        },
        "storage": {"bucket": "b", "prefix": "p", "credentialsSecret": "rollout-bench-storage"},
        "taskContentHash": "c" * 64,
        **spec_changes,
    }
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutTrial",
        "metadata": {
            "name": "ratio-oracle-noop-1",
            "namespace": "rollout-bench-1",
            "uid": "trial-uid",
            "labels": {"rollout.dev/job": "ratio", "rollout.dev/trial": "ratio-oracle-noop-1"},
        },
        "spec": spec,
    }


def trial_pod() -> dict[str, Any]:
    return render_trial_pod(
        trial(),
        config=OperatorConfig(runner_image="registry.example/rollout-runner:1"),
        pod_name="like-a-trial",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


# --- the RolloutJobs -------------------------------------------------------------------------


def test_the_wide_job_keeps_its_pods_off_every_node_through_the_jobs_own_field() -> None:
    manifest = rollout_job(
        "wide",
        [DATASET],
        attempts=20,
        concurrency=2000,
        node_selector=unschedulable_selector("run-1"),
    )
    job = RolloutJob.model_validate(manifest)  # what the CRD's model accepts
    assert job.spec.pod.node_selector == {NO_NODE_LABEL: "run-1"}
    assert job.spec.n_concurrent_trials == 2000
    assert manifest["spec"]["pod"] == {"nodeSelector": {NO_NODE_LABEL: "run-1"}}


def test_the_job_ratios_trials_name_their_storage_runner_and_resources() -> None:
    bench = BenchStorage.from_env(
        {
            "ROLLOUT_BENCH_S3_ENDPOINT": "http://127.0.0.1:9000",
            "ROLLOUT_BENCH_S3_CLUSTER_ENDPOINT": "http://minio.minio:9000",
            "AWS_ACCESS_KEY_ID": "id",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert bench is not None
    manifest = rollout_job(
        "ratio",
        [DATASET],
        attempts=40,
        concurrency=20,
        storage=bench.job_storage("rollout-bench/run-1", "rollout-bench-storage"),
        runner_image="registry.example/rollout-runner:1",
        resources={"cpus": "100m", "memory": "128Mi", "storage": "256Mi"},
    )
    job = RolloutJob.model_validate(manifest)
    assert job.spec.storage is not None
    assert job.spec.storage.endpoint == "http://minio.minio:9000"  # how the Pods reach it
    assert job.spec.storage.credentials_secret == "rollout-bench-storage"
    assert job.spec.runner_image == "registry.example/rollout-runner:1"
    assert job.spec.environment.override_cpus is not None
    assert "secret" not in str(manifest)  # credentials go in the Secret only


def test_the_benchmark_task_is_a_task_the_oracle_solves() -> None:
    files = benchmark_task('registry.example/with "quotes":1')
    assert 'docker_image = "registry.example/with \\"quotes\\":1"' in files["task.toml"]
    assert files["solution/solve.sh"].startswith("#!/bin/bash")
    assert "echo 1 > /logs/verifier/reward.txt" in files["tests/test.sh"]


# --- the ceiling's pairs ---------------------------------------------------------------------


def test_a_ceiling_pair_copies_the_operators_objects_with_its_own_names_and_owner() -> None:
    server_trial = trial()
    server_trial["metadata"].update(
        resourceVersion="7",
        creationTimestamp="2025-01-01T00:00:00Z",
        managedFields=[{"manager": "x"}],
        ownerReferences=[{"kind": "RolloutJob", "name": "wide", "uid": "job-uid"}],
    )
    server_trial["status"] = {"phase": "Pending"}
    server_pod = trial_pod()
    server_pod["metadata"].update(uid="pod-uid", resourceVersion="8")
    server_pod["spec"]["nodeName"] = "node-1"
    server_pod["status"] = {"phase": "Pending"}

    pair = ceiling_pair(template(server_trial), template(server_pod), 3)
    assert pair.trial["metadata"]["name"] == "ceiling-000003"
    assert "ownerReferences" not in pair.trial["metadata"]  # no job in the ceiling's namespace
    assert "status" not in pair.trial
    assert {"uid", "resourceVersion", "managedFields"}.isdisjoint(pair.trial["metadata"])
    assert pair.trial["metadata"]["labels"]["rollout.dev/trial"] == "ceiling-000003"
    assert pair.trial["spec"] == server_trial["spec"]

    pod = pair.pod("new-trial-uid")
    assert pod["metadata"]["name"] == "ceiling-000003"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "new-trial-uid"
    assert pod["metadata"]["labels"]["rollout.dev/trial"] == "ceiling-000003"
    assert "nodeName" not in pod["spec"]
    assert "status" not in pod
    assert pod["spec"]["containers"] == server_pod["spec"]["containers"]
    assert server_pod["metadata"]["name"] == "like-a-trial"  # the templates are not changed
    valid({**pod, "metadata": {**pod["metadata"], "namespace": "ceiling"}})


# --- the Indexed Job -------------------------------------------------------------------------


def test_the_job_pods_have_the_trial_pods_images_requests_and_limits() -> None:
    pod = trial_pod()
    containers = containers_like(pod, 0.6)
    assert [c["name"] for c in containers] == ["runner", "environment"]
    for mine, theirs in zip(containers, pod["spec"]["containers"], strict=True):
        assert mine["image"] == theirs["image"]
        assert mine["resources"] == theirs["resources"]
        assert mine["imagePullPolicy"] == "IfNotPresent"  # never a forced pull
        assert mine["command"] == ["/bin/sh", "-c", "sleep 0.6"]
    assert containers[1]["resources"]["requests"]["cpu"] == "100m"


def test_the_indexed_job_is_a_valid_batch_job() -> None:
    job = indexed_job(
        "like-trials",
        completions=40,
        parallelism=20,
        containers=containers_like(trial_pod(), 0.6),
        termination_grace_sec=10,
    )
    valid(job)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 40, 20)
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    valid(namespace_manifest("rollout-bench-1"))


@pytest.mark.parametrize(
    ("conditions", "outcome"),
    [
        ([], None),
        ([{"type": "Complete", "status": "False"}], None),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], None),
        ([{"type": "Complete", "status": "True"}], "Complete"),
        ([{"type": "Failed", "status": "True"}], "Failed"),
    ],
)
def test_a_job_is_finished_by_its_conditions(
    conditions: list[dict[str, str]], outcome: str | None
) -> None:
    assert job_finished({"status": {"conditions": conditions}}) == outcome


# --- storage and figures ---------------------------------------------------------------------


def test_storage_comes_from_the_benchmarks_variables_or_is_the_local_moto() -> None:
    assert BenchStorage.from_env({}) is None
    bench = BenchStorage.from_env(
        {
            "ROLLOUT_BENCH_S3_ENDPOINT": "https://s3.example",
            "ROLLOUT_BENCH_S3_PATH_STYLE": "false",
            "ROLLOUT_BENCH_S3_REGION": "eu-west-1",
            "ROLLOUT_BENCH_S3_ACCESS_KEY_ID": "mine",
            "AWS_ACCESS_KEY_ID": "ambient",
        }
    )
    assert bench is not None
    assert (bench.bucket, bench.cluster_endpoint, bench.path_style) == (
        "rollout-bench",
        "https://s3.example",
        False,
    )
    assert bench.access_key_id == "mine"
    assert bench.job_storage("p", None) == {
        "bucket": "rollout-bench",
        "prefix": "p",
        "endpoint": "https://s3.example",
        "pathStyle": False,
        "region": "eu-west-1",
    }


def test_rates_and_their_ratio() -> None:
    trials, pods = Rate(40, 50.0), Rate(40, 40.0)
    assert trials.per_second == pytest.approx(0.8)
    assert ratio(trials, pods) == pytest.approx(0.8)
    assert str(trials) == "40 in 50.0 s = 0.80/s"
    assert Rate(1, 0.0).per_second == float("inf")
    assert bound_by(Rate(90, 1.0), Rate(100, 1.0)).startswith("the API (90%")
    assert bound_by(Rate(50, 1.0), Rate(100, 1.0)).startswith("the operator (50%")


def test_the_operators_writes_are_read_from_its_metrics() -> None:
    before = api_writes(
        "# HELP rollout_api_writes_total Writes.\n"
        "# TYPE rollout_api_writes_total counter\n"
        'rollout_api_writes_total{resource="pods",verb="create"} 2.0\n'
        'rollout_api_writes_total{resource="rollouttrials",verb="create"} 2.0\n'
        'rollout_trials_finished_total{phase="Succeeded",error_type="",failure_class=""} 2.0\n'
    )
    after = api_writes(
        'rollout_api_writes_total{resource="pods",verb="create"} 42.0\n'
        'rollout_api_writes_total{resource="rollouttrials",verb="create"} 2.0\n'
        'rollout_api_writes_total{resource="rollouttrials",verb="patch_status"} 80.0\n'
    )
    assert before == {("pods", "create"): 2.0, ("rollouttrials", "create"): 2.0}
    assert writes_between(before, after) == {
        ("pods", "create"): 40.0,
        ("rollouttrials", "patch_status"): 80.0,
    }


def _runner_pod(message: str | None, container: str = "runner") -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "message": message}} if message is not None else {}
    return {
        "metadata": {"name": "ratio-1"},
        "status": {
            "containerStatuses": [
                {"name": "environment", "state": {"running": {}}},
                {"name": container, "state": state or {"running": {}}},
            ]
        },
    }


def test_a_runners_times_are_read_from_its_termination_message() -> None:
    # The runner's own rendering of its message, so the two cannot drift apart.
    times = RunnerTimes(
        started_at=datetime(2026, 1, 1, 0, 0, 0, 0, tzinfo=UTC),
        trial_started_at=datetime(2026, 1, 1, 0, 0, 0, 350_000, tzinfo=UTC),
        environment_ready_at=datetime(2026, 1, 1, 0, 0, 0, 200_000, tzinfo=UTC),
        ended_at=datetime(2026, 1, 1, 0, 0, 0, 530_000, tzinfo=UTC),
    )
    message = render(from_result(None, result_uri=None, upload_error=None, runner=times))
    read = runner_times(_runner_pod(message.decode()), "runner")
    assert read == times.model_dump(by_alias=False)
    # Still running, another container's message, none, or an older runner's: nothing.
    assert runner_times(_runner_pod(None), "runner") is None
    assert runner_times(_runner_pod(message.decode(), container="other"), "runner") is None
    assert runner_times(_runner_pod(""), "runner") is None
    assert runner_times(_runner_pod('{"reward": 1.0}'), "runner") is None
    assert runner_times({"metadata": {"name": "p"}}, "runner") is None

    rows = runner_overhead([read, read])
    assert [(label, round(p50), round(p90)) for label, p50, p90 in rows] == [
        ("environment ready -> runner end", 330, 330),
        ("runner start -> trial start (its start-up)", 350, 350),
        ("runner start -> environment ready", 200, 200),
    ]


def test_percentiles_are_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0]
    assert percentile(values, 0.5) == 6.0
    assert percentile(values, 0.9) == 10.0
    assert percentile([3.0], 0.9) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
