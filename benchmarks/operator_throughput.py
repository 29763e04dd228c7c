"""The operator's throughput, API economy and memory, against a Kubernetes API, and the API's own
ceiling beside it.

The real `rollout-operator` process runs against a Kubernetes API and a real S3 endpoint. `--api`
picks the API, and the first line printed says which was measured:

- `emulator` (the default): the kmock-based emulator of the test suite (tests/kubeharness/
  emulator), in this process;
- `real`: a real control plane (etcd, kube-apiserver and kube-controller-manager as processes,
  tests/kubeharness/real; found as the suite finds them, `KUBEBUILDER_ASSETS`), where the
  operator runs as the chart's ServiceAccount;
- `cluster`: the cluster KUBECONFIG names (its current context), in a namespace of the script's
  own (made and deleted here). The CRDs must be installed (`kubectl apply -f crds/`), or
  `--install-crds` installs them. The operator runs here as a local process, as the kubeconfig's
  user. Its trial Pods select a node label no node has (spec.pod.nodeSelector), so none is ever
  scheduled and only the control plane is measured.

For the emulator and the real control plane this script plays the kubelet; on a cluster nothing
does for the creation measurement (the Pods never start), and `--job-ratio` runs trials on the
nodes for real. Storage is the moto server started here (tests/s3server.py) unless
ROLLOUT_BENCH_S3_ENDPOINT names one (`operator_bench_parts.BenchStorage`); `--job-ratio` needs
one that the cluster's Pods reach.

1. (emulator, real) A job of `--driven` trials (default 500), every Pod run and finished by the
   script, each Pod running `--run-sec` seconds (default 2): API writes per trial (from the
   server's request log) and job status patches, and the time to complete. A trial whose runner
   runs past the operator's ROLLOUT_RUNNING_STATUS_AFTER_SEC (10) also has its Running status
   written: `--run-sec 12` shows that fifth write.
2. A job of `--trials` trials (default 10,000) with nConcurrentTrials as large: how many trials
   per second the operator takes from creation to their Pod created, and its resident memory
   while that many trials and Pods exist.
3. The API's own ceiling for the same work: a plain client (`api_ceiling.py`: the operator's own
   API client, at its concurrency, no operator) creates as many RolloutTrial + Pod pairs like the
   operator's in another namespace; the operator's rate as a share of it says which party
   bounds the figure. `--no-ceiling` leaves it out.
4. (cluster, `--job-ratio M`) End to end on the nodes: M trivial trials (the oracle agent on a
   task of ROLLOUT_BENCH_IMAGE, which needs bash) through the operator, then an Indexed Job of M
   Pods with the same containers' images, requests and limits (rendered from one of the trials),
   each container sleeping `--job-sleep` seconds; both at `--job-concurrency` at once; the rates
   and their ratio. Images are pulled once by a warm-up Job first, never forced.

Figures, not asserts. The "API server" CPU figures are this process's (emulator) or etcd's,
kube-apiserver's and kube-controller-manager's (real); a cluster's are not known here. kmock 0.8
matches each request against its reactions by scanning the whole request log (a request costs
O(requests so far)), which makes thousands of trials impossible; here the log is searched newest
first within a window of recent requests (`RecentFirstLog`), which is enough for requests
dispatched as they arrive.

Profiling: ROLLOUT_BENCH_OPERATOR_WRAPPER is a command put before the operator's, e.g.
`python -m cProfile -o /tmp/operator.prof` (the profile is written when the operator stops) or
`py-spy record -o /tmp/operator.txt -f raw --` (if py-spy may trace here).

    python benchmarks/operator_throughput.py            # ~ a few minutes
    python benchmarks/operator_throughput.py --trials 2000 --driven 200
    python benchmarks/operator_throughput.py --api real --trials 2000 --driven 500
    KUBECONFIG=~/.kube/config python benchmarks/operator_throughput.py --api cluster \\
        --trials 2000 --install-crds
    KUBECONFIG=... ROLLOUT_BENCH_S3_ENDPOINT=... ROLLOUT_BENCH_RUNNER_IMAGE=... \\
        python benchmarks/operator_throughput.py --api cluster --trials 0 --job-ratio 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "benchmarks"))

import kubernetes.client  # noqa: E402
import kubernetes.config  # noqa: E402
import yaml  # noqa: E402
from operator_bench_parts import (  # noqa: E402
    CRD_NAMES,
    BenchStorage,
    Rate,
    api_writes,
    benchmark_task,
    bound_by,
    containers_like,
    indexed_job,
    job_finished,
    job_pod_container,
    namespace_manifest,
    ratio,
    rollout_job,
    runner_overhead,
    runner_times,
    template,
    unschedulable_selector,
    writes_between,
)
from pydantic import SecretStr  # noqa: E402

from kubeharness.emulator.emulated import EmulatedKube, kube_api  # noqa: E402
from kubeharness.identity import Identity  # noqa: E402
from kubeharness.kube import Kube  # noqa: E402
from kubeharness.real.client import ApiError, resource_path  # noqa: E402
from kubeharness.real.kube import RealKube  # noqa: E402
from kubeharness.real.plane import ControlPlane, find_binaries, unavailable_reason  # noqa: E402
from kubeharness.resources import (  # noqa: E402
    CRDS,
    CRDS_DIR,
    NAMESPACES,
    PODS,
    ROLLOUT_JOBS,
    ROLLOUT_TRIALS,
)
from loopback import free_port  # noqa: E402
from rollout.api.dataset import load_local_dataset  # noqa: E402
from rollout.api.job import JobDataset  # noqa: E402
from rollout.api.layout import dataset_manifest_key  # noqa: E402
from rollout.api.manifest import canonical_json, manifest_digest  # noqa: E402
from rollout.cli.prepare import prepare_dataset  # noqa: E402
from rollout.cli.publish import publish_datasets  # noqa: E402
from rollout.controller.config import OperatorConfig  # noqa: E402
from rollout.controller.jobexec import TRIAL_WRITERS  # noqa: E402
from rollout.controller.pod import RUNNER_CONTAINER, render_trial_pod  # noqa: E402
from rollout.datasets.bundle import build_manifest  # noqa: E402
from rollout.storage import ObjectStore, StorageCredentials, StorageLocation  # noqa: E402
from s3server import S3Server  # noqa: E402

ACCESS_KEY, SECRET_KEY = "AKIABENCHMARK0000001", "benchmark-secret"
MESSAGE = (
    '{"reward":1.0,"error":null,"durations":{"total_sec":1.0},"timestamps":null,'
    '"result_uri":null,"upload_error":null}'
)
BATCH_JOBS = "batch/v1/jobs"
ROLLOUT_IMAGES = "rollout.dev/v1alpha1/rolloutimages"
STORAGE_SECRET = "rollout-bench-storage"
STUCK_SEC = 60.0


class RecentFirstLog(list[Any]):
    """kmock's request log, iterated newest first and only over the last WINDOW requests.

    kmock decides which reaction serves a request by checking that the request is among each
    reaction's view of the log; a full log makes that O(n). Everything else (len, slices, the
    harness's `calls()`) sees the whole log.
    """

    WINDOW = 32

    def __iter__(self) -> Any:
        size = len(self)
        for index in range(size - 1, max(size - self.WINDOW, 0) - 1, -1):
            yield self[index]


def rss_mib(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a process in MiB, from /proc (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def deepest_child(pid: int) -> int:
    """The process a wrapper (ROLLOUT_BENCH_OPERATOR_WRAPPER) runs: its deepest descendant, or
    `pid` itself when it has none (the wrapper is the operator's interpreter, as cProfile)."""
    while True:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[0])


