"""Waking job reconcilers: which job an event belongs to, and which of its trials changed."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from rollout.controller.config import OperatorConfig
from rollout.controller.metrics import OperatorMetrics
from rollout.controller.runtime import Runtime


class NoApi:
    """The runtime's API client, never called in these tests."""

    def close(self) -> None:
        pass


def runtime() -> Runtime:
    config = OperatorConfig(runner_image="r")
    return Runtime(config, api=NoApi(), metrics=OperatorMetrics(CollectorRegistry()))  # type: ignore[arg-type]


def trial(name: str, job: str = "job", label: str | None = "job") -> dict[str, Any]:
    labels = {"rollout.dev/job": label} if label else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": labels,
            "ownerReferences": [{"kind": "RolloutJob", "name": job, "uid": "u"}],
        }
    }


def test_events_name_the_trials_their_job_looks_at_again() -> None:
    rt = runtime()
    waker = rt.waker("ns", "job")
    assert waker.take_dirty() is None  # the first pass looks at every trial
    rt.wake_for(trial("t1"), "t1")
    rt.wake_for(trial("t2", label=None), "t2")  # found by its owner reference
    rt.wake_for(trial("x", job="other", label="other"), "x")  # another job's
    rt.wake("ns", "job")  # the job itself changed: no trial in particular
    assert waker.take_dirty() == {"t1", "t2"}
    assert waker.take_dirty() == set()
    rt.wake_for({"metadata": {"namespace": "ns", "labels": {"rollout.dev/job": "job"}}}, None)
    assert waker.take_dirty() is None  # a Pod naming no trial: every trial is looked at


def test_a_job_made_again_under_the_same_name_keeps_its_own_waker() -> None:
    rt = runtime()
    old = rt.waker("ns", "job")
    new = rt.waker("ns", "job")
    old.take_dirty()
    new.take_dirty()
    rt.forget_job("ns", "job", old)  # the old reconciler ends after the new one started
    rt.wake_for(trial("t1"), "t1")
    assert new.take_dirty() == {"t1"}
    assert old.take_dirty() == set()


def test_deleted_pods_are_remembered_per_trial() -> None:
    rt = runtime()
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [{"kind": "RolloutTrial", "name": "t", "uid": "trial-1"}],
        }
    }
    rt.note_pod_deleted(pod)
    assert rt.pod_deleted("ns", "p", "trial-1")
    assert not rt.pod_deleted("ns", "p", "trial-2")  # a new trial of the same name


def test_a_pod_that_went_with_its_runner_running_is_remembered_as_such() -> None:
    """A kubelet lets a Pod go once its containers ended; one that went while its status showed
    the runner running was force-deleted (or lost with its node): its runner may still upload."""
    rt = runtime()

    def pod(name: str, runner: dict[str, Any]) -> dict[str, Any]:
        owner = {"kind": "RolloutTrial", "name": "t", "uid": "trial-1"}
        return {
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [owner]},
            "status": {"containerStatuses": [{"name": "runner", "state": runner}]},
        }

    rt.note_pod_deleted(pod("forced", {"running": {"startedAt": "2025-01-15T10:30:00Z"}}))
    rt.note_pod_deleted(pod("stopped", {"terminated": {"exitCode": 0}}))
    evicted = pod("evicted", {"running": {}})  # its container states not yet updated
    evicted["status"]["phase"] = "Failed"
    rt.note_pod_deleted(evicted)
    assert rt.deleted_running_ago("ns", "evicted", "trial-1") is None
    ago = rt.deleted_running_ago("ns", "forced", "trial-1")
    assert ago is not None
    assert 0 <= ago < 5
    assert rt.deleted_running_ago("ns", "stopped", "trial-1") is None
    assert rt.deleted_running_ago("ns", "forced", "trial-2") is None  # another trial's
    assert rt.deleted_running_ago("ns", "never", "trial-1") is None
