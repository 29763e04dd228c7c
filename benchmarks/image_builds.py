"""How long an in-cluster image build holds a job back: job creation to its first agent start,
with the environment image built (uncached) and with the image already there (cached).

The real `rollout-operator` process runs against the test suite's Kubernetes API on loopback
(the emulator by default, `--api real` for etcd and kube-apiserver, found as the suite finds
them), a real S3 endpoint (moto, tests/s3server.py) and a real OCI registry on loopback (Debian's
docker-registry, tests/registry_server.py) holding a busybox base image made on this machine
(tests/buildah_kit.py). The operator is configured for Buildah builds into that registry. This
script plays the kubelet: each build Pod is run by the test kubelet
(tests/kubeharness/build_kubelet.py: the Pod's own script, Buildah on this machine), and each
job's first trial Pod by the trial test kubelet (`kubeharness.kubelet.run_trial_pod`: the
environment container as a fake container, tests/fakecontainer.py, the runner as a process).

One dataset of `--trials` tasks (default 20) whose environment/ directories are byte for byte
the same, hence one image; each job asks for the oracle on all of them at once
(nConcurrentTrials = trials), so every trial waits for the one image. Only each job's first
trial Pod is run (the others stay Pending: they would only measure the test kubelet). Three jobs,
in order:

1. uncached: nothing in the registry; one build Pod builds the image for every trial;
2. cached, a second job over the same environment in the same namespace: its RolloutImage is
   the first job's, already Ready (Built), so neither the registry nor a builder is asked;
3. cached, the same in another namespace: a new RolloutImage, the registry has the image
   (manifest HEAD: CacheHit), nothing is built.

The figure is the first trial's `agent_execution_started_at` (the oracle's solve.sh starting;
its agent_setup_started_at, the solution being copied in, is a few milliseconds earlier), read
from the runner's termination message (the runner runs on this machine: its clock is this
script's), minus the job's creation. The creationTimestamp has whole seconds, so the creation is
placed between the later of (this script's create request, the creationTimestamp) and the
earlier of (the API's answer, the creationTimestamp's next second); the figure is from the
middle of that interval, +/- half of it. A real kube-apiserver answers the first create of a
custom resource slowly (about 2 s here); the output then says how long the request took.

The figure counts the operator's planning, the registry look-up, the build (Buildah on a small
busybox image: no base image download), the operator's look at the build Pod every
ROLLOUT_BUILD_POLL_SEC (its default, 2 s), the trial Pod's creation and its start up to the
agent. It does not count what a real node adds: scheduling, and pulling the builder's image and
the built image (the test kubelets pull nothing). Where no fake container can run (it needs
root and namespaces), the figure is job creation to the first trial Pod created instead (seen
by a 20 ms poll), and the output says so.

Figures, never asserted:

    python benchmarks/image_builds.py                 # 20 trials; ~ 15 s here
    python benchmarks/image_builds.py --trials 100
    python benchmarks/image_builds.py --api real      # needs KUBEBUILDER_ASSETS (or the default)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from operator_throughput import api, free_port, operator_env, run_operator  # noqa: E402
from pydantic import SecretStr  # noqa: E402

from buildah_kit import base_image_unavailable_reason, push_base_image  # noqa: E402
from fakecontainer import unavailable_reason as fake_container_unavailable  # noqa: E402
from kubeharness.build_kubelet import run_build_pod  # noqa: E402
from kubeharness.identity import Identity  # noqa: E402
from kubeharness.kube import Kube  # noqa: E402
from kubeharness.kubelet import run_trial_pod  # noqa: E402
from kubeharness.polling import wait_for  # noqa: E402
from kubeharness.resources import PODS, ROLLOUT_JOBS, SECRETS, Body  # noqa: E402
from registry_server import RegistryServer, registry_unavailable_reason  # noqa: E402
from rollout.api.dataset import load_local_dataset  # noqa: E402
from rollout.api.layout import (  # noqa: E402
    dataset_manifest_key,
    environment_archive_key,
    task_archive_key,
)
from rollout.api.manifest import canonical_json, manifest_digest  # noqa: E402
from rollout.api.taskdir import environment_hash, load_task, task_content_hash  # noqa: E402
from rollout.api.wire.termination import TerminationMessage  # noqa: E402
from rollout.datasets.bundle import build_manifest, environment_archive, task_archive  # noqa: E402
from rollout.storage import ObjectStore, StorageCredentials, StorageLocation  # noqa: E402
from s3server import S3Server  # noqa: E402

ACCESS_KEY, SECRET_KEY = "AKIABENCHMARK0000002", "benchmark-secret"
CREDENTIALS_SECRET = "storage-credentials"
ROLLOUT_IMAGES = "rollout.dev/v1alpha1/rolloutimages"
BUILD_PODS = "rollout.dev/component=image-build"
BASE_IMAGE = "base/busybox:1"
WAIT_SEC = 300.0
"""The most any one wait may take (a build, a Pod): a stuck benchmark says so and stops."""


@dataclass(frozen=True)
class Measured:
    """One job's figures."""

    seconds: float
    """From the job's creation to the first agent start (or the first trial Pod): from the
    middle of the interval its creation is known to be in."""
    uncertainty: float
    """Half that interval: the creation happened after this script asked for it and after its
    creationTimestamp (whole seconds), and before the API answered and the next whole second."""
    create_round_trip: float
    image_reason: str
    builds: int
    """Build Pods that appeared while the job waited (and were run)."""
    build_seconds: float | None
    """The RolloutImage's durationSeconds when this job built it."""


