"""Issue 20's five faults on a real cluster, as a user checks them, against the operator the Helm
chart installed (its Deployment's Pod is what gets killed); the loopback versions, and where each
fault is tested, are in tests/integration/test_faults.py's docstring.

1. The operator's Pod deleted with grace 0 (`kubectl delete pod --grace-period=0 --force`) every
   ROLLOUT_E2E_KILL_EVERY_SEC (20) seconds through a job of ROLLOUT_E2E_FAULT_TRIALS (200)
   trials: every (agent, task, attempt) runs exactly once, and no Pod is left.
2. Object storage unreachable for ROLLOUT_E2E_OUTAGE_SEC (30) seconds while trials upload: the
   trial Pods reach storage through a TCP proxy (a Deployment and Service the test makes in the
   namespace, running the runner image's Python), scaled to 0 replicas for the outage (the
   Service has no endpoint: connections are refused) and back; no result is lost.
3. A trial Pod deleted while its agent runs: retried under maxInfraRetries, its first try's
   files under `retries/1/`.
4. A RolloutJob deleted while its trials run leaves no Pod, trial or finalizer within 60 s; and
   so does one deleted while the operator is scaled to 0, once the operator is back.
5. 50 malformed RolloutJobs (tests/malformed_jobs.py) created as kubectl 1.25+ creates them
   (`fieldValidation=Strict`): each refused, or `Valid=False`, while a valid job beside them
   completes.

Settings, from the environment (as test_cli_e2e.py's, plus the operator's whereabouts):

- KUBECONFIG (required; skipped without it), ROLLOUT_E2E_CONTEXT, ROLLOUT_E2E_NAMESPACE (default:
  the context's namespace), where the installed operator runs trials (the chart's
  trialNamespaces, or its release namespace);
- ROLLOUT_E2E_OPERATOR_NAMESPACE (default: ROLLOUT_E2E_NAMESPACE) and
  ROLLOUT_E2E_OPERATOR_SELECTOR (default: the chart's
  `app.kubernetes.io/name=rollout-operator,app.kubernetes.io/component=operator`): the operator's
  Deployment and Pods;
- ROLLOUT_STORAGE_BUCKET (required; skipped without it), ROLLOUT_STORAGE_ENDPOINT,
  ROLLOUT_STORAGE_PREFIX, ROLLOUT_STORAGE_REGION, ROLLOUT_STORAGE_PATH_STYLE,
  AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: how this machine reads storage (the operator's own
  bucket); ROLLOUT_STORAGE_CLUSTER_ENDPOINT: how Pods reach it, when that differs (the
  quickstart's MinIO); ROLLOUT_STORAGE_CREDENTIALS_SECRET: the Secret trial Pods read storage
  credentials from (default: one the test makes from AWS_*). The outage test needs an http://
  endpoint (a TCP proxy cannot stand in for a TLS one) and is skipped otherwise;
- ROLLOUT_RUNNER_IMAGE (default: the operator's): the runner image, which also runs the proxy;
- ROLLOUT_E2E_TASK_IMAGE: the task's image (default: the example's debian:bookworm-slim);
- ROLLOUT_E2E_TIMEOUT: seconds each job may take (default 600: raise it for 200 trials on a
  small cluster); ROLLOUT_E2E_FAULT_TRIALS, ROLLOUT_E2E_FAULT_CONCURRENCY (10),
  ROLLOUT_E2E_KILL_EVERY_SEC, ROLLOUT_E2E_OUTAGE_SEC as above.

Trial Pods ask for 100m CPU and 128Mi (spec.environment overrides), so that many fit a small
node. Every job is deleted at the end while the operator runs; the proxy goes with its namespace
objects (deleted by the test).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client
import kubernetes.config
import pytest
from kubernetes.client.exceptions import ApiException
from test_operator_e2e import GROUP, VERSION, publish_task, wait_until

from malformed_jobs import CASES
from rollout.api.layout import trial_prefix
from rollout.api.trials import trial_resource_name
from rollout.storage import ObjectStore, storage_from_env

pytestmark = pytest.mark.e2e

TASK = "hello-offline"
OPERATOR_SELECTOR = "app.kubernetes.io/name=rollout-operator,app.kubernetes.io/component=operator"
SMALL = {"overrideCpus": "100m", "overrideMemory": "128Mi"}
PROXY_PORT = 9000
PROXY = """
import asyncio, sys
host, port = sys.argv[1], int(sys.argv[2])
async def pump(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
async def serve(reader, writer):
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer))
async def main():
    server = await asyncio.start_server(serve, "0.0.0.0", 9000)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


