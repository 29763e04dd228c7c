"""Helpers for the operator's integration tests and its benchmark: small tasks published to S3,
RolloutJob manifests, the operator's configuration and memo, and the runner's termination
message as a kubelet would report it.

Importing this module registers the operator's kopf handlers in kopf's default registry, so
`kube.operator(registry=None, ...)` runs the real operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import kopf
import kubernetes.client
from prometheus_client import CollectorRegistry
from s3_kit import S3Settings

import rollout.controller.handlers  # noqa: F401 - registers the operator's handlers
from kubeharness.calls import ApiCall
from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import GROUP, PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS, SECRETS, VERSION
from loopback import free_port, healthz_answers
from rollout.api.dataset import load_local_dataset
from rollout.api.job import JobDataset
from rollout.api.layout import dataset_manifest_key
from rollout.api.manifest import canonical_json, manifest_digest
from rollout.api.trials import enumerate_trials, trial_resource_name
from rollout.api.wire.spec import SPEC_ENV_VAR
from rollout.cli.prepare import prepare_dataset
from rollout.cli.publish import publish_datasets
from rollout.controller.config import OperatorConfig
from rollout.controller.metrics import OperatorMetrics
from rollout.datasets.bundle import build_manifest
from rollout.storage import ObjectStore

RUNNER_IMAGE = "registry.example/rollout-runner:test"
TASK_IMAGE = "registry.example/task-env:1"
AGENTS = [
    {"name": "oracle"},
    {"name": "claude", "execute": 'claude -p "$(cat $ROLLOUT_TASK_INSTRUCTION)"'},
]
TASKS = ["task-a", "task-b", "task-c"]
DATASET = "hello-set"


def make_task(
    root: Path,
    name: str,
    *,
    image: str | None = TASK_IMAGE,
    toml: str = "",
    solution: bool = True,
    dockerfile: str = "FROM busybox\n",
) -> Path:
    """A minimal valid task directory under `root` (with the oracle's solution/solve.sh)."""
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    if solution:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text("#!/bin/sh\necho solved\n")
    (task / "instruction.md").write_text(f"Do {name}.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    image_line = f'docker_image = "{image}"\n' if image else ""
    (task / "task.toml").write_text(
        f'version = "1.0"\n[agent]\ntimeout_sec = 120\n[environment]\n{image_line}{toml}'
    )
    return task


def make_dataset(root: Path, tasks: Sequence[str], **task_options: Any) -> Path:
    root.mkdir(parents=True)
    for name in tasks:
        make_task(root, name, **task_options)
    return root


def publish(store: ObjectStore, dataset_dir: Path) -> dict[str, str]:
    """Publish a dataset's manifest (the operator reads nothing else); its spec.datasets entry."""
    manifest = build_manifest(load_local_dataset(dataset_dir))
    digest = manifest_digest(manifest)
    store.put_bytes(
        dataset_manifest_key(store.location.prefix, digest),
        canonical_json(manifest),
        "application/json",
    )
    return {"name": manifest.name, "digest": digest}


def publish_whole(store: ObjectStore, dataset_dir: Path, cache: Path) -> dict[str, str]:
    """Publish a dataset as `rollout publish` does (its manifest and every task's archive, for
    a runner to fetch); its spec.datasets entry."""
    prepared = prepare_dataset(JobDataset(path=str(dataset_dir)), cache)
    publish_datasets(store, [prepared], build_contexts=False)
    return {"name": prepared.dataset.name, "digest": prepared.digest}


async def create_storage_secret(
    kube: Kube, storage: S3Settings, name: str, namespace: str | None = None
) -> str:
    """The Secret of storage credentials that Pods mount (trial and build Pods), in the test's
    namespace (or `namespace`); its name."""
    credentials = storage.credentials
    await kube.create(
        SECRETS,
        {
            "metadata": {"name": name},
            "stringData": {
                "AWS_ACCESS_KEY_ID": credentials.access_key_id.get_secret_value(),
                "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key.get_secret_value(),
            },
        },
        namespace,
    )
    return name


def operator_config(storage: S3Settings | None, **overrides: Any) -> OperatorConfig:
    """The operator's configuration for tests: standalone, fast status updates and graces."""
    values: dict[str, Any] = {
        "namespaces": ["default"],  # any: kopf's namespaces come from Kube.operator()
        "runner_image": RUNNER_IMAGE,
        "storage": storage.location if storage else None,
        "storage_credentials": storage.credentials if storage else None,
        "peering_name": None,
        "status_interval_sec": 0.2,
        "unschedulable_grace_sec": 0.3,
        "image_pull_grace_sec": 0.3,
        "worker_limit": 20,
    }
    values.update(overrides)
    return OperatorConfig(**values)


def operator_memo(
    kube: Kube, config: OperatorConfig, identity: Identity = Identity.OPERATOR
) -> kopf.Memo:
    """The memo the operator starts with: its config, an API client for the test's API (as the
    operator) and metrics in a registry of their own (several operators run in one process)."""
    configuration = kube.client_configuration(identity)
    configuration.connection_pool_maxsize = 16
    return kopf.Memo(
        config=config,
        api_client=kubernetes.client.ApiClient(configuration),
        metrics=OperatorMetrics(CollectorRegistry()),
    )


def job_manifest(
    name: str,
    datasets: Sequence[Mapping[str, str]],
    *,
    agents: Sequence[Mapping[str, Any]] = ({"name": "oracle"},),
    n_attempts: int = 1,
    n_concurrent: int = 4,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutJob",
        "metadata": {"name": name},  # created in the test's namespace
        "spec": {
            "agents": [dict(a) for a in agents],
            "datasets": [dict(d) for d in datasets],
            "nAttempts": n_attempts,
            "nConcurrentTrials": n_concurrent,
            **spec,
        },
    }


def runner_message(
    reward: float | None,
    *,
    error: tuple[str, str] | None = None,
    result_uri: str | None = None,
    total_sec: float = 12.5,
) -> str:
    """A runner's termination message (rollout.api.wire.termination's fields)."""
    return json.dumps(
        {
            "reward": reward,
            "error": {"type": error[0], "message": error[1]} if error else None,
            "durations": {
                "total_sec": total_sec,
                "environment_setup_sec": 2.0,
                "agent_setup_sec": 0.5,
                "agent_execution_sec": 8.0,
                "verifier_sec": None if error else 2.0,
            },
            "timestamps": {
                "started_at": "2025-01-15T10:30:00Z",
                "ended_at": "2025-01-15T10:30:12Z",
            },
            "result_uri": result_uri,
            "upload_error": None,
        },
        separators=(",", ":"),
    )


def pod_env(pod: Mapping[str, Any], name: str) -> str:
    """The value of a trial Pod's variable `name` (the runner's: the trial spec, the try...)."""
    return next(
        e["value"] for c in pod["spec"]["containers"] for e in c.get("env", []) if e["name"] == name
    )


def pod_trial_spec(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The trial spec a trial Pod's runner gets (camelCase, as the RolloutTrial has it)."""
    return dict(json.loads(pod_env(pod, SPEC_ENV_VAR)))


def outcome(pod: dict[str, Any]) -> str:
    """What each trial's runner reports: oracle passes; claude gets 0.5 on task-a, 0 on task-b,
    fails its first attempt at task-c and passes the second."""
    labels = pod["metadata"]["labels"]
    agent, task = labels["rollout.dev/agent"], labels["rollout.dev/task"]
    attempt = pod_trial_spec(pod)["attempt"]
    if agent == "oracle":
        return runner_message(1.0)
    if task == "task-a":
        return runner_message(0.5)
    if task == "task-b":
        return runner_message(0.0)
    if attempt == 1:
        return runner_message(None, error=("agent_execution_failed", "exit code 2"))
    return runner_message(1.0)


async def play_kubelet(
    kube: Kube,
    done: Callable[[], Awaitable[Any]],
    message_for: Callable[[dict[str, Any]], str] = outcome,
    *,
    wait_running: bool | Callable[[dict[str, Any]], bool] = False,
) -> set[str]:
    """Run and finish every trial Pod that appears, as the kubelet and the runner would, until
    `done()`; returns the names of the Pods it finished. With `wait_running` (True, or true of
    the Pod), a Pod finishes only once its trial says Running (so that the operator sees every
    phase); else at once."""
    started: set[str] = set()
    finished: set[str] = set()

    async def trial_running(pod: dict[str, Any]) -> bool:
        trial = await kube.find(ROLLOUT_TRIALS, pod["metadata"]["labels"]["rollout.dev/trial"])
        return trial is not None and trial.get("status", {}).get("phase") == "Running"

    async def step() -> Any:
        for pod in await kube.list(PODS, ..., labels="rollout.dev/trial"):
            name = pod["metadata"]["name"]
            if name in finished or pod["metadata"].get("deletionTimestamp"):
                continue
            if name not in started:
                await kube.run_pod(name)
                started.add(name)
            waits = wait_running(pod) if callable(wait_running) else wait_running
            if waits and not await trial_running(pod):
                continue
            await kube.finish_pod(name, messages={"runner": message_for(pod)})
            finished.add(name)
        return await done()

    await kube.wait_for(step, timeout=30, what="the job to finish")
    return finished


async def job_phase(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    job = await kube.find(ROLLOUT_JOBS, name)
    return job if job and job.get("status", {}).get("phase") == phase else None


def expected_names(job: str) -> list[str]:
    """The trials of a job of AGENTS x TASKS (dataset DATASET) x 2 attempts, in order."""
    keys = enumerate_trials([a["name"] for a in AGENTS], [(DATASET, TASKS)], 2)
    return [trial_resource_name(job, k.agent, k.dataset, k.task, k.attempt) for k in keys]


def most_unfinished(calls: list[ApiCall]) -> int:
    """The most trials that were created and not yet finished at any point of the request log."""
    unfinished = peak = 0
    for call in calls:
        if call.resource != ROLLOUT_TRIALS:
            continue
        if call.method == "POST":
            unfinished += 1
        elif call.method == "PATCH" and call.subresource == "status":
            phase = (call.body or {}).get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                unfinished -= 1
        peak = max(peak, unfinished)
    return peak


# --- the operator as a process, and a kubelet in the background (the fault tests) -------------


class ControllerProcess:
    """A controller's console script as a user runs it (configured by variables, a kubeconfig),
    started, SIGKILLed and started again; its output appended to `log_path`. A subclass names
    the script and gives its variables (`_env`), with the health and metrics ports it is given
    at each start."""

    script = ""
    """The console script (in this Python's bin directory)."""

    def __init__(self, kube: Kube, log_path: Path) -> None:
        self.kube = kube
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.health_port = 0
        self.metrics_port = 0

    def _env(self) -> dict[str, str]:
        raise NotImplementedError

    def _started(self, process: asyncio.subprocess.Process) -> None:
        """Right after the process is made (before it has imported anything)."""

    async def start(self, *, ready_timeout: float = 60) -> None:
        """Start it and return once its /healthz answers (kopf is up)."""
        assert self.process is None or self.process.returncode is not None
        self.health_port, self.metrics_port = free_port(), free_port()
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / self.script),
                env=self._env(),
                stdout=log,
                stderr=log,
                stdin=asyncio.subprocess.DEVNULL,
            )
        self._started(self.process)
        self.starts += 1
        await self.kube.wait_for(
            self._healthy, timeout=ready_timeout, what=f"the {self.script}'s /healthz"
        )

    async def _healthy(self) -> bool:
        if self.process is None or self.process.returncode is not None:
            raise AssertionError(f"{self.script} exited:\n{self.log_tail()}")
        return await healthz_answers(self.health_port)

    async def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is cleaned up."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            assert await self.process.wait() == -signal.SIGKILL

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class OperatorProcess(ControllerProcess):
    """`rollout-operator` as the chart's ServiceAccount runs it; its output in
    `<workdir>/operator.log`. `environ` adds or overrides variables (e.g.
    ROLLOUT_STORAGE_CREDENTIALS_SECRET); `memory_limit` caps its address space in bytes, for a
    test that may drive it out of memory."""

    script = "rollout-operator"

    def __init__(
        self,
        kube: Kube,
        workdir: Path,
        storage: S3Settings,
        *,
        memory_limit: int | None = None,
        **environ: str,
    ) -> None:
        super().__init__(kube, workdir / "operator.log")
        self.workdir = workdir
        self.storage = storage
        self.memory_limit = memory_limit
        self.environ = environ

    def _env(self) -> dict[str, str]:
        credentials = self.storage.credentials
        kubeconfig = self.kube.write_kubeconfig(
            self.workdir / "operator-kubeconfig", identity=Identity.OPERATOR
        )
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "ROLLOUT_NAMESPACES": self.kube.namespace,
            "ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE,
            "ROLLOUT_PEERING": "",
            "ROLLOUT_STORAGE_BUCKET": self.storage.location.bucket,
            "ROLLOUT_STORAGE_ENDPOINT": self.storage.location.endpoint or "",
            "ROLLOUT_STORAGE_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": credentials.access_key_id.get_secret_value(),
            "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key.get_secret_value(),
            "ROLLOUT_METRICS_PORT": str(self.metrics_port),
            "ROLLOUT_HEALTH_PORT": str(self.health_port),
            "ROLLOUT_STATUS_INTERVAL_SEC": "0.2",
            "ROLLOUT_LOG_LEVEL": "info",
            **self.environ,
        }

    def _started(self, process: asyncio.subprocess.Process) -> None:
        if self.memory_limit is not None:  # long before it has imported kopf
            limit = (self.memory_limit, self.memory_limit)
            resource.prlimit(process.pid, resource.RLIMIT_AS, limit)

    async def __aenter__(self) -> OperatorProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.kill()


class BackgroundKubelet:
    """Runs and finishes every trial Pod of the test's namespace as it appears, in a task of the
    test's loop, with the runner's termination message from `message_for`; `finished` names the
    Pods it finished. Use as `async with BackgroundKubelet(kube) as kubelet:`."""

    def __init__(
        self,
        kube: Kube,
        message_for: Callable[[dict[str, Any]], str] = lambda pod: runner_message(1.0),
        *,
        interval: float = 0.05,
    ) -> None:
        self.kube = kube
        self.message_for = message_for
        self.interval = interval
        self.finished: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def step(self) -> None:
        for pod in await self.kube.list(PODS, self.kube.namespace, labels="rollout.dev/trial"):
            name = pod["metadata"]["name"]
            if name in self.finished or pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                await self.kube.run_pod(name)
                await self.kube.finish_pod(name, messages={"runner": self.message_for(pod)})
            except Exception:
                if await self.kube.find(PODS, name) is None:
                    continue  # deleted meanwhile (its trial was, or its job)
                raise
            self.finished.add(name)

    async def _run(self) -> None:
        while True:
            await self.step()
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> BackgroundKubelet:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        if self._task.done():
            self._task.result()  # its error, if it died
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
