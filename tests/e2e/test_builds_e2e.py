"""In-cluster image builds end to end on a real cluster, as a user would check them: a task with
only a Dockerfile (no `environment.docker_image`) published whole (task archive, build context,
manifest), `rollout-operator` running as a local process with KUBECONFIG and configured for
builds, and a RolloutJob of the oracle agent on it. Its RolloutImage is built (Ready, reason
Built), the trial passes (reward 1.0) in a Pod whose environment image is the pull registry's
reference pinned to the built digest; then a second job over the same task uses the same
RolloutImage, no build Pod is made for it, and it passes too.

The Dockerfile is `FROM <base>`, a RUN that writes a marker file (a token new on every run, so
that each run really builds: an image built by an earlier run would be a cache hit), and
`WORKDIR /app`; the verifier checks the marker (the trial ran the built image) and the
/app/hello.txt the oracle's solution writes.

Settings, from the environment (besides those of test_operator_e2e.py, which this test shares:
KUBECONFIG, ROLLOUT_E2E_CONTEXT, ROLLOUT_RUNNER_IMAGE, the ROLLOUT_STORAGE_* variables and the
AWS credentials, ROLLOUT_STORAGE_CLUSTER_ENDPOINT, ROLLOUT_E2E_TIMEOUT, per job):

- ROLLOUT_E2E_IMAGE_REGISTRY (required; skipped without it): the registry (host[:port]) build
  Pods push to, as they reach it, e.g. `kind-registry:5000`;
- ROLLOUT_E2E_IMAGE_PULL_REGISTRY: the same registry as the nodes pull from it, when that
  differs, e.g. `localhost:5001` on kind (the quickstart's containerd mapping);
- ROLLOUT_E2E_IMAGE_PLAIN_HTTP: true for a registry without TLS (default false);
- ROLLOUT_E2E_BUILDER: buildkit (default) or buildah; ROLLOUT_E2E_BUILDER_IMAGE: the builder's
  image (default: the operator's pinned one);
- ROLLOUT_E2E_BASE_IMAGE: the Dockerfile's FROM (default debian:bookworm-slim; it needs bash,
  which the oracle and the verifier run with). The builder pulls it as it pulls any base image:
  nothing here forces a pull;
- ROLLOUT_E2E_IMAGE_LOOKUP_REGISTRY: how THIS machine reaches the registry, when that differs
  from ROLLOUT_E2E_IMAGE_REGISTRY.

One address for the push and the look-up: the operator has one registry address for building,
`image_registry` (ROLLOUT_IMAGE_REGISTRY). Build Pods push to it, and the operator itself asks
it for the image's manifest (a HEAD) before it builds; `image_pull_registry` only says how the
nodes pull. In a cluster (the chart) the operator's Pod reaches the registry as the build Pods
do. Here the operator runs on this machine, so that one address must work both from the
cluster's Pods and from here; no setting of the operator can split it (given the lookup address,
the build Pods would push to an address they cannot reach, e.g. their own localhost; given the
Pods' address, the look-up fails, RegistryUnavailable, and the trials with it). So this test skips,
saying why, when ROLLOUT_E2E_IMAGE_LOOKUP_REGISTRY names another address, or when this machine
cannot reach ROLLOUT_E2E_IMAGE_REGISTRY (a GET of /v2/). It runs where one address works from
both: on kind on Linux, the registry container's address on the `kind` network (a Docker bridge
the host routes to, and the nodes' network),

    $(docker inspect -f '{{.NetworkSettings.Networks.kind.IPAddress}}' kind-registry):5000

with ROLLOUT_E2E_IMAGE_PULL_REGISTRY=localhost:5001 (what the nodes' containerd maps to the
registry) and ROLLOUT_E2E_IMAGE_PLAIN_HTTP=true; or a registry with a DNS name and TLS that
both reach. Set ROLLOUT_E2E_IMAGE_LOOKUP_REGISTRY to that same address, or leave it unset. The
registry must take anonymous pushes (this test makes no push Secret), and the namespace admits
the build Pods (it is made with Pod Security `privileged`, which BuildKit's unconfined profiles
need).

Clean-up: a namespace per run, deleted at the end, after its jobs and RolloutImages were deleted
while the operator still ran (a RolloutImage being built keeps a finalizer only the operator
removes). The image pushed stays in the registry (one per run, tagged with its hash): this test
deletes nothing there (kind's `registry:2` refuses deletes unless configured to allow them).

Time: ROLLOUT_E2E_TIMEOUT (default 600 s) bounds each job; pytest's limit for the test
(tests/conftest.py) is one such timeout and a 300 s margin, which the second job (nothing to
build, the image already on a node or pulled by digest) and the clean-up fit in.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.watch
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from test_operator_e2e import (
    GROUP,
    VERSION,
    Cluster,
    delete_job_while_the_operator_runs,
    install_crds,
    wait_until,
)

from rollout.api.dataset import load_local_dataset
from rollout.api.images import ENVIRONMENT_IMAGE_REPOSITORY
from rollout.api.layout import dataset_manifest_key, environment_archive_key, task_archive_key
from rollout.api.manifest import canonical_json, manifest_digest
from rollout.api.taskdir import environment_hash, load_task, task_content_hash
from rollout.datasets.bundle import build_manifest, environment_archive, task_archive
from rollout.storage import ObjectStore

pytestmark = pytest.mark.e2e

TASK = "hello-built"
MARKER = "/etc/rollout-e2e-marker"
BUILD_POD_LABELS = {"rollout.dev/component": "image-build"}
BUILDERS = ("buildkit", "buildah")
WATCH_SEC = 5
"""Each watch request of the Pod log lasts this long; it stops within it."""


# --- settings -------------------------------------------------------------------------------------


def _flag(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value not in ("", "true", "false"):
        raise ValueError(f"{name} must be true or false, not {environ[name]!r}")
    return value == "true"


@dataclass(frozen=True)
class BuildSettings:
    """The builds this test asks the operator for (see the module docstring)."""

    registry: str
    pull_registry: str
    plain_http: bool
    builder: str
    builder_image: str | None
    base_image: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BuildSettings:
        """The settings, or a skip saying what is missing (ValueError for a bad value)."""
        registry = environ.get("ROLLOUT_E2E_IMAGE_REGISTRY", "").strip()
        if not registry:
            pytest.skip(
                "ROLLOUT_E2E_IMAGE_REGISTRY is not set: the builds' e2e test needs a registry "
                "that build Pods push to (e.g. kind-registry:5000)"
            )
        builder = environ.get("ROLLOUT_E2E_BUILDER", "").strip() or "buildkit"
        if builder not in BUILDERS:
            raise ValueError(f"ROLLOUT_E2E_BUILDER must be buildkit or buildah, not {builder!r}")
        lookup = environ.get("ROLLOUT_E2E_IMAGE_LOOKUP_REGISTRY", "").strip() or registry
        if lookup != registry:
            pytest.skip(
                f"this machine reaches the registry as {lookup}, build Pods as {registry}; the "
                "operator pushes to and looks images up at one address (ROLLOUT_IMAGE_REGISTRY), "
                "and here it runs outside the cluster: use an address both reach (see this "
                "test's docstring) and set ROLLOUT_E2E_IMAGE_LOOKUP_REGISTRY to it, or unset it"
            )
        return cls(
            registry=registry,
            pull_registry=environ.get("ROLLOUT_E2E_IMAGE_PULL_REGISTRY", "").strip() or registry,
            plain_http=_flag(environ, "ROLLOUT_E2E_IMAGE_PLAIN_HTTP"),
            builder=builder,
            builder_image=environ.get("ROLLOUT_E2E_BUILDER_IMAGE", "").strip() or None,
            base_image=environ.get("ROLLOUT_E2E_BASE_IMAGE", "").strip() or "debian:bookworm-slim",
        )

    def unreachable(self) -> str | None:
        """Why this machine (the operator) cannot reach the registry, or None: any HTTP answer
        to `GET /v2/` (401 included) is an answer."""
        scheme = "http" if self.plain_http else "https"
        url = f"{scheme}://{self.registry}/v2/"
        try:
            urllib3.request("GET", url, timeout=10.0, retries=False)
        except urllib3.exceptions.HTTPError as err:
            hint = "" if self.plain_http else " (ROLLOUT_E2E_IMAGE_PLAIN_HTTP=true for no TLS)"
            return (
                f"the operator runs on this machine and must ask the registry for images, but "
                f"{url} does not answer here: {err}{hint}; see this test's docstring"
            )
        return None

    def operator_env(self) -> dict[str, str]:
        """The operator's build settings; the others it would read from this shell are unset
        (an empty value is unset), so that the test's namespace needs no Secret of them."""
        return {
            "ROLLOUT_IMAGE_REGISTRY": self.registry,
            "ROLLOUT_IMAGE_PULL_REGISTRY": self.pull_registry,
            "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP": "true" if self.plain_http else "false",
            "ROLLOUT_BUILDER": self.builder,
            "ROLLOUT_BUILDER_IMAGE": self.builder_image or "",
            "ROLLOUT_IMAGE_REPOSITORY": "",
            "ROLLOUT_IMAGE_PUSH_SECRET": "",
            "ROLLOUT_IMAGE_PULL_SECRET": "",
            "ROLLOUT_IMAGE_REGISTRY_CONFIG": "",
        }


