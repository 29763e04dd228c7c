"""A trial Pod run as a kubelet runs it: the operator's Pod, from the API, its strings expanded
by the kubelet's rules, its environment container a fake container running the shim, its runner
a real `rollout-runner` process, storage a real S3 endpoint.

On a real cluster main ran no trial: the kubelet turned the shim's `$$` into `$` (every trial
ended environment_start_failed), and agents' scripts travel in an env value, so an agent's `$$`
and `$(NAME)` were rewritten before they ran. This runs the maintainers' script from that cluster.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from operator_kit import (
    create_storage_secret,
    job_manifest,
    job_phase,
    operator_config,
    operator_memo,
    publish,
)
from prometheus_client import CollectorRegistry
from s3_kit import S3Settings

from fakecontainer import requires_fake_container
from kubeharness.kube import Kube
from kubeharness.kubelet import run_trial_pod
from kubeharness.resources import PODS, ROLLOUT_JOBS
from rollout.api.layout import task_archive_key, trial_prefix
from rollout.api.taskdir import task_content_hash
from rollout.api.wire.termination import RunnerTimes
from rollout.controller.metrics import OperatorMetrics
from rollout.datasets.bundle import task_archive
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

TASKS = Path(__file__).resolve().parents[1] / "data" / "tasks"
CREDENTIALS_SECRET = "storage-credentials"
# The script a maintainer ran on a real cluster (main's Pod made it print `pid: $`), and a
# literal agent env value with a `$$` and a `$(NAME)` of a variable the runner container has.
EXECUTE = (
    'echo "pid-literal: \\$\\$ pid: $$ sub: $(echo sub-ok) home: $(HOME)" > /logs/agent/out.txt\n'
    'printf "%s" "$PRICE" > /logs/agent/price.txt\n'
    'echo "Hello, world!" > /app/hello.txt\n'
)
PRICE = "costs $$5 in $(HOME)"


def publish_dataset(store: ObjectStore, root: Path) -> dict[str, str]:
    """hello-offline with an image named (the fake container ignores it), published whole."""
    task = root / "pods" / "hello-offline"
    shutil.copytree(TASKS / "hello-offline", task)
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[environment]\n", '[environment]\ndocker_image = "debian:bookworm-slim"\n'
        )
    )
    store.put_bytes(task_archive_key("", task_content_hash(task)), task_archive(task))
    return publish(store, task.parent)


async def test_a_trial_pod_runs_the_agents_script_byte_for_byte(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    dataset = publish_dataset(store, tmp_path / "data")
    await create_storage_secret(kube, s3_settings, CREDENTIALS_SECRET)
    config = operator_config(s3_settings, storage_credentials_secret=CREDENTIALS_SECRET)
    agent: dict[str, Any] = {
        "name": "shell",
        "execute": EXECUTE,
        "env": [{"name": "PRICE", "value": PRICE}],
    }
    memo = operator_memo(kube, config)
    registry = CollectorRegistry()
    memo.metrics = OperatorMetrics(registry)
    async with kube.operator(memo=memo):
        await kube.create(ROLLOUT_JOBS, job_manifest("dollars", [dataset], agents=[agent]))
        pod = await kube.wait_for(lambda: _one_pod(kube), what="the trial's Pod", timeout=20)
        outcome = await run_trial_pod(kube, pod["metadata"]["name"], kube.namespace, tmp_path / "k")
        job = await kube.wait_for(
            lambda: job_phase(kube, "dollars", "Completed"), what="the job completes", timeout=30
        )
    summary = json.loads(outcome.message)
    assert summary["error"] is None, outcome.stderr
    assert summary["reward"] == 1.0
    assert job["status"]["passRate"] == 1.0
    prefix = trial_prefix("", "dollars", "shell", dataset["name"], "hello-offline", 1)
    out = store.get_bytes(prefix + "logs/agent/out.txt").decode()
    assert re.fullmatch(r"pid-literal: \$\$ pid: [0-9]+ sub: sub-ok home: \n", out), out
    assert store.get_bytes(prefix + "logs/agent/price.txt").decode() == PRICE
    # The trial's timings start when the operator created the Pod, not when the runner started.
    runner = next(c for c in pod["spec"]["containers"] if c["name"] == "runner")
    created_text = next(e["value"] for e in runner["env"] if e["name"] == "ROLLOUT_POD_CREATED_AT")
    created = datetime.fromisoformat(created_text)
    assert summary["timestamps"]["started_at"] == created_text
    assert summary["timestamps"]["environment_setup_started_at"] == created_text
    api_created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    assert abs(created - api_created) < timedelta(seconds=2)  # the API's has whole seconds
    # The runner's start-up, from its termination message, in the operator's metrics.
    runner_times = RunnerTimes.model_validate(summary["runner"])
    assert runner_times.started_at is not None
    assert runner_times.trial_started_at is not None
    startup = (runner_times.trial_started_at - runner_times.started_at).total_seconds()
    assert registry.get_sample_value("rollout_runner_startup_seconds_count") == 1
    assert registry.get_sample_value("rollout_runner_startup_seconds_sum") == pytest.approx(startup)
    assert registry.get_sample_value("rollout_runner_startup_exposed_seconds_count") == 1


async def _one_pod(kube: Kube) -> dict[str, Any] | None:
    pods = await kube.list(PODS, ..., labels="rollout.dev/job=dollars")
    return pods[0] if pods else None
