"""The Pod watch of benchmarks/operator_throughput.py (`WatchCounter`), against the test's
Kubernetes API over HTTP, as its cluster modes use it: it counts the Pods of its selector and, in
`--job-ratio`, reads each runner's times from its termination message as its Pod ends (a change
of the Pod, not its creation), before the operator deletes it."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fakecontainer import eventually
from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import PODS
from paths import REPO
from rollout.api.wire.termination import RunnerTimes, from_result, render

sys.path.insert(0, str(REPO / "benchmarks"))

from operator_bench_parts import runner_times
from operator_throughput import ClusterKube, WatchCounter

pytestmark = pytest.mark.integration

LABELS = {"rollout.dev/job": "ratio"}


def trial_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {"name": "runner", "image": "runner:test"},
                {"name": "environment", "image": "debian:bookworm-slim"},
            ]
        },
    }


async def test_the_runners_times_are_read_as_their_pods_end(kube: Kube, tmp_path: Path) -> None:
    await kube.create(PODS, trial_pod("listed", LABELS))  # there before the watch: listed
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig", identity=Identity.USER)
    seen: dict[str, dict[str, datetime]] = {}

    def saw(pod: dict[str, Any]) -> None:
        times = runner_times(pod, "runner")
        if times is not None:
            seen[pod["metadata"]["name"]] = times

    # Its listing blocks, as the script runs it: in a thread, the API being on this loop.
    cluster = ClusterKube(kube.namespace, kubeconfig)
    watch = await asyncio.to_thread(WatchCounter, cluster, "rollout.dev/job=ratio", saw)
    try:
        await kube.create(PODS, trial_pod("watched", LABELS))
        await kube.create(PODS, trial_pod("other-job", {"rollout.dev/job": "other"}))
        await eventually(lambda: watch.update() == 2, "both Pods of the selector counted")
        assert watch.names == {"listed", "watched"}
        assert seen == {}  # none has ended

        at = datetime(2026, 1, 1, tzinfo=UTC)
        times = RunnerTimes(
            started_at=at,
            trial_started_at=at + timedelta(seconds=0.3),
            environment_ready_at=at + timedelta(seconds=0.2),
            ended_at=at + timedelta(seconds=0.5),
        )
        message = render(from_result(None, result_uri=None, upload_error=None, runner=times))
        for name in ("listed", "watched", "other-job"):
            await kube.run_pod(name)
            await kube.finish_pod(name, messages={"runner": message.decode()})
        await eventually(lambda: len(seen) == 2, "both ended runners' times read")
        assert seen == {
            "listed": times.model_dump(by_alias=False),
            "watched": times.model_dump(by_alias=False),
        }
    finally:
        watch.close()