def slow_agent(seconds: int) -> dict[str, Any]:
    """A script agent that solves hello-offline after `seconds`."""
    return {"name": "slow", "execute": f"sleep {seconds}; echo 'Hello, world!' > /app/hello.txt"}


class Faults:
    """The test's namespace of a cluster with the chart's operator, its storage, and its jobs."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str, tmp_path: Path) -> None:
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.core: Any = kubernetes.client.CoreV1Api(api)
        self.apps: Any = kubernetes.client.AppsV1Api(api)
        self.custom: Any = kubernetes.client.CustomObjectsApi(api)
        self.operator_namespace = os.environ.get("ROLLOUT_E2E_OPERATOR_NAMESPACE") or namespace
        self.operator_selector = os.environ.get("ROLLOUT_E2E_OPERATOR_SELECTOR") or (
            OPERATOR_SELECTOR
        )
        self.timeout = env_float("ROLLOUT_E2E_TIMEOUT", 600)
        self.settings, self.credentials = storage_from_env()
        self.store = ObjectStore(self.settings, self.credentials)
        self.cluster_endpoint = (
            os.environ.get("ROLLOUT_STORAGE_CLUSTER_ENDPOINT") or self.settings.endpoint
        )
        self.storage: dict[str, Any] = {
            "bucket": self.settings.bucket,
            "prefix": self.settings.prefix,
            "region": self.settings.region,
            "pathStyle": self.settings.path_style,
        }
        if self.cluster_endpoint:
            self.storage["endpoint"] = self.cluster_endpoint
        self.made: list[tuple[str, str]] = []  # (kind's plural, name) to delete at the end
        self.jobs: list[str] = []
        self.runner_image = os.environ.get("ROLLOUT_RUNNER_IMAGE") or self._operators_runner()
        self._dataset: dict[str, str] | None = None

    # --- the operator

    def operator_deployment(self) -> Any:
        found = self.apps.list_namespaced_deployment(
            self.operator_namespace, label_selector=self.operator_selector
        ).items
        if len(found) != 1:
            pytest.skip(
                f"no single operator Deployment in {self.operator_namespace} with labels "
                f"{self.operator_selector} (set ROLLOUT_E2E_OPERATOR_NAMESPACE/_SELECTOR)"
            )
        return found[0]

    def _operators_runner(self) -> str | None:
        for container in self.operator_deployment().spec.template.spec.containers:
            for variable in container.env or []:
                if variable.name == "ROLLOUT_RUNNER_IMAGE" and variable.value:
                    return str(variable.value)
        return None

    def kill_operator(self) -> int:
        """Delete the operator's Pods with grace 0; how many were deleted."""
        pods = self.core.list_namespaced_pod(
            self.operator_namespace, label_selector=self.operator_selector
        ).items
        killed = 0
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                continue
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, self.operator_namespace, grace_period_seconds=0
                )
                killed += 1
        return killed

    def scale_operator(self, replicas: int) -> None:
        name = self.operator_deployment().metadata.name
        self.apps.patch_namespaced_deployment_scale(
            name, self.operator_namespace, {"spec": {"replicas": replicas}}
        )

    def operator_ready(self) -> bool:
        deployment = self.operator_deployment()
        wanted = deployment.spec.replicas or 0
        return (deployment.status.ready_replicas or 0) >= wanted and wanted > 0

    def operator_gone(self) -> bool:
        pods = self.core.list_namespaced_pod(
            self.operator_namespace, label_selector=self.operator_selector
        ).items
        return not pods

    # --- storage and jobs

    def dataset(self) -> dict[str, str]:
        if self._dataset is None:
            image = os.environ.get("ROLLOUT_E2E_TASK_IMAGE")
            self._dataset = publish_task(self.tmp_path, self.store, image)
        return self._dataset

    def start(self) -> None:
        """The Secret trial Pods read storage with, unless one is named."""
        if secret := os.environ.get("ROLLOUT_STORAGE_CREDENTIALS_SECRET"):
            self.storage["credentialsSecret"] = secret
            return
        if self.credentials is None:
            return
        name = f"rollout-e2e-faults-{uuid.uuid4().hex[:6]}"
        self.core.create_namespaced_secret(
            self.namespace,
            {
                "metadata": {"name": name},
                "stringData": {
                    "AWS_ACCESS_KEY_ID": self.credentials.access_key_id.get_secret_value(),
                    "AWS_SECRET_ACCESS_KEY": self.credentials.secret_access_key.get_secret_value(),
                },
            },
        )
        self.made.append(("secrets", name))
        self.storage["credentialsSecret"] = name

    def job(self, prefix: str, *, storage: dict[str, Any] | None = None, **spec: Any) -> str:
        """Create a RolloutJob on the example task (`spec` added to its spec); its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RolloutJob",
            "metadata": {"name": name},
            "spec": {
                "agents": [{"name": "oracle"}],
                "datasets": [self.dataset()],
                "storage": storage or self.storage,
                "environment": SMALL,
                **({"runnerImage": self.runner_image} if self.runner_image else {}),
                **spec,
            },
        }
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "rolloutjobs", body
        )
        self.jobs.append(name)
        return name

    def get_job(self, name: str) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "rolloutjobs", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return job

    def phase(self, name: str) -> str | None:
        return ((self.get_job(name) or {}).get("status") or {}).get("phase")

    def completed(self, name: str, timeout: float | None = None) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = self.get_job(name)
            phase = ((job or {}).get("status") or {}).get("phase")
            assert phase != "Failed", json.dumps((job or {}).get("status"), indent=2)
            return job if phase == "Completed" else None

        return wait_until(done, timeout=timeout or self.timeout, what=f"{name} completed")

    def trials(self, job: str) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "rollouttrials", label_selector=f"rollout.dev/job={job}"
        )
        return list(listed["items"])

    def pods(self, job: str) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(
                self.namespace, label_selector=f"rollout.dev/job={job}"
            ).items
        )

    def trial_dir(self, job: str, attempt: int, agent: str = "oracle") -> str:
        return trial_prefix(self.settings.prefix, job, agent, self.dataset()["name"], TASK, attempt)

    def slow_trial_running(self, prefix: str) -> tuple[str, str]:
        """A job of one trial whose agent takes 30 s, once its Pod shows its runner running:
        the job's name and the trial's (its first Pod's)."""
        name = self.job(prefix, agents=[slow_agent(30)], maxInfraRetries=1)
        trial = trial_resource_name(name, "slow", self.dataset()["name"], TASK, 1)

        def runner_running() -> bool:
            pods = [pod for pod in self.pods(name) if pod.metadata.name == trial]
            statuses = (pods[0].status.container_statuses or []) if pods else []
            return any(c.name == "runner" and c.state.running for c in statuses)

        wait_until(runner_running, timeout=self.timeout, what="the trial's runner running")
        return name, trial

    def nothing_left(self, job: str) -> bool:
        return self.get_job(job) is None and not self.trials(job) and not self.pods(job)

    def delete_job(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "rolloutjobs", name
            )

    def clean_up(self) -> None:
        """The jobs first, while the operator runs (its finalizer), then what the test made."""
        with contextlib.suppress(Exception):
            wait_until(self.operator_ready, timeout=120, what="the operator ready")
        for name in self.jobs:
            self.delete_job(name)
        for name in self.jobs:
            with contextlib.suppress(TimeoutError):
                wait_until(lambda name=name: self.get_job(name) is None, timeout=60, what=name)
        for plural, name in reversed(self.made):
            with contextlib.suppress(ApiException):
                if plural == "secrets":
                    self.core.delete_namespaced_secret(name, self.namespace)
                elif plural == "services":
                    self.core.delete_namespaced_service(name, self.namespace)
                elif plural == "deployments":
                    self.apps.delete_namespaced_deployment(name, self.namespace)


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[Faults]:
    if not os.environ.get("ROLLOUT_STORAGE_BUCKET"):
        pytest.skip("ROLLOUT_STORAGE_BUCKET is not set: the fault tests need object storage")
    configuration = kubernetes.client.Configuration()
    context = os.environ.get("ROLLOUT_E2E_CONTEXT")
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        context=context, client_configuration=configuration
    )
    namespace = os.environ.get("ROLLOUT_E2E_NAMESPACE")
    if not namespace:
        contexts, active = kubernetes.config.list_kube_config_contexts()  # type: ignore[no-untyped-call]
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        namespace = chosen["context"].get("namespace") or "default"
    running = Faults(kubernetes.client.ApiClient(configuration), namespace, tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.clean_up()


def test_the_operator_pod_killed_every_20_s_runs_each_trial_once(faults: Faults) -> None:
    trials = int(env_float("ROLLOUT_E2E_FAULT_TRIALS", 200))
    every = env_float("ROLLOUT_E2E_KILL_EVERY_SEC", 20)
    concurrency = int(env_float("ROLLOUT_E2E_FAULT_CONCURRENCY", 10))
    name = faults.job("e2e-killed", nAttempts=trials, nConcurrentTrials=concurrency)
    deadline = time.monotonic() + faults.timeout
    kills = 0
    next_kill = time.monotonic() + every
    while faults.phase(name) != "Completed":
        assert faults.phase(name) != "Failed", faults.get_job(name)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not completed within {faults.timeout:.0f} s")
        if time.monotonic() >= next_kill:
            kills += faults.kill_operator() > 0
            next_kill = time.monotonic() + every
        time.sleep(1.0)
    wait_until(faults.operator_ready, timeout=300, what="the operator back")
    assert kills >= 2, f"only {kills} kills: raise ROLLOUT_E2E_FAULT_TRIALS"

    job = faults.get_job(name)
    assert job is not None
    counts = job["status"]["counts"]
    assert (counts["total"], counts["completed"], counts["failed"]) == (trials, trials, 0)
    expected = {
        trial_resource_name(name, "oracle", faults.dataset()["name"], TASK, attempt)
        for attempt in range(1, trials + 1)
    }
    made = faults.trials(name)
    assert sorted(t["metadata"]["name"] for t in made) == sorted(expected)  # each once
    for trial in made:
        status = trial["status"]
        assert (status["phase"], status["reward"]) == ("Succeeded", 1.0), status
        assert status.get("infraRetries", 0) == 0  # in one Pod: its first
        assert status["podName"] == trial["metadata"]["name"]
    for attempt in (1, trials // 2, trials):
        record = json.loads(faults.store.get_bytes(faults.trial_dir(name, attempt) + "result.json"))
        assert record["rollout"]["tries"] == 1
    wait_until(lambda: not faults.pods(name), timeout=120, what="no Pod of the job left")


def test_storage_unreachable_for_30_s_loses_no_result(faults: Faults) -> None:
    outage = env_float("ROLLOUT_E2E_OUTAGE_SEC", 30)
    endpoint = urlsplit(faults.cluster_endpoint or "")
    if endpoint.scheme != "http" or not endpoint.hostname:
        pytest.skip("the outage test proxies an http:// storage endpoint (set one)")
    if not faults.runner_image:
        pytest.skip("no runner image known to run the proxy (set ROLLOUT_RUNNER_IMAGE)")
    proxy = f"rollout-e2e-store-{uuid.uuid4().hex[:6]}"
    make_proxy(faults, proxy, endpoint.hostname, endpoint.port or 80)
    through_proxy = {**faults.storage, "endpoint": f"http://{proxy}.{faults.namespace}.svc:9000"}
    agent_sec = int(outage) + 15
    name = faults.job(
        "e2e-outage",
        storage=through_proxy,
        agents=[slow_agent(agent_sec)],
        nAttempts=4,
        nConcurrentTrials=4,
        logLevel="warning",
    )

    def all_running() -> bool:
        trials = faults.trials(name)
        return len(trials) == 4 and all(
            (t.get("status") or {}).get("phase") == "Running" for t in trials
        )

    wait_until(all_running, timeout=faults.timeout, what="every trial running")
    # The agents end, and the trials upload, while storage is unreachable.
    time.sleep(agent_sec - outage / 2)  # the outage's timing, not a synchronisation
    scale(faults, proxy, 0)
    wait_until(lambda: proxy_pods_gone(faults, proxy), timeout=60, what="the proxy down")
    time.sleep(outage)
    scale(faults, proxy, 1)
    job = faults.completed(name)

    counts = job["status"]["counts"]
    assert (counts["completed"], counts["failed"]) == (4, 0), job["status"]
    for trial in faults.trials(name):
        status = trial["status"]
        assert (status["phase"], status["reward"]) == ("Succeeded", 1.0), status
        assert status.get("infraRetries", 0) == 0
    for attempt in range(1, 5):
        record = json.loads(
            faults.store.get_bytes(faults.trial_dir(name, attempt, "slow") + "result.json")
        )
        assert (record["reward"], record["error"]) == (1.0, None)


def make_proxy(faults: Faults, name: str, host: str, port: int) -> None:
    labels = {"app.kubernetes.io/name": name}
    restricted = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    faults.apps.create_namespaced_deployment(
        faults.namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "proxy",
                                "image": faults.runner_image,
                                "command": ["python", "-c", PROXY, host, str(port)],
                                "ports": [{"containerPort": PROXY_PORT}],
                                "readinessProbe": {
                                    "tcpSocket": {"port": PROXY_PORT},
                                    "periodSeconds": 1,
                                },
                                "securityContext": restricted,
                            }
                        ],
                    },
                },
            },
        },
    )
    faults.made.append(("deployments", name))
    faults.core.create_namespaced_service(
        faults.namespace,
        {
            "metadata": {"name": name},
            "spec": {"selector": labels, "ports": [{"port": PROXY_PORT}]},
        },
    )
    faults.made.append(("services", name))
    wait_until(lambda: proxy_ready(faults, name), timeout=120, what="the storage proxy ready")


def scale(faults: Faults, name: str, replicas: int) -> None:
    faults.apps.patch_namespaced_deployment_scale(
        name, faults.namespace, {"spec": {"replicas": replicas}}
    )


def proxy_ready(faults: Faults, name: str) -> bool:
    status = faults.apps.read_namespaced_deployment(name, faults.namespace).status
    return bool(status.ready_replicas)


def proxy_pods_gone(faults: Faults, name: str) -> bool:
    selector = f"app.kubernetes.io/name={name}"
    return not faults.core.list_namespaced_pod(faults.namespace, label_selector=selector).items


def test_a_trial_pod_deleted_mid_run_is_retried_and_its_first_try_kept(faults: Faults) -> None:
    name = faults.job("e2e-deleted", agents=[slow_agent(30)], maxInfraRetries=1)
    trial = trial_resource_name(name, "slow", faults.dataset()["name"], TASK, 1)

    def running() -> bool:
        found = {t["metadata"]["name"]: t for t in faults.trials(name)}
        status = (found.get(trial) or {}).get("status") or {}
        return status.get("phase") == "Running"

    wait_until(running, timeout=faults.timeout, what="the trial running")
    time.sleep(10)  # well into the agent's 30 s (the deletion's timing, not a synchronisation)
    faults.core.delete_namespaced_pod(trial, faults.namespace)  # with its grace period
    retried_with_its_first_try_kept(faults, name)