def server_cpu_seconds(kube: Any) -> float | None:
    """CPU time of the API server so far: this process (emulator) or the control plane's
    processes (real); None for a cluster (not on this machine)."""
    if isinstance(kube, RealKube):
        return sum(cpu_seconds(process.pid) for _name, process in kube.plane.processes)
    if isinstance(kube, EmulatedKube):
        return time.process_time()
    return None


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


# --- datasets -------------------------------------------------------------------------------------


def _write_files(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)


def publish_dataset(store: ObjectStore, root: Path, tasks: int) -> dict[str, str]:
    """A dataset of `tasks` small tasks; only its manifest goes to storage (no Pod really runs)."""
    for index in range(tasks):
        task = root / f"task-{index:04d}"
        _write_files(
            task,
            {
                "solve.sh": "#!/bin/sh\ntrue\n",  # the oracle's (seed 004's place)
                "instruction.md": f"Task {index}.\n",
                "tests/test.sh": "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
                "environment/Dockerfile": "FROM busybox\n",
                "task.toml": '[environment]\ndocker_image = "busybox:1.36"\n',
            },
        )
    manifest = build_manifest(load_local_dataset(root))
    digest = manifest_digest(manifest)
    key = dataset_manifest_key(store.location.prefix, digest)
    store.put_bytes(key, canonical_json(manifest), "application/json")
    return {"name": manifest.name, "digest": digest}


def publish_task(store: ObjectStore, root: Path, image: str) -> dict[str, str]:
    """The job ratio's one trivial task on `image`, its archive and manifest in storage."""
    _write_files(root / "noop", benchmark_task(image))
    prepared = prepare_dataset(JobDataset(path=str(root)), root.parent / "cache")
    publish_datasets(store, [prepared])  # as `rollout publish` does
    return {"name": prepared.dataset.name, "digest": prepared.digest}


# --- a cluster's API ------------------------------------------------------------------------------


