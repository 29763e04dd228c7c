"""Helpers for the bridge's integration tests: its settings and memo for a test's API and bucket,
`rollout-bridge` as a process a test can SIGKILL and start again, the test engine's
containers a bridge started, and a RolloutTrial as the operator makes one for a bridge.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
import kopf
import kubernetes.client
from engine_kit import EngineUnderTest
from operator_kit import ControllerProcess
from prometheus_client import CollectorRegistry
from s3_kit import S3Settings

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from rollout.api.names import API_VERSION, LABEL_COMPONENT, LABEL_ENVIRONMENT
from rollout.bridge.metrics import BridgeMetrics
from rollout.bridge.providers.base import BRIDGE_COMPONENT, LABEL_BRIDGE
from rollout.bridge.settings import BridgeSettings
from rollout.controller.prices import UnitPrices
from rollout.local.engine import connect_engine

BRIDGE_IDENTITY = Identity.USER
"""Who the bridge is to the test's API, unless a test says otherwise: a cluster admin, so that
a bridge can watch just the test's namespace. The chart's bridge (`Identity.BRIDGE`) watches
the whole cluster, as the chart runs it; one test runs it so."""


def bridge_settings(
    kube: Kube,
    storage: S3Settings,
    *,
    identity: str = "test-bridge",
    docker: int = 4,
    docker_hosts: Sequence[str] = (),
    unit_prices: Mapping[str, Mapping[str, float]] | None = None,
) -> BridgeSettings:
    return BridgeSettings(
        identity=identity,
        namespaces=[kube.namespace],
        limits={"docker": docker},
        docker_hosts=list(docker_hosts),
        unit_prices={p: UnitPrices(per_hour=dict(v)) for p, v in (unit_prices or {}).items()},
        storage=storage.location,
        storage_credentials=storage.credentials,
    )


def bridge_memo(
    kube: Kube, settings: BridgeSettings, work_root: Path, *, identity: Identity = BRIDGE_IDENTITY
) -> kopf.Memo:
    """The memo a bridge starts with in a test: its settings, a client for the test's API (as
    `identity`), no variables of this process (no DOCKER_* of the machine reach providers)."""
    configuration = kube.client_configuration(identity)
    configuration.connection_pool_maxsize = 8
    return kopf.Memo(
        settings=settings,
        api_client=kubernetes.client.ApiClient(configuration),
        environ={},
        work_root=work_root,
        metrics=BridgeMetrics(CollectorRegistry()),  # several bridges share the test's process
    )


def bridge_containers(engine: EngineUnderTest, identity: str) -> list[dict[str, Any]]:
    """The containers (running or not) a bridge of `identity` started on the test engine."""
    client = connect_engine(engine.environ)
    try:
        filters = {"label": [f"{LABEL_BRIDGE}={identity}", f"{LABEL_COMPONENT}={BRIDGE_COMPONENT}"]}
        rows: list[dict[str, Any]] = client.api.containers(all=True, filters=filters)
        return rows
    except docker.errors.DockerException as err:
        raise AssertionError(f"the test engine does not answer: {err}") from err
    finally:
        client.close()


class BridgeProcess(ControllerProcess):
    """`rollout-bridge` as a user runs it (ROLLOUT_* variables, a kubeconfig); its output in
    `<workdir>/bridge.log`."""

    script = "rollout-bridge"

    def __init__(self, kube: Kube, workdir: Path, settings: BridgeSettings) -> None:
        super().__init__(kube, workdir / "bridge.log")
        self.workdir = workdir
        self.settings = settings

    def _env(self) -> dict[str, str]:
        kubeconfig = self.kube.write_kubeconfig(
            self.workdir / "bridge-kubeconfig", identity=BRIDGE_IDENTITY
        )
        storage, credentials = self.settings.storage, self.settings.storage_credentials
        assert storage is not None
        assert credentials is not None
        passed = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
        return {
            **passed,
            "KUBECONFIG": str(kubeconfig),
            "ROLLOUT_BRIDGE_IDENTITY": self.settings.identity,
            "ROLLOUT_NAMESPACES": ",".join(self.settings.namespaces),
            "ROLLOUT_BRIDGE_LIMITS": ",".join(f"{k}={v}" for k, v in self.settings.limits.items()),
            "ROLLOUT_BRIDGE_DOCKER_HOSTS": ",".join(self.settings.docker_hosts),
            "ROLLOUT_STORAGE_BUCKET": storage.bucket,
            "ROLLOUT_STORAGE_ENDPOINT": storage.endpoint or "",
            "ROLLOUT_STORAGE_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": credentials.access_key_id.get_secret_value(),
            "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key.get_secret_value(),
            "ROLLOUT_HEALTH_PORT": str(self.health_port),
            "ROLLOUT_METRICS_PORT": str(self.metrics_port),
            "ROLLOUT_LOG_LEVEL": "info",
        }

    async def metrics(self) -> str:
        """What its /metrics says now."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.metrics_port)
        try:
            writer.write(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            return (await asyncio.wait_for(reader.read(), timeout=5)).decode()
        finally:
            writer.close()


def bridge_trial(name: str, environment: str | None = "docker") -> dict[str, Any]:
    """A RolloutTrial as the operator makes one, labelled with its environment type (None: no
    label, as an operator from before the label made it, for a Docker environment); nothing
    runs it (the engine at its `dockerHost` is not there)."""
    spec: dict[str, Any] = {
        "jobName": "job",
        "agent": {"name": "oracle"},
        "datasetName": "set",
        "taskName": name,
        "attempt": 1,
        "image": "busybox",
        "resources": {"cpus": "1", "memory": "1Gi", "storage": "1Gi"},
        "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 1},
        "storage": {"bucket": "bucket"},
        "runnerImage": "runner",
        "environmentType": environment or "docker",
    }
    if spec["environmentType"] == "docker":
        spec["dockerHost"] = "tcp://127.0.0.1:2375"
    labels = {"rollout.dev/job": "job"}
    if environment is not None:
        labels[LABEL_ENVIRONMENT] = environment
    return {
        "apiVersion": API_VERSION,
        "kind": "RolloutTrial",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }
