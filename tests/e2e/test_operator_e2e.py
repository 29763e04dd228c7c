"""The operator end to end on a real cluster, as a user would check it: the CRDs from crds/
installed, `rollout-operator` running (here as a local process with KUBECONFIG), a RolloutJob of
the oracle agent on the offline example task applied, and the trial and the job's files checked;
then the same task on an image that cannot be pulled (`127.0.0.1:1/nothing:1`, an address that
refuses at once), whose trial still leaves its record in storage.

Settings, from the environment:

- KUBECONFIG (required; skipped without it), ROLLOUT_E2E_CONTEXT (optional);
- ROLLOUT_RUNNER_IMAGE (required): the runner image the trial Pod runs;
- ROLLOUT_E2E_TASK_IMAGE: the task's image (default: the example's debian:bookworm-slim);
- ROLLOUT_STORAGE_BUCKET (required), ROLLOUT_STORAGE_ENDPOINT, ROLLOUT_STORAGE_PREFIX,
  ROLLOUT_STORAGE_REGION, ROLLOUT_STORAGE_PATH_STYLE, and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY:
  how this machine (and the operator process) reaches storage; ROLLOUT_STORAGE_CLUSTER_ENDPOINT:
  how Pods reach it when that differs (the quickstart's MinIO). The credentials are put in a
  Secret of the test's namespace for the trial Pod;
- ROLLOUT_E2E_TIMEOUT: seconds the job may take (default 600).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from loopback import free_port
from paths import REPO
from rollout.api.job import JobDataset
from rollout.api.layout import job_result_key, trial_prefix
from rollout.cli.prepare import prepare_dataset
from rollout.cli.publish import publish_datasets
from rollout.storage import ObjectStore, storage_from_env

pytestmark = pytest.mark.e2e

T = TypeVar("T")
TASK = REPO / "examples" / "tasks" / "hello-offline"
CRDS = REPO / "crds"
GROUP, VERSION = "rollout.dev", "v1alpha1"
SECRET = "rollout-e2e-storage"


def wait_until(check: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll `check` until it returns something, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(1.0)  # polling interval of a real cluster, not a synchronisation sleep


@pytest.fixture
def api() -> kubernetes.client.ApiClient:
    for name in ("ROLLOUT_RUNNER_IMAGE", "ROLLOUT_STORAGE_BUCKET"):
        if not os.environ.get(name):
            pytest.skip(f"{name} is not set: the operator's e2e test needs it")
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        context=os.environ.get("ROLLOUT_E2E_CONTEXT"), client_configuration=configuration
    )
    return kubernetes.client.ApiClient(configuration)


def install_crds(api: kubernetes.client.ApiClient) -> None:
    extensions: Any = kubernetes.client.ApiextensionsV1Api(api)  # plain dicts in, models out
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        try:
            extensions.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:
                raise
            current = extensions.read_custom_resource_definition(crd["metadata"]["name"])
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            extensions.replace_custom_resource_definition(crd["metadata"]["name"], crd)

        def established(name: str = crd["metadata"]["name"]) -> bool:
            conditions = extensions.read_custom_resource_definition(name).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_until(established, timeout=60, what=f"CRD {crd['metadata']['name']} established")


@pytest.fixture
def namespace(api: kubernetes.client.ApiClient) -> Iterator[str]:
    install_crds(api)
    core: Any = kubernetes.client.CoreV1Api(api)
    name = f"rollout-e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


def publish_task(tmp_path: Path, store: ObjectStore, image: str | None) -> dict[str, str]:
    """The example task (with `image`, else its own) published to storage as a dataset."""
    root = tmp_path / "e2e-tasks"
    task = root / "hello-offline"
    shutil.copytree(TASK, task)
    if image:
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace('"debian:bookworm-slim"', json.dumps(image)))
    prepared = prepare_dataset(JobDataset(path=str(root)), tmp_path / "cache")
    publish_datasets(store, [prepared])  # as `rollout publish` does
    return {"name": prepared.dataset.name, "digest": prepared.digest}


def delete_job_while_the_operator_runs(
    custom: Any, namespace: str, name: str, operator: subprocess.Popen[bytes]
) -> None:
    """Delete the RolloutJob and wait until it is gone (the operator let it go)."""
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "rolloutjobs", name)
    except ApiException as err:
        if err.status != 404:
            raise

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rolloutjobs", name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return operator.poll() is not None  # no operator left to release it: stop waiting

    wait_until(gone, timeout=60, what=f"RolloutJob {name} deleted")


class Cluster:
    """The test's namespace with storage and an operator process serving it."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str, tmp_path: Path) -> None:
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.core: Any = kubernetes.client.CoreV1Api(api)
        self.custom: Any = kubernetes.client.CustomObjectsApi(api)
        self.settings, self.credentials = storage_from_env()
        self.store = ObjectStore(self.settings, self.credentials)
        self.storage: dict[str, Any] = {
            "bucket": self.settings.bucket,
            "prefix": self.settings.prefix,
            "region": self.settings.region,
            "pathStyle": self.settings.path_style,
        }
        if endpoint := os.environ.get("ROLLOUT_STORAGE_CLUSTER_ENDPOINT") or self.settings.endpoint:
            self.storage["endpoint"] = endpoint
        self.log_path = tmp_path / "operator.log"
        self.metrics_port = free_port()
        self.jobs: list[str] = []
        self.operator: subprocess.Popen[bytes] | None = None

    def start(self, **environ: str) -> None:
        """The Secret the trial Pods read storage with, and the operator (`environ` added)."""
        if self.credentials is not None:
            self.core.create_namespaced_secret(
                self.namespace,
                {
                    "metadata": {"name": SECRET},
                    "stringData": {
                        "AWS_ACCESS_KEY_ID": self.credentials.access_key_id.get_secret_value(),
                        "AWS_SECRET_ACCESS_KEY": (
                            self.credentials.secret_access_key.get_secret_value()
                        ),
                    },
                },
            )
            self.storage["credentialsSecret"] = SECRET
        env = {
            **os.environ,
            "ROLLOUT_NAMESPACES": self.namespace,
            "ROLLOUT_PEERING": "",
            "ROLLOUT_METRICS_PORT": str(self.metrics_port),
            "ROLLOUT_HEALTH_PORT": str(free_port()),
            "ROLLOUT_STATUS_INTERVAL_SEC": "1",
            **environ,
        }
        with self.log_path.open("ab") as log:
            self.operator = subprocess.Popen(
                [shutil.which("rollout-operator") or "rollout-operator"],
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        """The jobs first, while the operator runs: only it removes its finalizer, and a job
        left behind would hold the namespace Terminating for good."""
        if self.operator is None:
            return
        for name in self.jobs:
            delete_job_while_the_operator_runs(self.custom, self.namespace, name, self.operator)
        self.operator.terminate()
        try:
            self.operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.operator.kill()

    def submit(self, dataset: dict[str, str]) -> str:
        """A RolloutJob of the oracle agent on `dataset`; its name."""
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        self.jobs.append(name)
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "rolloutjobs",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RolloutJob",
                "metadata": {"name": name},
                "spec": {
                    "agents": [{"name": "oracle"}],
                    "datasets": [dataset],
                    "nConcurrentTrials": 1,
                    "metrics": [{"type": "mean"}],
                    "storage": self.storage,
                    "runnerImage": os.environ["ROLLOUT_RUNNER_IMAGE"],
                },
            },
        )
        return name

    def completed(self, name: str) -> dict[str, Any]:
        """The RolloutJob once Completed (within ROLLOUT_E2E_TIMEOUT); the operator's log on
        failure."""
        timeout = float(os.environ.get("ROLLOUT_E2E_TIMEOUT", "600"))

        def finished() -> dict[str, Any] | None:
            assert self.operator is not None
            assert self.operator.poll() is None, (
                "the operator exited:\n" + self.log_path.read_text()
            )
            job: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "rolloutjobs", name
            )
            phase = (job.get("status") or {}).get("phase")
            assert phase != "Failed", json.dumps(job.get("status"), indent=2)
            return job if phase == "Completed" else None

        try:
            return wait_until(finished, timeout=timeout, what=f"RolloutJob {name} completed")
        except (TimeoutError, AssertionError):
            print(self.log_path.read_text())
            raise

    def metric(self, name: str) -> float | None:
        """A sample without labels from the operator's /metrics; None when it has none."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # this machine
        with opener.open(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as page:
            families = text_string_to_metric_families(page.read().decode())
        samples = (sample for family in families for sample in family.samples)
        return next((s.value for s in samples if s.name == name and not s.labels), None)

    def trial_dir(self, job: str, dataset: dict[str, str]) -> str:
        return trial_prefix(
            self.settings.prefix, job, "oracle", dataset["name"], "hello-offline", 1
        )


@pytest.fixture
def cluster(api: kubernetes.client.ApiClient, namespace: str, tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(api, namespace, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_the_operator_runs_an_oracle_job_on_a_real_cluster(cluster: Cluster) -> None:
    store = cluster.store
    dataset = publish_task(cluster.tmp_path, store, os.environ.get("ROLLOUT_E2E_TASK_IMAGE"))
    cluster.start()
    job_name = cluster.submit(dataset)
    job = cluster.completed(job_name)

    status = job["status"]
    assert status["counts"]["total"] == status["counts"]["completed"] == 1
    assert status["passRate"] == 1.0
    trials = cluster.custom.list_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, "rollouttrials"
    )
    (trial,) = trials["items"]
    assert trial["status"]["phase"] == "Succeeded"
    assert trial["status"]["reward"] == 1.0
    assert trial["status"].get("error") is None
    result_key = job_result_key(cluster.settings.prefix, job_name)
    assert status["resultUri"] == store.uri(result_key)
    job_result = json.loads(store.get_bytes(result_key))
    assert (job_result["total_trials"], job_result["pass_rate"]) == (1, 1.0)
    trial_dir = cluster.trial_dir(job_name, dataset)
    trial_result = json.loads(store.get_bytes(trial_dir + "result.json"))
    assert (trial_result["reward"], trial_result["error"]) == (1.0, None)
    assert store.exists(trial_dir + "logs/verifier/reward.txt")
    # The trial's Pod is gone once the trial ended (preserveEnv is off).
    pods = cluster.core.list_namespaced_pod(cluster.namespace, label_selector="rollout.dev/trial")
    assert [p.metadata.name for p in pods.items if not p.metadata.deletion_timestamp] == []
    # The runner's times came through the kubelet's termination message to the operator's
    # metrics (a runner image older than this test reports none).
    assert cluster.metric("rollout_runner_startup_seconds_count") == 1
    assert cluster.metric("rollout_runner_startup_exposed_seconds_count") == 1


UNPULLABLE_IMAGE = "127.0.0.1:1/nothing:1"
"""An image on an address that refuses at once: never a public registry."""


def test_a_trial_whose_image_cannot_be_pulled_leaves_its_record(cluster: Cluster) -> None:
    store = cluster.store
    dataset = publish_task(cluster.tmp_path, store, UNPULLABLE_IMAGE)
    # The kubelet retries a pull with back-off; the operator gives up on it after this grace.
    cluster.start(ROLLOUT_IMAGE_PULL_GRACE_SEC="20")
    job_name = cluster.submit(dataset)
    job = cluster.completed(job_name)

    assert job["status"]["counts"]["failed"] == 1
    assert job["status"]["failures"]["infrastructure"] == 1
    trial_dir = cluster.trial_dir(job_name, dataset)
    record = json.loads(store.get_bytes(trial_dir + "result.json"))
    assert record["error"]["type"] == "environment_image_pull_failed"
    assert record["reward"] is None
    assert record["rollout"]["failure_class"] == "infrastructure"
    assert record["rollout"]["tries"] == 1
    error_txt = store.get_bytes(trial_dir + "error.txt").decode()
    assert error_txt.startswith("environment_image_pull_failed: ")
    job_result = json.loads(store.get_bytes(job_result_key(cluster.settings.prefix, job_name)))
    assert job_result["failed_trials"] == 1
    assert job_result["rollout"]["failures"]["infrastructure"] == 1