# --- the task -------------------------------------------------------------------------------------


def make_task(root: Path, base_image: str, token: str) -> Path:
    """A dataset of one task whose image must be built: its Dockerfile does more than FROM and
    WORKDIR, and task.toml names no docker_image."""
    task = root / TASK
    for folder in ("environment", "solution", "tests"):
        (task / folder).mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN echo {token} > {MARKER}\nWORKDIR /app\n"
    )
    (task / "instruction.md").write_text("Write 'Hello, world!' to /app/hello.txt.\n")
    (task / "solution" / "solve.sh").write_text(
        '#!/bin/bash\nset -eu\necho "Hello, world!" > /app/hello.txt\n'
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "# 1 when the image is the one built (its marker) and the solution ran; 0 otherwise.\n"
        "mkdir -p /logs/verifier\n"
        f'if [ "$(cat {MARKER} 2>/dev/null)" = {token} ] &&\n'
        '   [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then\n'
        "  echo 1 > /logs/verifier/reward.txt\n"
        "else\n"
        f'  echo "marker: $(cat {MARKER} 2>&1); hello.txt: $(cat /app/hello.txt 2>&1)"\n'
        "  echo 0 > /logs/verifier/reward.txt\n"
        "fi\n"
    )
    (task / "task.toml").write_text(
        'version = "1.0"\n\n'
        "[verifier]\ntimeout_sec = 60.0\n\n"
        "[agent]\ntimeout_sec = 60.0\n\n"
        "[environment]\n"
        "# No docker_image: the Dockerfile is built in the cluster.\n"
        'build_timeout_sec = 600.0\ncpus = "1"\nmemory = "512M"\nstorage = "1G"\n'
    )
    return root


