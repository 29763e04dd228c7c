"""The operator's throughput, API economy and memory, against a Kubernetes API on loopback.

The real `rollout-operator` process runs against the test suite's Kubernetes API and a real S3
endpoint (moto, tests/s3server.py); this script plays the kubelet. `--api` picks the API: the
kmock-based emulator (tests/kubeharness/emulator, the default) or a real control plane (etcd
and kube-apiserver, tests/kubeharness/real; found as the suite finds them, `KUBEBUILDER_ASSETS`),
where the operator runs as the chart's ServiceAccount. The first line printed says which was
measured.

1. A job of `--driven` trials (default 500), every Pod run and finished by the script: API writes
   per trial (from the server's request log) and job status patches, and the time to complete.
2. A job of `--trials` trials (default 10,000) with nConcurrentTrials as large: how many trials
   per second the operator takes from creation to their Pod created, and its resident memory
   while that many trials and Pods exist.

Figures, not asserts. The emulator runs in this process and is itself the slower party at
scale, so its rates are a floor for a real cluster; the "API server" CPU figures are this
process's (emulator) or etcd's and kube-apiserver's (real). kmock 0.8 matches each request
against its reactions by scanning the whole request log (a request costs O(requests so far)),
which makes thousands of trials impossible; here the log is searched newest first within a
window of recent requests (`RecentFirstLog`), which is enough for requests dispatched as they
arrive:

    python benchmarks/operator_throughput.py            # ~ a few minutes
    python benchmarks/operator_throughput.py --trials 2000 --driven 200
    python benchmarks/operator_throughput.py --api real --trials 2000 --driven 500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from pydantic import SecretStr  # noqa: E402

from kubeharness.emulator.emulated import EmulatedKube, kube_api  # noqa: E402
from kubeharness.identity import Identity  # noqa: E402
from kubeharness.kube import Kube  # noqa: E402
from kubeharness.real.kube import RealKube  # noqa: E402
from kubeharness.real.plane import ControlPlane, find_binaries, unavailable_reason  # noqa: E402
from kubeharness.resources import CRDS_DIR, PODS, ROLLOUT_JOBS  # noqa: E402
from rollout.api.dataset import load_local_dataset  # noqa: E402
from rollout.api.layout import dataset_manifest_key  # noqa: E402
from rollout.api.manifest import canonical_json, manifest_digest  # noqa: E402
from rollout.datasets.bundle import build_manifest  # noqa: E402
from rollout.storage import ObjectStore, StorageCredentials, StorageLocation  # noqa: E402
from s3server import S3Server  # noqa: E402

ACCESS_KEY, SECRET_KEY = "AKIABENCHMARK0000001", "benchmark-secret"
MESSAGE = (
    '{"reward":1.0,"error":null,"durations":{"total_sec":1.0},"timestamps":null,'
    '"result_uri":null,"upload_error":null}'
)


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def server_cpu_seconds(kube: Kube) -> float:
    """CPU time of the API server so far: this process (emulator) or etcd + kube-apiserver."""
    if isinstance(kube, RealKube):
        return sum(cpu_seconds(process.pid) for _name, process in kube.plane.processes)
    return time.process_time()


def publish_dataset(store: ObjectStore, root: Path, tasks: int) -> dict[str, str]:
    """A dataset of `tasks` small tasks; only its manifest goes to storage (no Pod really runs)."""
    for index in range(tasks):
        task = root / f"task-{index:04d}"
        (task / "tests").mkdir(parents=True)
        (task / "environment").mkdir()
        (task / "solve.sh").write_text("#!/bin/sh\ntrue\n")  # the oracle's (seed 004's place)
        (task / "instruction.md").write_text(f"Task {index}.\n")
        (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
        (task / "environment" / "Dockerfile").write_text("FROM busybox\n")
        (task / "task.toml").write_text('[environment]\ndocker_image = "busybox:1.36"\n')
    manifest = build_manifest(load_local_dataset(root))
    digest = manifest_digest(manifest)
    store.put_bytes(dataset_manifest_key("", digest), canonical_json(manifest), "application/json")
    return {"name": manifest.name, "digest": digest}


def job(name: str, dataset: dict[str, str], attempts: int, concurrency: int) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [dataset],
            "nAttempts": attempts,
            "nConcurrentTrials": concurrency,
        },
    }


def operator_env(
    kube: Kube,
    namespaces: list[str],
    storage: StorageLocation,
    workdir: Path,
    credentials: tuple[str, str] = (ACCESS_KEY, SECRET_KEY),
    **settings: str,
) -> dict[str, str]:
    """The `rollout-operator` process's environment: this shell's, the test API as the chart's
    ServiceAccount, `namespaces`, the storage and its credentials, free ports, and more
    ROLLOUT_* `settings`."""
    return {
        **os.environ,
        "KUBECONFIG": str(
            kube.write_kubeconfig(workdir / "kubeconfig", identity=Identity.OPERATOR)
        ),
        "ROLLOUT_NAMESPACES": ",".join(namespaces),
        "ROLLOUT_RUNNER_IMAGE": "rollout-runner:bench",
        "ROLLOUT_PEERING": "",
        "ROLLOUT_STORAGE_BUCKET": storage.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": storage.endpoint or "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": credentials[0],
        "AWS_SECRET_ACCESS_KEY": credentials[1],
        "ROLLOUT_METRICS_PORT": str(free_port()),
        "ROLLOUT_HEALTH_PORT": str(free_port()),
        "ROLLOUT_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
        **settings,
    }


@contextlib.asynccontextmanager
async def run_operator(
    env: dict[str, str], log_path: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """The `rollout-operator` console script of this venv as a process, its output in
    `log_path`; stopped (SIGTERM, then SIGKILL after 30 s) at the end."""
    script = Path(sys.executable).parent / "rollout-operator"
    with log_path.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            str(script), env=env, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


@contextlib.asynccontextmanager
async def operator_process(
    kube: Kube, storage: StorageLocation, workdir: Path
) -> AsyncIterator[int]:
    env = operator_env(kube, [kube.namespace], storage, workdir)
    async with run_operator(env, workdir / "operator.log") as process:
        yield process.pid


class PostCounter:
    """Counts POSTs of a resource in the request log, reading only what is new each time."""

    def __init__(self, kube: Kube, resource: str) -> None:
        self.kube, self.resource = kube, resource
        self.seen = kube.mark()
        self.count = 0

    def update(self) -> int:
        calls = self.kube.calls(since=self.seen)
        self.seen += len(calls)  # not mark(): requests go on arriving meanwhile
        self.count += sum(1 for c in calls if c.method == "POST" and c.resource == self.resource)
        return self.count


async def creation_and_memory(
    kube: Kube, dataset: dict[str, str], trials: int, pid: int, workdir: Path
) -> None:
    tasks = 100
    attempts = max(1, trials // tasks)
    total = tasks * attempts
    pods = PostCounter(kube, PODS)
    started = time.monotonic()
    cpu_operator, cpu_server = cpu_seconds(pid), server_cpu_seconds(kube)
    await kube.create(ROLLOUT_JOBS, job("wide", dataset, attempts, total))
    first_pod_at: float | None = None
    last, last_at = 0, started
    while pods.update() < total:
        if pods.count and first_pod_at is None:
            first_pod_at = time.monotonic()
        if pods.count != last:
            last, last_at = pods.count, time.monotonic()
        elif time.monotonic() - last_at > 60:
            listed = len(await kube.list(PODS, kube.namespace, labels="rollout.dev/job=wide"))
            log = (workdir / "operator.log").read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"stuck at {pods.count} of {total} Pods created ({listed} listed);"
                             " the operator's log:\n" + "\n".join(log))  # fmt: skip
        await asyncio.sleep(0.2)  # polling the request log, not synchronising
    elapsed = time.monotonic() - started
    cpu_operator = cpu_seconds(pid) - cpu_operator
    cpu_server = server_cpu_seconds(kube) - cpu_server
    rate_from_first = total / (time.monotonic() - (first_pod_at or started))
    await asyncio.sleep(2)  # let the index and the status settle before reading memory
    resident, peak = rss_mib(pid)
    print(f"2. {total} trials, all at once (nConcurrentTrials {total})")
    print(f"   job created -> {total} trials with their Pods: {elapsed:.1f} s")
    print(f"   trials driven from creation to Pod created: {total / elapsed:.0f}/s"
          f" ({rate_from_first:.0f}/s after the first Pod)")  # fmt: skip
    print(f"   CPU used meanwhile: operator {cpu_operator:.1f} s, API server {cpu_server:.1f} s")
    print(f"   operator resident memory with {total} trials and Pods: {resident:.0f} MiB"
          f" (peak {peak:.0f} MiB)")  # fmt: skip


async def driven(kube: Kube, dataset: dict[str, str], trials: int, pid: int) -> None:
    tasks = 100
    attempts = max(1, trials // tasks)
    total = tasks * attempts
    mark = kube.mark()
    started = time.monotonic()
    cpu_operator, cpu_server = cpu_seconds(pid), server_cpu_seconds(kube)
    await kube.create(ROLLOUT_JOBS, job("driven", dataset, attempts, min(total, 100)))
    finished: set[str] = set()
    while True:
        for pod in await kube.list(PODS, kube.namespace, labels="rollout.dev/job=driven"):
            name = pod["metadata"]["name"]
            if name in finished or pod["metadata"].get("deletionTimestamp"):
                continue
            await kube.run_pod(name)
            await kube.finish_pod(name, messages={"runner": MESSAGE})
            finished.add(name)
        current = await kube.find(ROLLOUT_JOBS, "driven")
        if ((current or {}).get("status") or {}).get("phase") == "Completed":
            break
        await asyncio.sleep(0.05)  # polling, as a kubelet does
    elapsed = time.monotonic() - started
    cpu_operator = cpu_seconds(pid) - cpu_operator
    cpu_server = server_cpu_seconds(kube) - cpu_server
    await asyncio.sleep(1)
    writes = [c for c in kube.calls(since=mark) if c.is_write]
    per_kind = Counter((c.method, c.resource.split("/")[-1], c.subresource or "") for c in writes)
    trial_writes = sum(n for (m, r, s), n in per_kind.items() if r in ("rollouttrials", "pods"))
    job_status = per_kind[("PATCH", "rolloutjobs", "status")]
    print(f"1. {total} trials run to completion (nConcurrentTrials {min(total, 100)})")
    print(f"   job completed in {elapsed:.1f} s ({total / elapsed:.0f} trials/s); CPU used:"
          f" operator {cpu_operator:.1f} s, API server {cpu_server:.1f} s")  # fmt: skip
    print(f"   API writes per trial: {trial_writes / total:.2f}")
    for (method, resource, sub), count in sorted(per_kind.items()):
        print(f"     {method:6} {resource}{'/' + sub if sub else '':8} {count:6}"
              f"  ({count / total:.2f} per trial)")  # fmt: skip
    print(f"   job status patches: {job_status} for {total} trials")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10_000, help="trials of the wide job")
    parser.add_argument("--driven", type=int, default=500, help="trials run to completion")
    parser.add_argument(
        "--api",
        choices=["emulator", "real"],
        default="emulator",
        help="the emulator, or a real kube-apiserver and etcd (KUBEBUILDER_ASSETS)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as scratch:
        workdir = Path(scratch)
        server = S3Server(log_dir=workdir)
        server.start()
        try:
            storage = StorageLocation(bucket="bench", endpoint=server.endpoint_url, path_style=True)
            credentials = StorageCredentials(
                access_key_id=SecretStr(ACCESS_KEY), secret_access_key=SecretStr(SECRET_KEY)
            )
            store = ObjectStore(storage, credentials)
            store.ensure_bucket()
            dataset = await asyncio.to_thread(publish_dataset, store, workdir / "bench-set", 100)
            async with (
                api(args.api, workdir) as kube,
                operator_process(kube, storage, workdir) as pid,
            ):
                if isinstance(kube, EmulatedKube):
                    kube.emulator._requests = RecentFirstLog(kube.emulator._requests)
                # The small job first: the wide one leaves its many objects in the API server.
                if args.driven:
                    await driven(kube, dataset, args.driven, pid)
                if args.trials:
                    await creation_and_memory(kube, dataset, args.trials, pid, workdir)
        finally:
            server.stop()


@contextlib.asynccontextmanager
async def api(which: str, workdir: Path) -> AsyncIterator[Kube]:
    """The Kubernetes API to measure against; says which."""
    if which == "emulator":
        print("API: the emulator (tests/kubeharness/emulator), in this process")
        async with kube_api(crds=CRDS_DIR) as emulated:
            yield emulated
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


if __name__ == "__main__":
    asyncio.run(main())
