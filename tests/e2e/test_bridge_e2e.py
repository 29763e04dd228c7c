"""The bridge end to end on a real cluster and a real remote Docker engine, as a user would check
it: the operator and `rollout-bridge` running (here as local processes with KUBECONFIG, as
test_operator_e2e runs the operator), a RolloutJob of the oracle agent on the offline example
task with `environment: {type: docker, dockerHost: ...}` applied, and the trial, its container
and the job's files checked.

Settings, from the environment (besides test_operator_e2e's: KUBECONFIG, ROLLOUT_RUNNER_IMAGE,
ROLLOUT_STORAGE_*, AWS_*, ROLLOUT_E2E_TASK_IMAGE, ROLLOUT_E2E_TIMEOUT):
- ROLLOUT_E2E_DOCKER_HOST (required; skipped without it): the engine, tcp://HOST:PORT, as this
  machine reaches it; DOCKER_TLS_VERIFY and DOCKER_CERT_PATH when it wants TLS (docker-py's).
  The engine pulls the task's image itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import kubernetes.client
import pytest
from test_operator_e2e import GROUP, VERSION, Cluster, api, namespace, publish_task, wait_until

from loopback import free_port
from rollout.api.layout import trial_prefix
from rollout.api.results import TrialResult
from rollout.bridge.kube import ANNOTATION_BRIDGE
from rollout.bridge.providers.base import LABEL_BRIDGE

pytestmark = pytest.mark.e2e

__all__ = ["api", "namespace"]  # the fixtures test_operator_e2e defines, used here

ENGINE = os.environ.get("ROLLOUT_E2E_DOCKER_HOST", "")


@pytest.fixture
def cluster(
    api: kubernetes.client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[tuple[Cluster, str]]:
    """The operator and a bridge of the test's own identity, both serving the namespace."""
    if not ENGINE:
        pytest.skip("ROLLOUT_E2E_DOCKER_HOST is not set: the bridge's e2e test needs an engine")
    running = Cluster(api, namespace, tmp_path)
    running.start()
    identity = f"e2e-bridge-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "ROLLOUT_BRIDGE_IDENTITY": identity,
        "ROLLOUT_NAMESPACES": namespace,
        "ROLLOUT_HEALTH_PORT": str(free_port()),
    }
    with (tmp_path / "bridge.log").open("ab") as log:
        bridge = subprocess.Popen(
            [shutil.which("rollout-bridge") or "rollout-bridge"],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
    try:
        yield running, identity
    finally:
        running.stop()
        bridge.terminate()
        try:
            bridge.wait(timeout=90)
        except subprocess.TimeoutExpired:
            bridge.kill()
        print((tmp_path / "bridge.log").read_text(errors="replace")[-4000:])


def test_a_remote_docker_job_runs_on_the_engine_through_the_bridge(
    cluster: tuple[Cluster, str], tmp_path: Path
) -> None:
    running, identity = cluster
    dataset = publish_task(tmp_path, running.store, os.environ.get("ROLLOUT_E2E_TASK_IMAGE"))
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    running.jobs.append(name)
    job: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [dataset],
            "environment": {"type": "docker", "dockerHost": ENGINE},
            "storage": running.storage,
            "runnerImage": os.environ["ROLLOUT_RUNNER_IMAGE"],
        },
    }
    running.custom.create_namespaced_custom_object(
        GROUP, VERSION, running.namespace, "rolloutjobs", job
    )
    done = running.completed(name)
    assert done["status"]["counts"]["completed"] == 1
    [trial] = running.custom.list_namespaced_custom_object(
        GROUP, VERSION, running.namespace, "rollouttrials", label_selector=f"rollout.dev/job={name}"
    )["items"]
    assert trial["metadata"]["annotations"][ANNOTATION_BRIDGE] == identity
    assert trial["status"]["phase"] == "Succeeded"
    key = trial_prefix(
        running.settings.prefix or "", name, "oracle", dataset["name"], "hello-offline", 1
    )
    record = TrialResult.from_json(running.store.get_bytes(key + "result.json"))
    assert record.reward == 1.0

    def no_container_left() -> bool:
        # docker-py's own reading of DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the bridge's
        engine = docker.from_env(environment={**os.environ, "DOCKER_HOST": ENGINE})
        try:
            labelled = {"label": f"{LABEL_BRIDGE}={identity}"}
            return not engine.api.containers(all=True, filters=labelled)
        finally:
            engine.close()

    wait_until(no_container_left, timeout=60, what="the trial's container removed")