def publish_dataset(store: ObjectStore, root: Path, tasks: int, registry: str) -> dict[str, str]:
    """`tasks` tasks with one environment, published whole (task archives, the build context,
    the manifest) as `rollout publish` does; the RolloutJob's dataset entry."""
    dockerfile = f"FROM {registry}/{BASE_IMAGE}\nRUN echo shared > /built\nWORKDIR /app\n"
    for index in range(tasks):
        task = root / f"task-{index:03d}"
        for folder in ("environment", "solution", "tests"):
            (task / folder).mkdir(parents=True)
        (task / "instruction.md").write_text(f"Task {index}: write /app/answer.\n")
        (task / "environment" / "Dockerfile").write_text(dockerfile)
        (task / "solution" / "solve.sh").write_text("#!/bin/sh\necho done > /app/answer\n")
        (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
        (task / "task.toml").write_text(
            'version = "1.0"\n[agent]\ntimeout_sec = 120\n[environment]\nbuild_timeout_sec = 600\n'
        )
    for loaded in load_local_dataset(root).tasks:
        path = loaded.path
        store.put_bytes(task_archive_key("", task_content_hash(path)), task_archive(path))
        store.put_bytes(
            environment_archive_key("", environment_hash(path)),
            environment_archive(load_task(path)),
        )
    manifest = build_manifest(load_local_dataset(root))
    digest = manifest_digest(manifest)
    store.put_bytes(dataset_manifest_key("", digest), canonical_json(manifest), "application/json")
    return {"name": manifest.name, "digest": digest}


def job(name: str, dataset: dict[str, str], trials: int) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [dataset],
            "nAttempts": 1,
            "nConcurrentTrials": trials,
        },
    }


@contextlib.asynccontextmanager
async def operator_process(
    kube: Kube,
    namespaces: list[str],
    storage: StorageLocation,
    registry: RegistryServer,
    workdir: Path,
) -> AsyncIterator[Callable[[], None]]:
    """The operator, configured for Buildah builds into `registry`; yields a check that it is
    still running (for the waits)."""
    kubeconfig = kube.write_kubeconfig(workdir / "kubeconfig", identity=Identity.OPERATOR)
    env = operator_env(
        str(kubeconfig),
        namespaces,
        storage,
        (ACCESS_KEY, SECRET_KEY),
        free_port(),
        ROLLOUT_STORAGE_CREDENTIALS_SECRET=CREDENTIALS_SECRET,
        ROLLOUT_IMAGE_REGISTRY=registry.host,
        ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP="true",
        ROLLOUT_BUILDER="buildah",
    )
    for name in ("ROLLOUT_BUILD_POLL_SEC", "ROLLOUT_IMAGE_PULL_REGISTRY", "ROLLOUT_BUILDER_IMAGE"):
        env.pop(name, None)  # the operator's defaults, whatever this shell has
    log_path = workdir / "operator.log"
    async with run_operator(env, log_path) as process:

        def alive() -> None:
            code = process.process.returncode
            if code is not None:
                raise SystemExit(f"the operator exited ({code}); its log:\n" + process.tail())

        yield alive


def parse_timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def measure(
    kube: Kube,
    namespace: str,
    name: str,
    dataset: dict[str, str],
    trials: int,
    workdir: Path,
    alive: Callable[[], None],
    *,
    agent_start: bool,
) -> Measured:
    """Create the job, play the kubelet for its build Pods until its first trial Pod exists,
    then run that Pod (with `agent_start`) and time its agent's start."""
    built: list[str] = []

    async def first_trial_pod() -> Body | None:
        pods = await kube.list(PODS, namespace, labels=f"rollout.dev/job={name}")
        if pods:
            return min(
                pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
            )
        for pod in await kube.list(PODS, namespace, labels=BUILD_PODS):
            pod_name = pod["metadata"]["name"]
            if pod_name not in built and not pod["metadata"].get("deletionTimestamp"):
                built.append(pod_name)
                await run_build_pod(kube, pod_name, namespace, workdir / pod_name)
        return None

    asked = time.time()
    created = await kube.create(ROLLOUT_JOBS, job(name, dataset, trials), namespace)
    answered = time.time()
    stamped = parse_timestamp(created["metadata"]["creationTimestamp"]).timestamp()
    earliest, latest = max(asked, stamped), min(answered, stamped + 1)
    pod = await wait_for(
        first_trial_pod,
        timeout=WAIT_SEC,
        what=f"job {name}'s first trial Pod",
        checks=[alive],
    )
    if agent_start:
        outcome = await run_trial_pod(kube, pod["metadata"]["name"], namespace, workdir / name)
        message = TerminationMessage.model_validate_json(outcome.message or "{}")
        started = message.timestamps.agent_execution_started_at if message.timestamps else None
        if message.reward != 1.0 or started is None:
            raise SystemExit(
                f"job {name}'s first trial did not pass (reward {message.reward}, error "
                f"{message.error}):\n{outcome.stderr[-3000:]}"
            )
        moment = started.timestamp()
    else:
        moment = time.time()  # seen: the Pod was created at most one poll (20 ms) before
    images = await kube.list(ROLLOUT_IMAGES, namespace)
    image = images[0] if len(images) == 1 else {}
    status = image.get("status") or {}
    return Measured(
        seconds=moment - (earliest + latest) / 2,
        uncertainty=(latest - earliest) / 2,
        create_round_trip=answered - asked,
        image_reason=str(status.get("reason") or f"{len(images)} RolloutImages"),
        builds=len(built),
        build_seconds=status.get("durationSeconds") if built else None,
    )