def publish_whole(store: ObjectStore, root: Path) -> dict[str, str]:
    """Publish a dataset as `rollout publish` does: each task's archive and build context (the
    environment's archive), then the manifest; the RolloutJob's dataset entry."""
    prefix = store.location.prefix
    for task in load_local_dataset(root).tasks:
        path = task.path
        store.put_bytes(task_archive_key(prefix, task_content_hash(path)), task_archive(path))
        store.put_bytes(
            environment_archive_key(prefix, environment_hash(path)),
            environment_archive(load_task(path)),
        )
    manifest = build_manifest(load_local_dataset(root))
    digest = manifest_digest(manifest)
    store.put_bytes(dataset_manifest_key(prefix, digest), canonical_json(manifest))
    return {"name": manifest.name, "digest": digest}


# --- the cluster ----------------------------------------------------------------------------------


class PodLog:
    """Every Pod the namespace had since `start`, as first seen: a list, then a watch from the
    list's resourceVersion, in a thread. Trial Pods go when their trial ends and build Pods when
    their image is finished, so neither a list afterwards nor a 1 s poll would see them all."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        # A client of its own: the watch's connection stays open in its thread.
        client = kubernetes.client.ApiClient(api.configuration)
        self.core: Any = kubernetes.client.CoreV1Api(client)
        self.namespace = namespace
        self._pods: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def start(self) -> None:
        version = self._list()
        self._thread = threading.Thread(
            target=self._follow, args=(version,), name="e2e-pod-log", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(WATCH_SEC + 30)

    def pods(self, labels: Mapping[str, str]) -> list[Any]:
        """The Pods seen with these labels (kubernetes client V1Pod objects)."""
        if self.failure is not None:
            raise AssertionError(f"the watch of the namespace's Pods failed: {self.failure!r}")
        with self._lock:
            seen = list(self._pods.values())
        return [
            pod
            for pod in seen
            if all((pod.metadata.labels or {}).get(k) == v for k, v in labels.items())
        ]

    def _see(self, pod: Any) -> None:
        with self._lock:
            self._pods.setdefault(pod.metadata.name, pod)

    def _list(self) -> str:
        listed = self.core.list_namespaced_pod(self.namespace, _request_timeout=60)
        for pod in listed.items:
            self._see(pod)
        return str(listed.metadata.resource_version)

    def _follow(self, version: str) -> None:
        try:
            while not self._stopping.is_set():
                watcher: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
                try:
                    for event in watcher.stream(
                        self.core.list_namespaced_pod,
                        self.namespace,
                        resource_version=version,
                        timeout_seconds=WATCH_SEC,
                        _request_timeout=WATCH_SEC + 30,
                    ):
                        pod = event["object"]
                        version = pod.metadata.resource_version
                        self._see(pod)
                        if self._stopping.is_set():
                            watcher.stop()
                except ApiException as err:
                    if err.status != 410:  # 410: the version is too old; list again
                        raise
                    version = self._list()
        except BaseException as err:  # reported by `pods`, in the test's thread
            self.failure = err


class BuildCluster(Cluster):
    """The e2e test's Cluster, and the RolloutImages deleted with the jobs."""

    def stop(self) -> None:
        """The jobs, then the RolloutImages, while the operator runs (it removes their
        finalizers), then the operator; the jobs first, as a waiting trial would have its
        RolloutImage made again."""
        if self.operator is None:
            return
        operator = self.operator
        for name in self.jobs:
            delete_job_while_the_operator_runs(self.custom, self.namespace, name, operator)
        self.jobs = []
        for image in self.images():
            try:
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "rolloutimages", image["metadata"]["name"]
                )
            except ApiException as err:
                if err.status != 404:
                    raise
        wait_until(
            lambda: not self.images() or operator.poll() is not None,
            timeout=60,
            what="RolloutImages deleted",
        )
        super().stop()

    def images(self) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "rolloutimages"
        )
        return list(listed["items"])

    def trials(self, job: str) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "rollouttrials", label_selector=f"rollout.dev/job={job}"
        )
        return list(listed["items"])