def test_a_trial_pod_deleted_while_the_operator_is_away_is_retried(faults: Faults) -> None:
    """The Pod deleted in its runner's first seconds (before its trial says Running) with the
    operator scaled to 0, and gone by the time it is back: the operator finds the try's files
    in storage, so the trial is retried and the first try's files kept, as when it watched."""
    name, trial = faults.slow_trial_running("e2e-unseen")
    replicas = faults.operator_deployment().spec.replicas or 1
    faults.scale_operator(0)
    try:
        faults.kill_operator()  # no graceful stop: as soon as can be, within the first 10 s
        wait_until(faults.operator_gone, timeout=120, what="the operator scaled to 0")
        faults.core.delete_namespaced_pod(trial, faults.namespace)  # with its grace period
        wait_until(lambda: not faults.pods(name), timeout=120, what="the trial's Pod gone")
    finally:
        faults.scale_operator(replicas)
    retried_with_its_first_try_kept(faults, name)


def test_a_trial_pod_force_deleted_mid_run_is_retried_apart_from_its_first_try(
    faults: Faults,
) -> None:
    """`kubectl delete pod --force --grace-period=0`: the Pod is gone from the API at once while
    its kubelet stops it, and its runner may still upload what it has. The retry waits for it,
    so nothing of the first try is left among the second's (what the first try got to upload
    in the time its kubelet gave it is the node's business: not asserted)."""
    name, trial = faults.slow_trial_running("e2e-forced")
    time.sleep(5)  # into the agent's 30 s
    faults.core.delete_namespaced_pod(trial, faults.namespace, grace_period_seconds=0)
    job = faults.completed(name)

    assert job["status"]["counts"]["completed"] == 1
    (made,) = faults.trials(name)
    assert (made["status"]["phase"], made["status"]["infraRetries"]) == ("Succeeded", 1)
    prefix = faults.trial_dir(name, 1, "slow")
    final = json.loads(faults.store.get_bytes(prefix + "result.json"))
    assert (final["reward"], final["rollout"]["tries"]) == (1.0, 2)
    assert not faults.store.exists(prefix + "error.txt")