async def run(trials: int, which: str) -> None:
    reason = registry_unavailable_reason() or base_image_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"cannot run the benchmark here: {reason}")
    no_fake_container = fake_container_unavailable()
    with tempfile.TemporaryDirectory(prefix="rollout-bench-builds-") as scratch:
        workdir = Path(scratch)
        with S3Server(log_dir=workdir) as server, RegistryServer(workdir / "registry") as registry:
            await asyncio.to_thread(push_base_image, registry.host, BASE_IMAGE)
            storage = StorageLocation(bucket="bench", endpoint=server.endpoint_url, path_style=True)
            credentials = StorageCredentials(
                access_key_id=SecretStr(ACCESS_KEY), secret_access_key=SecretStr(SECRET_KEY)
            )
            store = ObjectStore(storage, credentials)
            store.ensure_bucket()
            dataset = await asyncio.to_thread(
                publish_dataset, store, workdir / "shared-env", trials, registry.host
            )
            async with api(which, workdir) as kube:
                namespaces = [kube.namespace, await kube.new_namespace("elsewhere")]
                for namespace in namespaces:
                    await kube.create(
                        SECRETS,
                        {
                            "metadata": {"name": CREDENTIALS_SECRET},
                            "stringData": {
                                "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                            },
                        },
                        namespace,
                    )
                async with operator_process(kube, namespaces, storage, registry, workdir) as alive:
                    await report(
                        kube, namespaces, dataset, trials, workdir, alive, no_fake_container
                    )


async def report(
    kube: Kube,
    namespaces: list[str],
    dataset: dict[str, str],
    trials: int,
    workdir: Path,
    alive: Callable[[], None],
    no_fake_container: str | None,
) -> None:
    here, elsewhere = namespaces
    target = "its first trial's agent start (agent_execution_started_at, the runner's)"
    if no_fake_container is not None:
        target = (
            f"its first trial Pod created (no fake container here: {no_fake_container}; "
            "so not the agent's start)"
        )
    print("builder: Buildah, each build Pod run by the test kubelet on this machine; registry: "
          "docker-registry on loopback; the operator's build poll: its default, 2 s")  # fmt: skip
    print(f"measured: job created -> {target}; {trials} trials sharing one environment, "
          f"nConcurrentTrials {trials}")  # fmt: skip
    cases = [
        ("uncached", here, "1. uncached, the image built"),
        ("cached-here", here, "2. cached, a second job in the same namespace (RolloutImage Ready)"),
        ("cached-elsewhere", elsewhere, "3. cached, a job in another namespace (registry HEAD)"),
    ]
    measured: dict[str, Measured] = {}
    for name, namespace, label in cases:
        figures = await measure(
            kube,
            namespace,
            name,
            dataset,
            trials,
            workdir,
            alive,
            agent_start=no_fake_container is None,
        )
        measured[name] = figures
        build = (
            f"; {figures.builds} build Pod, the build {figures.build_seconds:.1f} s"
            if figures.builds
            else "; no build Pod"
        )
        slow = (
            f" (the create request took {figures.create_round_trip:.2f} s)"
            if figures.create_round_trip > 0.25
            else ""
        )
        print(
            f"{label}: {figures.seconds:.2f} s +/- {figures.uncertainty:.2f}{slow}; "
            f"image {figures.image_reason}{build}"
        )
    uncached = measured["uncached"].seconds
    print(
        "cached/uncached: "
        f"{measured['cached-here'].seconds / uncached:.3f} (same namespace), "
        f"{measured['cached-elsewhere'].seconds / uncached:.3f} (another namespace)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials sharing one environment")
    parser.add_argument(
        "--api",
        choices=["emulator", "real"],
        default="emulator",
        help="the emulator, or a real kube-apiserver and etcd (KUBEBUILDER_ASSETS)",
    )
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    asyncio.run(run(args.trials, args.api))


if __name__ == "__main__":
    main()