@pytest.fixture
def builds() -> BuildSettings:
    return BuildSettings.from_env(os.environ)


@pytest.fixture
def build_api(builds: BuildSettings) -> kubernetes.client.ApiClient:
    for name in ("ROLLOUT_RUNNER_IMAGE", "ROLLOUT_STORAGE_BUCKET"):
        if not os.environ.get(name):
            pytest.skip(f"{name} is not set: the operator's e2e tests need it")
    if (why := builds.unreachable()) is not None:
        pytest.skip(why)
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        context=os.environ.get("ROLLOUT_E2E_CONTEXT"), client_configuration=configuration
    )
    return kubernetes.client.ApiClient(configuration)


@pytest.fixture
def build_namespace(build_api: kubernetes.client.ApiClient) -> Iterator[str]:
    """A namespace for this run that admits build Pods (BuildKit's unconfined profiles)."""
    install_crds(build_api)
    core: Any = kubernetes.client.CoreV1Api(build_api)
    name = f"rollout-e2e-builds-{uuid.uuid4().hex[:8]}"
    labels = {f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "warn")}
    core.create_namespace({"metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def pod_log(build_api: kubernetes.client.ApiClient, build_namespace: str) -> Iterator[PodLog]:
    log = PodLog(build_api, build_namespace)
    log.start()
    try:
        yield log
    finally:
        log.stop()


@pytest.fixture
def build_cluster(
    build_api: kubernetes.client.ApiClient, build_namespace: str, tmp_path: Path
) -> Iterator[BuildCluster]:
    running = BuildCluster(build_api, build_namespace, tmp_path)
    try:
        yield running
    finally:
        running.stop()


# --- the test -------------------------------------------------------------------------------------


def environment_image(pod: Any) -> str:
    return str(next(c.image for c in pod.spec.containers if c.name == "environment"))


def passed(cluster: BuildCluster, job: str) -> dict[str, Any]:
    """The job's one trial, which passed; the job Completed with pass rate 1."""
    status = cluster.completed(job)["status"]
    assert (status["counts"]["total"], status["counts"]["completed"]) == (1, 1), status
    assert status["passRate"] == 1.0, status
    (trial,) = cluster.trials(job)
    assert trial["status"]["phase"] == "Succeeded", trial["status"]
    assert trial["status"]["reward"] == 1.0, trial["status"]
    assert trial["status"].get("error") is None, trial["status"]
    return trial


def test_a_dockerfile_task_is_built_once_and_run_pinned_on_a_real_cluster(
    builds: BuildSettings, build_cluster: BuildCluster, pod_log: PodLog
) -> None:
    cluster = build_cluster
    token = f"built-{uuid.uuid4().hex}"  # a new image every run: nothing cached from the last
    root = make_task(cluster.tmp_path / "e2e-builds", builds.base_image, token)
    dataset = publish_whole(cluster.store, root)
    cluster.start(**builds.operator_env())

    # The first job: the image is built, the trial runs it by its digest and passes.
    first = cluster.submit(dataset)
    trial = passed(cluster, first)
    (image,) = cluster.images()
    status = image["status"]
    assert (status["phase"], status["reason"]) == ("Ready", "Built"), status
    assert status["digest"].startswith("sha256:"), status
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", status
    assert trial["spec"]["imageBuild"] == image["metadata"]["name"]
    assert image["spec"]["image"].startswith(f"{builds.registry}/")
    pinned = f"{builds.pull_registry}/{ENVIRONMENT_IMAGE_REPOSITORY}@{status['digest']}"
    (first_pod,) = pod_log.pods({"rollout.dev/job": first})
    assert environment_image(first_pod) == pinned
    built_by = {pod.metadata.name for pod in pod_log.pods(BUILD_POD_LABELS)}
    assert built_by, "no build Pod was seen"
    assert status["podName"] in built_by

    # The second job over the same task: the same RolloutImage, no build Pod, a pass.
    second = cluster.submit(dataset)
    trial = passed(cluster, second)
    (again,) = cluster.images()
    assert again["metadata"]["uid"] == image["metadata"]["uid"]
    kept = ("phase", "reason", "digest", "podName", "attempts", "completedAt")
    assert {k: again["status"].get(k) for k in kept} == {k: status.get(k) for k in kept}
    assert trial["spec"]["imageBuild"] == image["metadata"]["name"]
    assert {pod.metadata.name for pod in pod_log.pods(BUILD_POD_LABELS)} == built_by
    (second_pod,) = pod_log.pods({"rollout.dev/job": second})
    assert environment_image(second_pod) == pinned