def retried_with_its_first_try_kept(faults: Faults, name: str) -> None:
    """The job of one slow trial whose first Pod was deleted completes: the trial succeeded in
    its retry, the stopped first try's files are under retries/1/, the second's in place."""
    job = faults.completed(name)
    assert job["status"]["counts"]["completed"] == 1
    (made,) = faults.trials(name)
    status = made["status"]
    assert (status["phase"], status["reward"], status["infraRetries"]) == ("Succeeded", 1.0, 1)
    prefix = faults.trial_dir(name, 1, "slow")
    kept = json.loads(faults.store.get_bytes(prefix + "retries/1/result.json"))
    assert kept["error"]["type"] == "internal_error"
    assert "SIGTERM" in kept["error"]["message"]
    final = json.loads(faults.store.get_bytes(prefix + "result.json"))
    assert (final["reward"], final["rollout"]["tries"]) == (1.0, 2)


def test_a_job_deleted_mid_run_leaves_nothing_within_60_s(faults: Faults) -> None:
    running = faults.job("e2e-doomed", agents=[slow_agent(50)], nAttempts=3)
    wait_until(lambda: len(faults.pods(running)) == 3, timeout=faults.timeout, what="3 Pods")
    faults.delete_job(running)
    wait_until(lambda: faults.nothing_left(running), timeout=60, what="the job's objects gone")

    # The same with the operator scaled to 0 when the job goes.
    replicas = faults.operator_deployment().spec.replicas or 1
    orphan = faults.job("e2e-orphan", agents=[slow_agent(50)], nAttempts=3)
    wait_until(lambda: len(faults.pods(orphan)) == 3, timeout=faults.timeout, what="3 Pods")
    faults.scale_operator(0)
    try:
        wait_until(faults.operator_gone, timeout=120, what="the operator scaled to 0")
        faults.delete_job(orphan)
        held = faults.get_job(orphan)
        assert held is not None
        assert held["metadata"]["deletionTimestamp"]  # its finalizer waits for the operator
    finally:
        faults.scale_operator(replicas)
    wait_until(faults.operator_ready, timeout=300, what="the operator back")
    wait_until(lambda: faults.nothing_left(orphan), timeout=60, what="the job's objects gone")


