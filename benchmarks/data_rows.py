"""Data rows at scale: rows per second and API writes per row, for a job of `--rows` rows
(default 10,000) answered by an instant agent (the oracle: it answers each row's ground truth,
nothing runs in the environment), in shards of `--shard-size` rows.

The real `rollout-operator` process runs against the test suite's Kubernetes API (the emulator,
or `--api real`: etcd and kube-apiserver from KUBEBUILDER_ASSETS) and a real S3 endpoint (moto,
tests/s3server.py); this script plays the kubelet, running each shard's Pod for real
(`kubeharness.kubelet.run_trial_pod`: the runner and the environment's shim as processes of this
machine, a few at a time). Every row's trial directory, results.jsonl and the summary are
written to that S3 endpoint as on a cluster.

Figures, not asserts: the job's wall time and rows per second (from the job's creation to its
Completed phase), the API writes per row from the server's request log (trials, Pods, statuses
and the job's status patches), and the objects written per row to storage. On this machine moto
and the API server share its cores with the runners, so the rates are a floor:

    python benchmarks/data_rows.py                       # 10,000 rows; several minutes
    python benchmarks/data_rows.py --rows 2000 --shard-size 200 --pods 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from operator_throughput import (  # noqa: E402
    RecentFirstLog,
    api,
    free_port,
    operator_env,
    run_operator,
)
from pydantic import SecretStr  # noqa: E402

from kubeharness.emulator.emulated import EmulatedKube  # noqa: E402
from kubeharness.identity import Identity  # noqa: E402
from kubeharness.kube import Kube  # noqa: E402
from kubeharness.kubelet import run_trial_pod  # noqa: E402
from kubeharness.resources import PODS, ROLLOUT_JOBS, SECRETS  # noqa: E402
from rollout.api.dataset import load_dataset_path  # noqa: E402
from rollout.api.layout import dataset_manifest_key, job_prefix, task_archive_key  # noqa: E402
from rollout.api.manifest import canonical_json, manifest_digest  # noqa: E402
from rollout.datasets.bundle import build_manifest, rows_archive  # noqa: E402
from rollout.storage import ObjectStore, StorageCredentials, StorageLocation  # noqa: E402
from s3server import S3Server  # noqa: E402

ACCESS_KEY, SECRET_KEY = "AKIABENCHMARK0000003", "benchmark-secret"
CREDENTIALS_SECRET = "storage-credentials"
STALL_SEC = 300.0
"""How long the job may go without a shard finishing before the benchmark gives up."""


def publish_rows(store: ObjectStore, root: Path, rows: int) -> dict[str, str]:
    """A Shape A dataset of `rows` rows scored by exact_match, its archive and manifest stored."""
    (root / "data").mkdir(parents=True)
    (root / "dataset.toml").write_text('name = "bench-rows"\n[verifier]\nmetric = "exact_match"\n')
    with (root / "data" / "test.jsonl").open("w") as lines:
        for index in range(rows):
            row = {"id": f"r{index:06d}", "question": f"Say {index}.", "answer": str(index)}
            lines.write(json.dumps(row) + "\n")
    dataset = load_dataset_path(root)
    manifest = build_manifest(dataset)
    assert dataset.rows is not None
    assert manifest.rows is not None
    key = task_archive_key("", manifest.rows.content_hash)
    store.put_bytes(key, rows_archive(dataset.rows), "application/gzip")
    digest = manifest_digest(manifest)
    store.put_bytes(dataset_manifest_key("", digest), canonical_json(manifest), "application/json")
    return {"name": manifest.name, "digest": digest}


def job(dataset: dict[str, str], shard_size: int, concurrency: int) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "rows"},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [dataset],
            "nConcurrentTrials": concurrency,
            "shardSize": shard_size,
        },
    }


@contextlib.asynccontextmanager
async def operator_process(
    kube: Kube, storage: StorageLocation, workdir: Path
) -> AsyncIterator[int]:
    kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig", identity=Identity.OPERATOR)
    env = operator_env(
        str(kubeconfig),
        [kube.namespace],
        storage,
        (ACCESS_KEY, SECRET_KEY),
        free_port(),
        ROLLOUT_STORAGE_CREDENTIALS_SECRET=CREDENTIALS_SECRET,
    )
    async with run_operator(env, workdir / "operator.log") as process:
        yield process.pid


async def play_kubelet(kube: Kube, workdir: Path, pods: int) -> int:
    """Run every shard Pod of the job for real, `pods` at a time, until the job Completes;
    the number of Pods run."""
    running: dict[str, asyncio.Task[Any]] = {}
    done: set[str] = set()
    last_progress = time.monotonic()
    while True:
        for name, task in list(running.items()):
            if task.done():
                task.result()  # a harness failure stops the benchmark
                del running[name]
                done.add(name)
                last_progress = time.monotonic()
        listed = await kube.list(PODS, kube.namespace, labels="rollout.dev/job=rows")
        for pod in listed:
            name = pod["metadata"]["name"]
            if name in done or name in running or pod["metadata"].get("deletionTimestamp"):
                continue
            if len(running) < pods:
                where = workdir / "pods" / name
                running[name] = asyncio.create_task(
                    run_trial_pod(kube, name, kube.namespace, where)
                )
        current = await kube.find(ROLLOUT_JOBS, "rows")
        if ((current or {}).get("status") or {}).get("phase") == "Completed" and not running:
            return len(done)
        if time.monotonic() - last_progress > STALL_SEC:
            tail = (workdir / "operator.log").read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(
                "no shard finished for a while; the operator's log:\n" + "\n".join(tail)
            )
        await asyncio.sleep(0.1)  # polling, as a kubelet does


async def run(rows: int, shard_size: int, pods: int, which: str) -> None:
    with tempfile.TemporaryDirectory(prefix="rollout-bench-rows-") as scratch:
        workdir = Path(scratch)
        with S3Server(log_dir=workdir) as server:
            storage = StorageLocation(bucket="bench", endpoint=server.endpoint_url, path_style=True)
            credentials = StorageCredentials(
                access_key_id=SecretStr(ACCESS_KEY), secret_access_key=SecretStr(SECRET_KEY)
            )
            store = ObjectStore(storage, credentials)
            store.ensure_bucket()
            dataset = await asyncio.to_thread(publish_rows, store, workdir / "rows", rows)
            async with api(which, workdir) as kube:
                if isinstance(kube, EmulatedKube):
                    kube.emulator._requests = RecentFirstLog(kube.emulator._requests)
                await kube.create(
                    SECRETS,
                    {
                        "metadata": {"name": CREDENTIALS_SECRET},
                        "stringData": {
                            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                        },
                    },
                    kube.namespace,
                )
                async with operator_process(kube, storage, workdir):
                    mark = kube.mark()
                    started = time.monotonic()
                    await kube.create(ROLLOUT_JOBS, job(dataset, shard_size, pods))
                    ran = await play_kubelet(kube, workdir, pods)
                    elapsed = time.monotonic() - started
                    await asyncio.sleep(1)
                    writes = [c for c in kube.calls(since=mark) if c.is_write]
                    final = await kube.find(ROLLOUT_JOBS, "rows")
            objects = await asyncio.to_thread(
                lambda: sum(1 for _ in store.list_keys(job_prefix("", "rows")))
            )
    counts = ((final or {}).get("status") or {}).get("counts") or {}
    per_kind = Counter((c.method, c.resource.split("/")[-1], c.subresource or "") for c in writes)
    shards = -(-rows // shard_size)
    print(f"{rows} rows, oracle agent, exact_match, shards of {shard_size} ({shards} shards, "
          f"{ran} Pods run, {pods} at a time)")  # fmt: skip
    print(f"job completed in {elapsed:.1f} s: {rows / elapsed:.0f} rows/s; status counts {counts}")
    print(f"API writes per row: {len(writes) / rows:.3f} ({len(writes)} writes)")
    for (method, resource, sub), count in sorted(per_kind.items()):
        print(f"  {method:6} {resource}{'/' + sub if sub else '':8} {count:6}"
              f"  ({count / rows:.3f} per row)")  # fmt: skip
    print(f"objects in storage under jobs/rows/: {objects} ({objects / rows:.2f} per row)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows of the job")
    parser.add_argument("--shard-size", type=int, default=100, help="rows per shard")
    parser.add_argument("--pods", type=int, default=4, help="shard Pods run at once")
    parser.add_argument(
        "--api",
        choices=["emulator", "real"],
        default="emulator",
        help="the emulator, or a real kube-apiserver and etcd (KUBEBUILDER_ASSETS)",
    )
    args = parser.parse_args()
    asyncio.run(run(args.rows, args.shard_size, args.pods, args.api))


if __name__ == "__main__":
    main()
