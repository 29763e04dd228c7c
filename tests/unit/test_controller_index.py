"""The index values: trials and Pods read tolerantly and kept small."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.resources import TrialPhase
from rollout.api.trials import child_name
from rollout.controller.config import OperatorConfig
from rollout.controller.index import (
    compact,
    index_pod,
    index_trial,
    newer,
    pod_name_for,
    slim_pod,
    trial_entry,
)
from rollout.controller.podstatus import Failed, Running, classify_pod


def trial_body(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "t1",
            "namespace": "ns",
            "uid": "uid-t1",
            "resourceVersion": "42",
            "ownerReferences": [
                {"kind": "Other", "uid": "x", "name": "x"},
                {"kind": "RolloutJob", "uid": "job-uid", "name": "job", "controller": True},
            ],
        },
        "spec": {
            "agent": {"name": "oracle"},
            "datasetName": "d",
            "taskName": "t",
            "attempt": 2,
            "environmentType": "kubernetes",
            "preserveEnv": True,
        },
        "status": status,
    }


def test_a_trial_is_indexed_under_its_job_with_what_counting_needs() -> None:
    indexed = index_trial(trial_body(phase="Succeeded", reward=0.5, cost=1.25, infraRetries=1))
    assert indexed is not None
    entry = indexed["job-uid"]
    assert (entry.name, entry.agent, entry.dataset, entry.task, entry.attempt) == (
        "t1", "oracle", "d", "t", 2
    )  # fmt: skip
    assert entry.finished
    assert entry.preserve_env
    assert entry.current_pod_name == child_name("t1", "r1")  # from infraRetries
    outcome = entry.outcome()
    assert (outcome.reward, outcome.cost, outcome.error_type) == (0.5, 1.25, None)
    assert entry.tries == 2  # the first Pod and one retry
    assert entry.created_at is None  # the body has no creationTimestamp


def test_a_trials_creation_time_is_read_and_a_bad_one_is_unknown() -> None:
    body = trial_body()
    body["metadata"]["creationTimestamp"] = "2025-01-15T10:30:00Z"
    assert trial_entry(body).created_at == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    for bad in ("yesterday", "2025-01-15T10:30:00", 17):
        body["metadata"]["creationTimestamp"] = bad
        assert trial_entry(body).created_at is None


def test_an_unfinished_trial_has_no_verdict_yet() -> None:
    entry = trial_entry(trial_body(phase="Running", reward=1.0, podName="p"))
    assert not entry.finished
    assert entry.outcome().reward is None
    assert entry.current_pod_name == "p"


def test_garbled_fields_never_break_the_index() -> None:
    body = trial_body(phase="Exploded", reward="high", infraRetries=-3, error={"type": "weird"})
    body["spec"]["attempt"] = True
    entry = trial_entry(body)
    assert entry.phase is None
    assert entry.reward is None
    assert entry.infra_retries == 0
    assert entry.attempt == 0
    assert entry.error_type is ErrorType.INTERNAL_ERROR  # an unknown error is still an error
    assert index_trial({"metadata": {"name": "orphan"}}) is None
    assert trial_entry({}).name == ""


def test_phases_and_error_types_are_read() -> None:
    entry = trial_entry(trial_body(phase="Failed", error={"type": "verifier_failed"}))
    assert entry.phase is TrialPhase.FAILED
    assert entry.error_type is ErrorType.VERIFIER_FAILED


def test_the_failure_class_is_read_and_else_the_tables() -> None:
    build = {"type": "environment_build_failed", "message": "no builder"}
    recorded = trial_entry(trial_body(phase="Failed", error=build, failureClass="infrastructure"))
    assert recorded.failure_class is FailureClass.INFRASTRUCTURE
    assert recorded.outcome().error_class is FailureClass.INFRASTRUCTURE
    # A status of the previous version (or a garbled one) has none: the table decides.
    for status in ({}, {"failureClass": "cosmic"}, {"failureClass": ["agent"]}):
        entry = trial_entry(trial_body(phase="Failed", error=build, **status))
        assert entry.failure_class is None
        assert entry.outcome().error_class is FailureClass.TASK


def pod_body() -> dict[str, Any]:
    created = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": "t1",
            "namespace": "ns",
            "uid": "pod-uid",
            "creationTimestamp": created,
            "labels": {"rollout.dev/trial": "t1"},
            "annotations": {"big": "x" * 1000},
            "ownerReferences": [{"kind": "RolloutTrial", "name": "t1", "uid": "uid-t1"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "environment",
                    "image": "img",
                    "command": ["sh", "-c", "x" * 5000],
                    "resources": {"requests": {"cpu": "2"}},
                },
                {"name": "runner", "image": "runner", "env": [{"name": "A", "value": "b"}]},
            ],
            "volumes": [{"name": "v"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available.",
                }
            ],
        },
    }


def test_a_pod_is_indexed_under_its_trial_without_its_bulk() -> None:
    indexed = index_pod(pod_body())
    assert indexed is not None
    entry = indexed[("ns", "t1")]
    assert (entry.name, entry.uid, entry.trial) == ("t1", "pod-uid", "t1")
    assert "annotations" not in entry.body["metadata"]
    assert entry.body["spec"]["containers"] == [
        {"name": "environment", "image": "img", "resources": {"requests": {"cpu": "2"}}},
        {"name": "runner", "image": "runner"},
    ]
    assert index_pod({"metadata": {"name": "stray", "namespace": "ns"}}) is None


def test_alike_pods_share_their_spec_and_every_pod_its_keys() -> None:
    first, second = pod_body(), pod_body()
    second["metadata"] = {**second["metadata"], "name": "t2", "uid": "other"}
    second["spec"] = {**second["spec"], "activeDeadlineSeconds": 600}
    third = pod_body()
    third["metadata"] = {**third["metadata"], "name": "t3"}
    third["metadata"]["creationTimestamp"] = "".join(first["metadata"]["creationTimestamp"])
    one, two, three = slim_pod(first), slim_pod(second), slim_pod(third)
    assert one["spec"] is three["spec"]  # alike: one object
    assert two["spec"] is not one["spec"]
    assert two["spec"]["activeDeadlineSeconds"] == 600  # the deadline's message needs it
    assert "labels" not in one["metadata"]
    assert one["metadata"] == {"creationTimestamp": first["metadata"]["creationTimestamp"]}
    assert one["metadata"]["creationTimestamp"] is three["metadata"]["creationTimestamp"]
    # Keys and short values decoded from two events are one string each in the index.
    decoded = [json.loads(json.dumps(pod_body()["status"])) for _ in range(2)]
    kept = [compact(status) for status in decoded]
    (key_a,), (key_b,) = ([k for k in s if k == "conditions"] for s in kept)
    assert key_a is key_b
    assert kept[0]["conditions"][0]["reason"] is kept[1]["conditions"][0]["reason"]
    assert kept[0] == decoded[0]


@pytest.mark.parametrize("grace", [10.0, 60.0])
def test_the_slim_pod_classifies_like_the_whole_one(grace: float) -> None:
    config = OperatorConfig(runner_image="r", unschedulable_grace_sec=grace)
    now = datetime.now(UTC)
    whole = classify_pod(pod_body(), now=now, config=config)
    assert classify_pod(slim_pod(pod_body()), now=now, config=config) == whole
    if grace == 10.0:
        assert isinstance(whole, Failed)
        assert "environment asks for cpu 2" in whole.message.lower()
    running = pod_body()
    running["status"] = {"containerStatuses": [{"name": "runner", "state": {"running": {}}}]}
    assert isinstance(classify_pod(slim_pod(running), now=now, config=config), Running)


def test_retry_pods_get_their_own_names() -> None:
    assert pod_name_for("trial", 0) == "trial"
    assert pod_name_for("trial", 2) == "trial-r2"
    assert len(pod_name_for("x" * 63, 1)) <= 63
    with pytest.raises(ValueError, match="0 or more"):
        pod_name_for("trial", -1)


def test_resource_versions_compare_as_numbers_when_they_are() -> None:
    assert newer("10", "9")
    assert not newer("9", "10")
    assert not newer("9", "9")
    assert newer("abc", "abd")  # opaque: only "different" is known