def test_fifty_malformed_jobs_are_refused_or_invalid_beside_a_valid_one(faults: Faults) -> None:
    run = uuid.uuid4().hex[:6]
    dataset = faults.dataset()
    taken: dict[str, Any] = {}
    wrong: list[str] = []
    for case in CASES:
        body = case.manifest(dataset, storage=faults.storage)
        if case.name is None:
            body["metadata"]["name"] = f"{case.id}-{run}"
        try:
            faults.custom.create_namespaced_custom_object(
                GROUP, VERSION, faults.namespace, "rolloutjobs", body, field_validation="Strict"
            )
        except ApiException as err:
            if case.refused is None and not case.unknown_field:
                wrong.append(f"{case.id}: refused ({err.status}), expected taken")
            elif err.status not in (400, 413, 422, 500):
                wrong.append(f"{case.id}: refused with {err.status}")
            continue
        faults.jobs.append(body["metadata"]["name"])
        if case.refused is not None:
            wrong.append(f"{case.id}: taken, expected refused ({case.refused})")
        else:
            taken[body["metadata"]["name"]] = case
    valid = faults.job("e2e-valid")

    def settled() -> bool:
        conditions = [valid_condition(faults.get_job(name)) for name in taken]
        return faults.phase(valid) == "Completed" and all(c is not None for c in conditions)

    wait_until(settled, timeout=faults.timeout, what="the valid job done, the others invalid")
    for name, case in taken.items():
        condition = valid_condition(faults.get_job(name))
        assert condition is not None
        assert case.invalid is not None
        if (condition["status"], condition["reason"]) != ("False", case.invalid[0]):
            wrong.append(f"{case.id}: {condition}, expected {case.invalid}")
        if faults.trials(name):
            wrong.append(f"{case.id}: has trials")
    assert wrong == []


def valid_condition(job: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Valid"), None)
