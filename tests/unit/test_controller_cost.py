"""What a trial's Pod cost: its requests (both containers and the Pod's overhead) x the hours
from its start on a node to the runner's end, at the unit prices; from Pods as the API returns
them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from rollout.controller.config import OperatorConfig
from rollout.controller.cost import (
    hourly_rate,
    pod_cost,
    pod_end,
    pod_requests,
    pod_started_at,
    runner_finished_at,
)
from rollout.controller.index import slim_pod
from rollout.controller.pod import render_trial_pod
from rollout.controller.prices import GIB, UnitPrices

MIB = 2**20
CREATED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
STARTED = CREATED + timedelta(seconds=4)  # the kubelet took the Pod
RUNNER_ENDED = STARTED + timedelta(minutes=30)
RUNNER_IMAGE = "registry.example.com/rollout-runner:0.1.0"
TASK_IMAGE = "ghcr.io/laude-institute/t-bench/hello-world:latest"
CONFIG = OperatorConfig(runner_image=RUNNER_IMAGE)

TRIAL = {
    "metadata": {"name": "t", "namespace": "evals", "uid": "u-1"},
    "spec": {
        "jobName": "job",
        "agent": {"name": "oracle"},
        "datasetName": "terminal-bench",
        "taskName": "hello-world",
        "attempt": 1,
        "taskContentHash": "a" * 64,
        "image": TASK_IMAGE,
        "resources": {"cpus": "1500m", "memory": "2Gi", "storage": "8Gi", "gpus": 1},
        "timeouts": {"agentInstallSec": 300, "agentSec": 600, "verifierSec": 600, "buildSec": 600},
        "storage": {"bucket": "results"},
        "runnerImage": RUNNER_IMAGE,
    },
}

PRICES = UnitPrices(
    per_hour={"cpu": 0.04, "memory": 0.004, "ephemeral-storage": 0.0002, "nvidia.com/gpu": 2.0}
)


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated(name: str, image: str, finished: datetime, message: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": ts(STARTED + timedelta(seconds=3)),
        "finishedAt": ts(finished),
        "containerID": f"containerd://{'d' * 64}",
    }
    if message:
        state["message"] = message
    return {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{'b' * 64}",
        "containerID": f"containerd://{'d' * 64}",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"terminated": state},
    }


def finished_pod() -> dict[str, Any]:
    """The operator's trial Pod as the API returns it once the trial ran: scheduled, started by
    the kubelet at STARTED, both containers terminated (the runner at RUNNER_ENDED)."""
    pod = render_trial_pod(TRIAL, config=CONFIG, pod_name="t", created_at=CREATED)
    pod["metadata"].update(uid="pod-uid", resourceVersion="812", creationTimestamp=ts(CREATED))
    pod["spec"]["nodeName"] = "worker-3"
    pod["status"] = {
        "phase": "Succeeded",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(STARTED)},
            {"type": "Ready", "status": "False", "lastTransitionTime": ts(RUNNER_ENDED)},
        ],
        "hostIP": "10.0.0.7",
        "podIP": "10.244.1.9",
        "qosClass": "Burstable",
        "startTime": ts(STARTED),
        "containerStatuses": [
            terminated("environment", TASK_IMAGE, RUNNER_ENDED + timedelta(seconds=1)),
            terminated("runner", RUNNER_IMAGE, RUNNER_ENDED, message='{"reward": 1.0}'),
        ],
    }
    return pod


def test_the_trial_pods_requests_are_both_containers_summed() -> None:
    pod = finished_pod()
    runner = next(c for c in pod["spec"]["containers"] if c["name"] == "runner")
    # The runner sidecar's own requests: small, but held for the whole trial too.
    assert runner["resources"]["requests"] == {
        "cpu": "50m",
        "memory": "128Mi",
        "ephemeral-storage": "64Mi",
    }
    assert pod_requests(pod) == {
        "cpu": Decimal("1.55"),
        "memory": 2 * GIB + 128 * MIB,
        "ephemeral-storage": 8 * GIB + 64 * MIB,
        "nvidia.com/gpu": 1,
    }


def test_quantities_in_every_form_the_api_writes_are_read() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1G"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}},
                {"name": "c", "resources": {"requests": {"cpu": "0.25", "example.com/foo": "1e3"}}},
                {"name": "d", "resources": {"requests": {"memory": "1.5Gi", "cpu": "100u"}}},
                {"name": "e"},  # requests nothing (BestEffort)
            ]
        }
    }
    assert pod_requests(pod) == {
        "cpu": Decimal("1.7501"),
        "memory": 10**9 + 64 * MIB + 3 * GIB // 2,
        "example.com/foo": 1000,
    }


def test_a_limit_without_a_request_counts_as_the_request() -> None:
    # What the API server defaults, so a manifest and the stored Pod cost the same.
    container = {
        "name": "a",
        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2", "memory": "1Gi"}},
    }
    assert pod_requests({"spec": {"containers": [container]}}) == {
        "cpu": Decimal("0.5"),
        "memory": GIB,
    }


def test_a_runtime_class_overhead_is_held_too() -> None:
    pod = finished_pod()
    pod["spec"]["runtimeClassName"] = "kata"
    pod["spec"]["overhead"] = {"cpu": "250m", "memory": "160Mi"}  # set at admission
    requests = pod_requests(pod)
    assert requests["cpu"] == Decimal("1.8")
    assert requests["memory"] == 2 * GIB + 288 * MIB


def test_an_amount_that_is_no_quantity_is_an_error_naming_it() -> None:
    pod = {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}}
    with pytest.raises(ValueError, match="the cpu of container 'a' is 'lots', which is not"):
        pod_requests(pod)
    pod = {"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "-1"}}}]}}
    with pytest.raises(ValueError, match="of 0 or more"):
        pod_requests(pod)


def test_the_hourly_rate_prices_cores_gib_and_devices() -> None:
    requests = {
        "cpu": Decimal("0.5"),
        "memory": Decimal(3 * GIB),
        "ephemeral-storage": Decimal(GIB // 2),
        "nvidia.com/gpu": Decimal(2),
        "example.com/unpriced": Decimal(7),  # no price: free
    }
    # 0.5 core x 0.04 + 3 GiB x 0.004 + 0.5 GiB x 0.0002 + 2 GPUs x 2.0
    assert hourly_rate(requests, PRICES) == pytest.approx(0.02 + 0.012 + 0.0001 + 4.0)
    assert hourly_rate({}, PRICES) == 0.0


def test_a_finished_trial_costs_its_requests_from_its_start_to_the_runners_end() -> None:
    pod = finished_pod()
    assert pod_started_at(pod) == STARTED
    assert runner_finished_at(pod) == RUNNER_ENDED
    # 1.55 cores x 0.04 + 2.125 GiB x 0.004 + 8.0625 GiB x 0.0002 + 1 GPU x 2.0 = 2.0721125 an
    # hour, for half an hour.
    assert hourly_rate(pod_requests(pod), PRICES) == pytest.approx(2.0721125)
    assert pod_cost(pod, PRICES, ended_at=RUNNER_ENDED) == 1.036056  # 1.03605625, 6 decimals


def test_no_prices_no_cost() -> None:
    assert pod_cost(finished_pod(), None, ended_at=RUNNER_ENDED) is None


def test_a_pod_that_never_started_costs_nothing() -> None:
    pod = finished_pod()
    pod["spec"].pop("nodeName")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                "lastTransitionTime": ts(CREATED),
            }
        ],
        "qosClass": "Burstable",
    }
    assert pod_started_at(pod) is None
    assert pod_cost(pod, PRICES, ended_at=CREATED + timedelta(hours=1)) == 0.0


def test_a_cost_is_never_negative() -> None:
    assert pod_cost(finished_pod(), PRICES, ended_at=STARTED - timedelta(seconds=5)) == 0.0


def test_the_end_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        pod_cost(finished_pod(), PRICES, ended_at=datetime(2024, 5, 1, 13))


def test_the_end_is_the_runners_when_the_pod_shows_it_else_now() -> None:
    now = RUNNER_ENDED + timedelta(minutes=5)
    assert pod_end(finished_pod(), now=now) == RUNNER_ENDED
    pulling = finished_pod()
    pulling["status"]["phase"] = "Pending"
    pulling["status"]["containerStatuses"] = [
        {
            "name": name,
            "image": image,
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": "ImagePullBackOff"}},
        }
        for name, image in (("environment", TASK_IMAGE), ("runner", RUNNER_IMAGE))
    ]
    assert runner_finished_at(pulling) is None
    assert pod_end(pulling, now=now) == now
    # The node was held from the kubelet's start, image pulls included.
    assert pod_cost(pulling, PRICES, ended_at=now) == pytest.approx(2.0721125 * 35 / 60, abs=1e-6)


def test_the_index_keeps_what_the_cost_needs() -> None:
    pod = finished_pod()
    pod["spec"]["overhead"] = {"cpu": "250m", "memory": "160Mi"}
    whole = pod_cost(pod, PRICES, ended_at=RUNNER_ENDED)
    assert pod_cost(slim_pod(copy.deepcopy(pod)), PRICES, ended_at=RUNNER_ENDED) == whole
    assert runner_finished_at(slim_pod(pod)) == RUNNER_ENDED