class ClusterKube:
    """A namespace of its own on the cluster KUBECONFIG names (its current context), requests
    as the kubeconfig's user: the few `Kube` helpers this script needs, in threads."""

    def __init__(self, namespace: str, kubeconfig: Path | None = None) -> None:
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None,
            client_configuration=configuration,
        )
        configuration.connection_pool_maxsize = 8
        self.client = kubernetes.client.ApiClient(configuration)
        self.host = str(configuration.host)
        self.namespace = namespace
        self.extra_namespaces: list[str] = []

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = 60.0,
    ) -> Any:
        method, url, headers, body, post = self.client.param_serialize(
            method,
            path,
            query_params=dict(params or {}),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        response: Any = self.client.call_api(
            method, url, headers, body, post, _request_timeout=timeout
        )
        try:
            data = response.read()
        finally:
            response.response.release_conn()
        decoded: Any = json.loads(data) if data and data.strip().startswith(b"{") else data
        if response.status >= 400:
            raise ApiError(response.status, decoded)
        return decoded

    def open_watch(self, path: str, params: Mapping[str, str]) -> Any:
        """A watch's streaming answer (urllib3's response: iterate its lines, then release)."""
        method, url, headers, _body, _post = self.client.param_serialize(
            "GET",
            path,
            query_params={**params, "watch": "true"},
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        timeout = float(params.get("timeoutSeconds", "60")) + 30
        response: Any = self.client.call_api(method, url, headers, None, None, _request_timeout=(
            10, timeout))  # fmt: skip
        if response.status >= 400:
            response.read()
            response.response.release_conn()
            raise ApiError(response.status, {"message": f"watch {path}"})
        return response.response

    async def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.send, method, path, body, **kwargs)

    def _where(self, resource: str, namespace: str | None) -> str | None:
        return None if resource in (NAMESPACES, CRDS) else (namespace or self.namespace)

    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        path = resource_path(resource, self._where(resource, namespace))
        return dict(await self.request("POST", path, dict(body)))

    async def find(
        self, resource: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            path = resource_path(resource, self._where(resource, namespace), name)
            return dict(await self.request("GET", path))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def list(
        self, resource: str, namespace: str | None = None, *, labels: str = ""
    ) -> list[dict[str, Any]]:
        params = {"labelSelector": labels} if labels else {}
        path = resource_path(resource, self._where(resource, namespace))
        found = await self.request("GET", path, params=params)
        return list(found["items"])

    async def delete(
        self, resource: str, name: str, namespace: str | None = None, body: Any = None
    ) -> None:
        with contextlib.suppress(ApiError):
            path = resource_path(resource, self._where(resource, namespace), name)
            await self.request("DELETE", path, body)

    async def new_namespace(self, suffix: str) -> str:
        name = f"{self.namespace}-{suffix}"
        await self.create_namespace(name)
        self.extra_namespaces.append(name)
        return name

    async def create_namespace(self, name: str) -> None:
        await self.create(NAMESPACES, namespace_manifest(name))
        # Pods are refused until the namespace's `default` ServiceAccount exists.
        deadline = time.monotonic() + 60
        path = resource_path("v1/serviceaccounts", name, "default")
        while True:
            with contextlib.suppress(ApiError):
                await self.request("GET", path)
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"namespace {name}: no default ServiceAccount within 60 s")
            await asyncio.sleep(0.5)

    async def check_crds(self, install: bool) -> None:
        """The operator's CRDs installed (and established), or installed now with `install`."""
        missing = [n for n in CRD_NAMES if await self.find(CRDS, n) is None]
        if missing and not install:
            raise SystemExit(
                f"--api cluster: CRDs {', '.join(missing)} are not installed; "
                "run `kubectl apply -f crds/` or pass --install-crds"
            )
        if install:
            for path in sorted(CRDS_DIR.glob("*.yaml")):
                await asyncio.to_thread(self._install_crd, yaml.safe_load(path.read_text()))

    def _install_crd(self, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        path = resource_path(CRDS, None, name)
        try:
            self.send("POST", resource_path(CRDS, None), crd)
        except ApiError as err:
            if err.status != 409:
                raise
            current = self.send("GET", path)
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.send("PUT", path, crd)
        deadline = time.monotonic() + 60
        while True:
            conditions = (self.send("GET", path).get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"CRD {name} was not established within 60 s")
            time.sleep(0.5)

    async def clean_up(self) -> None:
        """Nothing left behind: finalizers off what kopf left them on (the operator has stopped),
        then the namespaces, whose deletion takes everything in them."""
        for namespace in (self.namespace, *self.extra_namespaces):
            for resource in (ROLLOUT_JOBS, ROLLOUT_TRIALS, ROLLOUT_IMAGES):
                with contextlib.suppress(ApiError):
                    for obj in await self.list(resource, namespace):
                        if obj["metadata"].get("finalizers"):
                            path = resource_path(resource, namespace, obj["metadata"]["name"])
                            await self.request(
                                "PATCH",
                                path,
                                {"metadata": {"finalizers": None}},
                                content_type="application/merge-patch+json",
                            )
            await self.delete(NAMESPACES, namespace)
        self.client.close()


# --- counting Pods as they are created ----------------------------------------------------------


class PostCounter:
    """Counts POSTs of a resource in the request log, reading only what is new each time; keeps
    the name of the first."""

    def __init__(self, kube: Kube, resource: str) -> None:
        self.kube, self.resource = kube, resource
        self.seen = kube.mark()
        self.count = 0
        self.first: str | None = None

    def update(self) -> int:
        calls = self.kube.calls(since=self.seen)
        self.seen += len(calls)  # not mark(): requests go on arriving meanwhile
        posts = [c for c in calls if c.method == "POST" and c.resource == self.resource]
        if posts and self.first is None:
            self.first = posts[0].name
        self.count += len(posts)
        return self.count

    def close(self) -> None:
        pass


class WatchCounter:
    """Counts the Pods of a label selector that appear, from a watch of the API (in a thread:
    one long request, no polling); keeps the name of the first. (On the real control plane,
    reading its audit log as it grows cost this script more than the watch, and under load the
    log's barrier request took longer than the harness waits.)"""

    def __init__(
        self,
        kube: ClusterKube,
        labels: str,
        on_pod: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.kube, self.labels, self.on_pod = kube, labels, on_pod
        self.names: set[str] = set()
        self.first: str | None = None
        self.count = 0
        self._stop = threading.Event()
        self._stream: Any = None
        self._path = resource_path(PODS, kube.namespace)
        listed = kube.send("GET", self._path, params={"labelSelector": labels})
        self._version = str(listed["metadata"]["resourceVersion"])
        for pod in listed["items"]:
            self._saw(pod)
        self._thread = threading.Thread(target=self._watch, daemon=True, name="pod-watch")
        self._thread.start()

    def _saw(self, pod: Mapping[str, Any]) -> None:
        if self.on_pod is not None:
            self.on_pod(pod)
        name = str(pod["metadata"]["name"])
        if name not in self.names:
            self.names.add(name)
            self.first = self.first or name

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                params = {
                    "labelSelector": self.labels,
                    "resourceVersion": self._version,
                    "timeoutSeconds": "10",
                    "allowWatchBookmarks": "true",
                }
                stream = self._stream = self.kube.open_watch(self._path, params)
                try:
                    for line in stream:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # 410 Gone: list again
                            listed = self.kube.send(
                                "GET", self._path, params={"labelSelector": self.labels}
                            )
                            self._version = str(listed["metadata"]["resourceVersion"])
                            for pod in listed["items"]:
                                self._saw(pod)
                            break
                        self._version = str(event["object"]["metadata"]["resourceVersion"])
                        if event["type"] == "ADDED":
                            self._saw(event["object"])
                        elif event["type"] == "MODIFIED" and self.on_pod is not None:
                            self.on_pod(event["object"])
                        if self._stop.is_set():
                            break
                finally:
                    stream.release_conn()
            except Exception:  # a dropped watch: watch again from the last version
                time.sleep(0.5)

    def update(self) -> int:
        self.count = len(self.names)
        return self.count

    def close(self) -> None:
        self._stop.set()
        # Unblock the watch's read at once (urllib3 2.3 and later), not at its timeout.
        shutdown = getattr(self._stream, "shutdown", None)
        if shutdown is not None:
            with contextlib.suppress(Exception):
                shutdown()


def pod_counter(kube: Any, labels: str, workdir: Path) -> PostCounter | WatchCounter:
    """The emulator's request log (in this process: cheap), else a watch."""
    if isinstance(kube, EmulatedKube):
        return PostCounter(kube, PODS)
    if isinstance(kube, RealKube):
        kubeconfig = kube.write_kubeconfig(workdir / "watch-kubeconfig", identity=Identity.USER)
        return WatchCounter(ClusterKube(kube.namespace, kubeconfig), labels)
    return WatchCounter(kube, labels)


LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""For the operator's own ports on this machine: no proxy."""


def scrape_writes(metrics_port: int) -> dict[tuple[str, str], float]:
    """The operator's own API writes so far, from its /metrics."""
    with LOCAL.open(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        return api_writes(response.read().decode())


async def ready(op: OperatorProcess, health_port: int, within: float = 60.0) -> None:
    """Until the operator answers on its health port (kopf serves it once started)."""
    deadline = time.monotonic() + within

    def probe() -> bool:
        try:
            with LOCAL.open(f"http://127.0.0.1:{health_port}/healthz", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    while not await asyncio.to_thread(probe):
        if op.process.returncode is not None or time.monotonic() > deadline:
            raise SystemExit("the operator did not start:\n" + op.tail())
        await asyncio.sleep(0.2)  # polling its port


# --- the operator -------------------------------------------------------------------------------


class OperatorProcess:
    """The `rollout-operator` process: its pid (under a wrapper, the operator's own) and ports."""

    def __init__(self, process: asyncio.subprocess.Process, metrics_port: int, log: Path) -> None:
        self.process = process
        self.metrics_port = metrics_port
        self.log = log
        self.pid = process.pid

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def operator_env(
    kubeconfig: str,
    namespaces: list[str],
    storage: StorageLocation,
    credentials: tuple[str, str],
    metrics_port: int,
    **settings: str,
) -> dict[str, str]:
    """The `rollout-operator` process's environment: this shell's, the kubeconfig, `namespaces`,
    the storage and its credentials, free ports, and more ROLLOUT_* `settings`."""
    return {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "ROLLOUT_NAMESPACES": ",".join(namespaces),
        "ROLLOUT_RUNNER_IMAGE": os.environ.get(
            "ROLLOUT_BENCH_RUNNER_IMAGE", "rollout-runner:bench"
        ),
        "ROLLOUT_PEERING": "",
        "ROLLOUT_STORAGE_BUCKET": storage.bucket,
        "ROLLOUT_STORAGE_PREFIX": storage.prefix,
        "ROLLOUT_STORAGE_ENDPOINT": storage.endpoint or "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true" if storage.path_style else "false",
        "ROLLOUT_STORAGE_REGION": storage.region or "",
        "AWS_ACCESS_KEY_ID": credentials[0],
        "AWS_SECRET_ACCESS_KEY": credentials[1],
        "ROLLOUT_METRICS_PORT": str(metrics_port),
        "ROLLOUT_HEALTH_PORT": str(free_port()),
        "ROLLOUT_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
        **settings,
    }


@contextlib.asynccontextmanager
async def run_operator(env: dict[str, str], log_path: Path) -> AsyncIterator[OperatorProcess]:
    """The `rollout-operator` console script of this venv as a process (after
    ROLLOUT_BENCH_OPERATOR_WRAPPER's command, if set), its output in `log_path`; stopped
    (SIGTERM, then SIGKILL after 30 s) at the end."""
    script = Path(sys.executable).parent / "rollout-operator"
    wrapper = shlex.split(os.environ.get("ROLLOUT_BENCH_OPERATOR_WRAPPER", ""))
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *wrapper, str(script), env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
    running = OperatorProcess(process, int(env["ROLLOUT_METRICS_PORT"]), log_path)
    try:
        await ready(running, int(env["ROLLOUT_HEALTH_PORT"]))
        if wrapper:
            running.pid = deepest_child(process.pid)
        yield running
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


# --- 1. trials run to completion (the script plays the kubelet) ---------------------------------


async def driven(
    kube: Kube, dataset: dict[str, str], trials: int, op: OperatorProcess, run_sec: float
) -> None:
    tasks = 100
    attempts = max(1, trials // tasks)
    total = tasks * attempts
    mark = kube.mark()
    started = time.monotonic()
    cpu_operator, cpu_server = cpu_seconds(op.pid), server_cpu_seconds(kube) or 0.0
    await kube.create(
        ROLLOUT_JOBS,
        rollout_job("driven", [dataset], attempts=attempts, concurrency=min(total, 100)),
    )
    finished: set[str] = set()
    running: dict[str, float] = {}  # Pods the script runs, and since when
    while True:
        for pod in await kube.list(PODS, kube.namespace, labels="rollout.dev/job=driven"):
            name = pod["metadata"]["name"]
            if name in finished or pod["metadata"].get("deletionTimestamp"):
                continue
            if name not in running:
                await kube.run_pod(name)
                running[name] = time.monotonic()
            if time.monotonic() - running[name] >= run_sec:
                await kube.finish_pod(name, messages={"runner": MESSAGE})
                finished.add(name)
        current = await kube.find(ROLLOUT_JOBS, "driven")
        if ((current or {}).get("status") or {}).get("phase") == "Completed":
            break
        await asyncio.sleep(0.05)  # polling, as a kubelet does
    elapsed = time.monotonic() - started
    cpu_operator = cpu_seconds(op.pid) - cpu_operator
    cpu_server = (server_cpu_seconds(kube) or 0.0) - cpu_server
    await asyncio.sleep(1)
    writes = [c for c in kube.calls(since=mark) if c.is_write]
    per_kind = Counter((c.method, c.resource.split("/")[-1], c.subresource or "") for c in writes)
    trial_writes = sum(n for (m, r, s), n in per_kind.items() if r in ("rollouttrials", "pods"))
    job_status = per_kind[("PATCH", "rolloutjobs", "status")]
    print(f"1. {total} trials run to completion (nConcurrentTrials {min(total, 100)}),"
          f" each Pod running {run_sec:g} s")  # fmt: skip
    print(f"   job completed in {elapsed:.1f} s ({total / elapsed:.0f} trials/s); CPU used:"
          f" operator {cpu_operator:.1f} s, API server {cpu_server:.1f} s")  # fmt: skip
    print(f"   API writes per trial: {trial_writes / total:.2f}")
    for (method, resource, sub), count in sorted(per_kind.items()):
        print(f"     {method:6} {resource}{'/' + sub if sub else '':8} {count:6}"
              f"  ({count / total:.2f} per trial)")  # fmt: skip
    print(f"   job status patches: {job_status} for {total} trials")
    print("   (a trial whose runner runs past the operator's running_status_after_sec, 10 s"
          " by default, has its status patched twice: Running, then its outcome)")  # fmt: skip


# --- 2. creation to Pod, and memory -------------------------------------------------------------


async def creation_and_memory(
    kube: Any,
    dataset: dict[str, str],
    trials: int,
    op: OperatorProcess,
    run_id: str,
    workdir: Path,
) -> tuple[Rate, tuple[dict[str, Any], dict[str, Any]] | None]:
    """Returns the rate and a (trial, Pod) pair the operator made, as templates."""
    tasks = 100
    attempts = max(1, trials // tasks)
    total = tasks * attempts
    pods = await asyncio.to_thread(pod_counter, kube, "rollout.dev/job=wide", workdir)
    writes_before = await asyncio.to_thread(scrape_writes, op.metrics_port)
    started = time.monotonic()
    cpu_operator, cpu_server = cpu_seconds(op.pid), server_cpu_seconds(kube)
    cpu_self = time.process_time()
    manifest = rollout_job(
        "wide",
        [dataset],
        attempts=attempts,
        concurrency=total,
        node_selector=unschedulable_selector(run_id),
    )
    await kube.create(ROLLOUT_JOBS, manifest)
    first_pod_at: float | None = None
    last, last_at = 0, started
    try:
        while (await asyncio.to_thread(pods.update)) < total:
            if pods.count and first_pod_at is None:
                first_pod_at = time.monotonic()
            if pods.count != last:
                last, last_at = pods.count, time.monotonic()
            elif time.monotonic() - last_at > STUCK_SEC:
                raise SystemExit(f"stuck at {pods.count} of {total} Pods created;"
                                 " the operator's log:\n" + op.tail())  # fmt: skip
            await asyncio.sleep(0.2)  # polling the count, not synchronising
    finally:
        pods.close()
    elapsed = time.monotonic() - started
    cpu_operator = cpu_seconds(op.pid) - cpu_operator
    server_now = server_cpu_seconds(kube)
    cpu_self = time.process_time() - cpu_self
    rate_from_first = total / (time.monotonic() - (first_pod_at or started))
    await asyncio.sleep(2)  # let the index and the status settle before reading memory
    resident, peak = rss_mib(op.pid)
    writes = writes_between(writes_before, await asyncio.to_thread(scrape_writes, op.metrics_port))
    print(f"2. {total} trials, all at once (nConcurrentTrials {total})")
    print(f"   job created -> {total} trials with their Pods: {elapsed:.1f} s")
    print(f"   trials driven from creation to Pod created: {total / elapsed:.0f}/s"
          f" ({rate_from_first:.0f}/s after the first Pod)")  # fmt: skip
    server = ""
    if server_now is not None and cpu_server is not None:
        server = f", API server {server_now - cpu_server:.1f} s"
    if not isinstance(kube, EmulatedKube):  # else the API server's figure is this script's
        server += f", this script {cpu_self:.1f} s"
    print(f"   CPU used meanwhile: operator {cpu_operator:.1f} s{server}")
    print("   the operator's writes: " + ", ".join(
        f"{verb} {resource} {count / total:.2f}/trial" for (resource, verb), count
        in writes.items()))  # fmt: skip
    print(f"   operator resident memory with {total} trials and Pods: {resident:.0f} MiB"
          f" (peak {peak:.0f} MiB)")  # fmt: skip
    pair = None
    if pods.first is not None:
        pod = await kube.find(PODS, pods.first)
        owner = next(
            (r["name"] for r in ((pod or {}).get("metadata") or {}).get("ownerReferences") or []
             if r.get("kind") == "RolloutTrial"),
            None,
        )  # fmt: skip
        trial = await kube.find(ROLLOUT_TRIALS, owner) if owner else None
        if pod and trial:
            pair = (template(trial), template(pod))
    return Rate(total, elapsed), pair


# --- 3. the API's own ceiling -------------------------------------------------------------------


async def ceiling(
    kube: Any,
    pair: tuple[dict[str, Any], dict[str, Any]],
    pairs: int,
    operator_rate: Rate,
    workdir: Path,
) -> None:
    """A plain client creates `pairs` trial + Pod pairs like the operator's in a namespace of
    their own (which no operator watches), as fast as the API takes them: the trials one after
    the other as the operator creates one job's (DESIGN's order), then all at once."""
    namespace = await kube.new_namespace("ceiling")
    env = dict(os.environ)
    if not isinstance(kube, ClusterKube):
        env["KUBECONFIG"] = str(
            kube.write_kubeconfig(
                workdir / "ceiling-kubeconfig", namespace=namespace, identity=Identity.OPERATOR
            )
        )
    print(f"3. the API's own ceiling: a plain client (the operator's API client, {TRIAL_WRITERS}"
          " pairs at a time, no operator) creating RolloutTrial + Pod pairs like the"
          " operator's")  # fmt: skip
    rates = {}
    for ordered, how in ((True, "in order, as the operator"), (False, "trials at once too")):
        order = {
            "namespace": namespace,
            "pairs": pairs,
            "concurrency": TRIAL_WRITERS,
            "ordered": ordered,
            "trial": pair[0],
            "pod": pair[1],
            "first": 0 if ordered else pairs,
        }
        order_path = workdir / "ceiling.json"
        order_path.write_text(json.dumps(order))
        cpu_server = server_cpu_seconds(kube)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(REPO / "benchmarks" / "api_ceiling.py"),
            str(order_path),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await process.communicate()
        if process.returncode != 0:
            print(f"   the ceiling could not be measured:\n{err.decode()[-2000:]}")
            return
        result = json.loads(out.decode().strip().splitlines()[-1])
        server_now = server_cpu_seconds(kube)
        rate = rates[ordered] = Rate(int(result["pairs"]), float(result["seconds"]))
        server = ""
        if server_now is not None and cpu_server is not None:
            server = f", API server {server_now - cpu_server:.1f} s"
        print(f"   {how}: {rate.count} pairs in {rate.seconds:.1f} s: {rate.per_second:.0f}/s;"
              f" CPU used: client {result['cpu_seconds']:.1f} s{server}")  # fmt: skip
    print(f"   the operator's {operator_rate.per_second:.0f} trials/s is bounded by"
          f" {bound_by(operator_rate, rates[True])}")  # fmt: skip
    if not isinstance(kube, ClusterKube):
        print(f"   (the operator, the API server and this script share this machine's"
              f" {os.cpu_count()} CPUs: the CPU figures say what each took)")  # fmt: skip
    if isinstance(kube, ClusterKube):
        await kube.delete(NAMESPACES, namespace)  # its objects go with it, before 4.


# --- 4. trials and an Indexed Job on the nodes --------------------------------------------------


async def wait_until(check: Any, *, within: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(every)  # polling the cluster, not synchronising


async def run_indexed_job(kube: ClusterKube, manifest: dict[str, Any], within: float) -> Rate:
    """Create an Indexed Job and wait until it is Complete; the rate of its Pods."""
    name = manifest["metadata"]["name"]
    started = time.monotonic()
    await kube.create(BATCH_JOBS, manifest)

    async def finished() -> str | None:
        return job_finished(await kube.find(BATCH_JOBS, name) or {})

    outcome = await wait_until(finished, within=within, what=f"Job {name}")
    elapsed = time.monotonic() - started
    if outcome != "Complete":
        raise SystemExit(f"Job {name} failed: see `kubectl -n {kube.namespace} describe job`")
    await kube.delete(BATCH_JOBS, name, body={"propagationPolicy": "Background"})
    return Rate(int(manifest["spec"]["completions"]), elapsed)


async def job_ratio(
    kube: ClusterKube,
    op: OperatorProcess,
    store: ObjectStore,
    bench: BenchStorage,
    args: argparse.Namespace,
    workdir: Path,
) -> None:
    image = os.environ.get("ROLLOUT_BENCH_IMAGE", "debian:bookworm-slim")
    runner_image = os.environ["ROLLOUT_BENCH_RUNNER_IMAGE"]
    count, concurrency = args.job_ratio, min(args.job_concurrency, args.job_ratio)
    timeout = 600.0 + 10.0 * count
    secret = None
    if bench.access_key_id and bench.secret_access_key:
        secret = STORAGE_SECRET
        await kube.create(
            "v1/secrets",
            {
                "metadata": {"name": secret},
                "stringData": {
                    "AWS_ACCESS_KEY_ID": bench.access_key_id,
                    "AWS_SECRET_ACCESS_KEY": bench.secret_access_key,
                },
            },
        )
    dataset = await asyncio.to_thread(publish_task, store, workdir / "ratio-set", image)
    storage = bench.job_storage(store.location.prefix, secret)
    resources = {"cpus": args.job_cpus, "memory": args.job_memory, "storage": args.job_storage}

    # Images on the nodes first (never a forced pull): neither measurement pays for them.
    warm = [
        job_pod_container("environment", image, {}, 0),
        job_pod_container("runner", runner_image, {}, 0),
    ]
    await run_indexed_job(
        kube,
        indexed_job("warm-up", completions=concurrency, parallelism=concurrency, containers=warm),
        timeout,
    )

    # Each runner's times, from its termination message in its Pod's status (read before the
    # operator deletes the Pod): its overhead, measured on the node.
    runners: dict[str, dict[str, datetime]] = {}

    def saw(pod: Mapping[str, Any]) -> None:
        times = runner_times(pod, RUNNER_CONTAINER)
        if times is not None:
            runners[str(pod["metadata"]["name"])] = times

    pods = WatchCounter(kube, "rollout.dev/job=ratio", on_pod=saw)
    writes_before = await asyncio.to_thread(scrape_writes, op.metrics_port)
    started = time.monotonic()
    await kube.create(
        ROLLOUT_JOBS,
        rollout_job(
            "ratio",
            [dataset],
            attempts=count,
            concurrency=concurrency,
            storage=storage,
            runner_image=runner_image,
            resources=resources,
        ),
    )

    async def completed() -> dict[str, Any] | None:
        job = await kube.find(ROLLOUT_JOBS, "ratio") or {}
        phase = (job.get("status") or {}).get("phase")
        if phase == "Failed":
            raise SystemExit(f"the RolloutJob failed: {job.get('status')}\n{op.tail()}")
        return job if phase == "Completed" else None

    job = await wait_until(completed, within=timeout, what="RolloutJob ratio")
    trials_rate = Rate(count, time.monotonic() - started)
    await asyncio.sleep(2)  # the last status patches
    pods.close()
    writes = writes_between(writes_before, await asyncio.to_thread(scrape_writes, op.metrics_port))
    trials = await kube.list(ROLLOUT_TRIALS, labels="rollout.dev/job=ratio")

    # The Job's Pods: the trial Pod's containers (images, requests, limits), sleeping.
    pod = render_trial_pod(
        trials[0],
        config=OperatorConfig(runner_image=runner_image),
        pod_name="like-a-trial",
        created_at=datetime.now(UTC),
    )
    containers = containers_like(pod, args.job_sleep)
    baseline = await run_indexed_job(
        kube,
        indexed_job(
            "like-trials",
            completions=count,
            parallelism=concurrency,
            containers=containers,
            termination_grace_sec=pod["spec"].get("terminationGracePeriodSeconds"),
        ),
        timeout,
    )

    counts = (job.get("status") or {}).get("counts") or {}
    print(f"4. end to end on the nodes: {count} trials, {concurrency} at a time")
    print(f"   trials (oracle on {image}, runner {runner_image}): {trials_rate}"
          f" ({counts.get('completed', '?')} completed)")  # fmt: skip
    print(f"   Indexed Job, the same containers' images, requests and limits, each sleeping"
          f" {args.job_sleep:g} s: {baseline}")  # fmt: skip
    print(f"   ratio trials/Job Pods: {ratio(trials_rate, baseline):.2f}x")
    trial_writes = sum(
        n for (resource, _verb), n in writes.items() if resource in ("rollouttrials", "pods")
    )
    each = ", ".join(f"{verb} {resource} {n / count:.2f}" for (resource, verb), n in writes.items())
    print(f"   the operator's writes per trial: {trial_writes / count:.2f} ({each})")
    print(f"   job status patches: {int(writes.get(('rolloutjobs', 'patch_status'), 0))}")
    for key in ("environmentSetupSec", "agentExecutionSec", "verifierSec", "totalSec"):
        values = [
            float(v)
            for t in trials
            if (v := ((t.get("status") or {}).get("durations") or {}).get(key)) is not None
        ]
        if values:
            print(f"   trial {key}: median {statistics.median(values):.2f} s")
    if runners:
        print(f"   the runner, from {len(runners)} Pods' termination messages (ms, p50 / p90):")
        for label, p50, p90 in runner_overhead(list(runners.values())):
            print(f"     {label:<44} {p50:8.1f} {p90:8.1f}")
    else:
        print("   the runner: no Pod's termination message had its times (an older runner?)")


# --- the run ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def api(which: str, workdir: Path, install_crds: bool = False) -> AsyncIterator[Any]:
    """The Kubernetes API to measure against; says which."""
    if which == "emulator":
        print("API: the emulator (tests/kubeharness/emulator), in this process")
        async with kube_api(crds=CRDS_DIR) as emulated:
            yield emulated
        return
    if which == "cluster":
        if not os.environ.get("KUBECONFIG"):
            raise SystemExit("--api cluster needs KUBECONFIG")
        kube = ClusterKube(f"rollout-bench-{uuid.uuid4().hex[:8]}")
        version = (await kube.request("GET", "/version")).get("gitVersion", "?")
        print(f"API: the cluster of KUBECONFIG's current context ({kube.host}, Kubernetes"
              f" {version}), namespace {kube.namespace}")  # fmt: skip
        await kube.check_crds(install_crds)
        await kube.create_namespace(kube.namespace)
        try:
            yield kube
        finally:
            await kube.clean_up()
        return
    binaries = find_binaries()
    if binaries is None:
        raise SystemExit(f"--api real: {unavailable_reason()}")
    plane = ControlPlane(binaries, workdir / "control-plane")
    await asyncio.to_thread(plane.start)
    try:
        version = (
            await asyncio.to_thread(
                subprocess.run,
                [str(binaries.kube_apiserver), "--version"],
                capture_output=True,
                text=True,
                check=False,
            )
        ).stdout.strip()
        print(f"API: a real kube-apiserver ({version}, {binaries.kube_apiserver}) with etcd")
        async with RealKube.for_test(plane) as real:
            yield real
    finally:
        plane.stop()


def storage_for(
    bench: BenchStorage | None, moto: S3Server | None, run_id: str
) -> tuple[StorageLocation, tuple[str, str]]:
    """Where the operator keeps the benchmark's objects, and its credentials."""
    if bench is None:
        assert moto is not None
        location = StorageLocation(bucket="bench", endpoint=moto.endpoint_url, path_style=True)
        return location, (ACCESS_KEY, SECRET_KEY)
    location = StorageLocation(
        bucket=bench.bucket,
        prefix=f"rollout-bench/{run_id}",
        endpoint=bench.endpoint,
        region=bench.region,
        path_style=bench.path_style,
    )
    return location, (bench.access_key_id or "", bench.secret_access_key or "")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000, help="trials of the wide job")
    parser.add_argument("--driven", type=int, default=500, help="trials run to completion")
    parser.add_argument("--run-sec", type=float, default=2.0, help="(driven) seconds each Pod runs")
    parser.add_argument(
        "--api",
        choices=["emulator", "real", "cluster"],
        default="emulator",
        help="the emulator, a real kube-apiserver and etcd (KUBEBUILDER_ASSETS), or the "
        "cluster KUBECONFIG names",
    )
    parser.add_argument(
        "--no-ceiling", action="store_true", help="leave out the API's plain-client ceiling"
    )
    parser.add_argument(
        "--install-crds", action="store_true", help="(cluster) install or update the CRDs"
    )
    parser.add_argument(
        "--job-ratio",
        type=int,
        default=0,
        metavar="M",
        help="(cluster) M trials end to end on the nodes against an Indexed Job of M Pods",
    )
    parser.add_argument("--job-concurrency", type=int, default=20, help="(job ratio) at once")
    parser.add_argument(
        "--job-sleep", type=float, default=0.6, help="(job ratio) seconds each Job container sleeps"
    )
    parser.add_argument("--job-cpus", default="100m", help="(job ratio) the task's CPU")
    parser.add_argument("--job-memory", default="128Mi", help="(job ratio) the task's memory")
    parser.add_argument("--job-storage", default="256Mi", help="(job ratio) the task's storage")
    args = parser.parse_args()
    bench = BenchStorage.from_env(os.environ)
    if args.job_ratio and args.api != "cluster":
        parser.error("--job-ratio needs --api cluster (KUBECONFIG): it runs Pods on nodes")
    if args.job_ratio and (bench is None or not os.environ.get("ROLLOUT_BENCH_RUNNER_IMAGE")):
        parser.error(
            "--job-ratio needs storage the cluster's Pods reach (ROLLOUT_BENCH_S3_ENDPOINT, and "
            "ROLLOUT_BENCH_S3_CLUSTER_ENDPOINT if the Pods reach it at another address) and the "
            "runner image (ROLLOUT_BENCH_RUNNER_IMAGE)"
        )
    run_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as scratch:
        workdir = Path(scratch)
        moto = None
        if bench is None:
            moto = S3Server(log_dir=workdir)
            moto.start()
        try:
            location, credentials = storage_for(bench, moto, run_id)
            store = ObjectStore(
                location,
                StorageCredentials(
                    access_key_id=SecretStr(credentials[0]),
                    secret_access_key=SecretStr(credentials[1]),
                )
                if credentials[0]
                else None,
            )
            await asyncio.to_thread(store.ensure_bucket)
            dataset = await asyncio.to_thread(publish_dataset, store, workdir / "bench-set", 100)
            async with api(args.api, workdir, args.install_crds) as kube:
                await measure(
                    kube, args, workdir, location, credentials, store, bench, dataset, run_id
                )
        finally:
            if moto is not None:
                moto.stop()
    print(f"machine: {load_average()}")


async def measure(
    kube: Any,
    args: argparse.Namespace,
    workdir: Path,
    location: StorageLocation,
    credentials: tuple[str, str],
    store: ObjectStore,
    bench: BenchStorage | None,
    dataset: dict[str, str],
    run_id: str,
) -> None:
    print(f"machine: {load_average()}")  # after the first line, which says what is measured
    if isinstance(kube, ClusterKube):
        kubeconfig = os.environ["KUBECONFIG"]
        # Its trial Pods are never scheduled (the creation measurement): they must not fail.
        settings = {"ROLLOUT_UNSCHEDULABLE_GRACE_SEC": "86400"}
    else:
        path = kube.write_kubeconfig(workdir / "kubeconfig", identity=Identity.OPERATOR)
        kubeconfig, settings = str(path), {}
    env = operator_env(kubeconfig, [kube.namespace], location, credentials, free_port(), **settings)
    async with run_operator(env, workdir / "operator.log") as op:
        if isinstance(kube, EmulatedKube):
            kube.emulator._requests = RecentFirstLog(kube.emulator._requests)
        # The small job first: the wide one leaves its many objects in the API server.
        if args.driven and not isinstance(kube, ClusterKube):
            await driven(kube, dataset, args.driven, op, args.run_sec)
        elif args.driven:
            print("1. (nothing runs the trial Pods on a cluster here: see 4., --job-ratio)")
        if args.trials:
            rate, pair = await creation_and_memory(kube, dataset, args.trials, op, run_id, workdir)
            if not args.no_ceiling and pair is not None:
                await ceiling(kube, pair, rate.count, rate, workdir)
            if isinstance(kube, ClusterKube):
                await kube.delete(ROLLOUT_JOBS, "wide")  # its trials and Pods go with it
        if args.job_ratio and isinstance(kube, ClusterKube) and bench is not None:
            await job_ratio(kube, op, store, bench, args, workdir)


async def interruptible() -> None:
    """`main`, cancelled on SIGTERM as on Ctrl-C: the control plane, the operator and the
    cluster's namespace are cleaned up either way."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        await main()
    except asyncio.CancelledError:
        raise SystemExit("stopped (SIGTERM); cleaned up") from None


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(interruptible())
