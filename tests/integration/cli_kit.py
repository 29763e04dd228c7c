"""Shared by the CLI's integration tests: tasks and job files on disk, the `rollout` command run
in a thread against the loopback Kubernetes API and S3, and the operator's part played by the test
(trial and job result files written to storage, RolloutJob status set).

The CLI is synchronous (the kubernetes client) and the API server serves in the test's event loop,
so the CLI always runs in a thread (`await cli.run(...)`) while the test awaits.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS
from rollout.api.aggregate import aggregate
from rollout.api.layout import (
    COMMAND_STDERR,
    COMMAND_STDOUT,
    SETUP_STDERR,
    SETUP_STDOUT,
    job_config_key,
    job_prefix,
    job_result_key,
    trial_prefix,
)
from rollout.api.metrics import MetricType
from rollout.api.results import TrialResult, TrialTimestamps
from rollout.cli.main import main
from rollout.storage import ObjectStore

SECRET_VALUE = "sk-test-9b1f0c7d-never-in-a-resource"
NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


# --- tasks, datasets, job files ---------------------------------------------------------------


def write_task(root: Path, instruction: str) -> Path:
    """A small task directory (offline: its image is only named, never pulled here)."""
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "instruction.md").write_text(instruction)
    (root / "task.toml").write_text(
        '[agent]\ntimeout_sec = 60.0\n[environment]\ndocker_image = "debian:bookworm-slim"\n'
    )
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\necho done\n")
    for script in (root / "tests" / "test.sh", root / "solution" / "solve.sh"):
        script.chmod(0o755)
    return root


def git(*args: str, cwd: Path) -> str:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    result = subprocess.run(
        ["git", *identity, *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


@dataclass
class Workspace:
    """A directory with two datasets: `alpha` (local: hello, count) and `beta` (a registry.json
    dataset in a git repository: hello, which is alpha's hello byte for byte, and sort)."""

    root: Path

    def __post_init__(self) -> None:
        write_task(self.root / "alpha" / "hello", "Say hello.\n")
        write_task(self.root / "alpha" / "count", "Count to three.\n")
        repo = self.root / "beta-repo"
        repo.mkdir()
        git("init", "--quiet", "--initial-branch=main", cwd=repo)
        write_task(repo / "tasks" / "hello", "Say hello.\n")
        write_task(repo / "tasks" / "sort", "Sort the list.\n")
        git("add", "-A", cwd=repo)
        git("commit", "--quiet", "-m", "tasks", cwd=repo)
        self.commit = git("rev-parse", "HEAD", cwd=repo)
        tasks = [
            {"name": name, "git_url": repo.as_uri(), "git_commit_id": self.commit,
             "path": f"tasks/{name}"}
            for name in ("hello", "sort")
        ]  # fmt: skip
        registry = [{"name": "beta", "version": "1.0", "description": "", "tasks": tasks}]
        (self.root / "registry.json").write_text(json.dumps(registry))

    def job_file(self, name: str = "two-by-two", **overrides: Any) -> Path:
        """A job of the agents `coder` (env from ${MY_API_KEY}, and a literal) and `oracle` on
        both datasets, with the mean and max metrics."""
        lines = [
            f"name: {name}",
            "n_attempts: 1",
            "metrics:",
            "  - type: mean",
            "  - type: max",
            "agents:",
            "  - name: coder",
            "    install: echo install",
            "    execute: echo execute",
            "    env:",
            "      MY_API_KEY: ${MY_API_KEY}",
            "      MODEL: small",
            "  - name: oracle",
            "datasets:",
            "  - path: ./alpha",
            "  - registry:",
            "      path: ./registry.json",
            "    name: beta",
            "    version: '1.0'",
        ]
        text = "\n".join(lines) + "\n"
        for key, value in overrides.items():
            text += f"{key}: {json.dumps(value)}\n"
        path = self.root / f"{name}.yaml"
        path.write_text(text)
        return path


TRIALS = [
    (agent, dataset, task)
    for agent in ("coder", "oracle")
    for dataset, tasks in (("alpha", ("count", "hello")), ("beta", ("hello", "sort")))
    for task in tasks
]
"""Every trial of Workspace.job_file's job, in the seed's order (local tasks in name order)."""


# --- running the CLI --------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    """`rollout ...` against the loopback API server and S3, with a clean environment."""

    kubeconfig: Path
    storage: S3Settings
    home: Path
    environ: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        config = self.home / "rollout-config.yaml"
        config.write_text("")
        self.environ = {
            "HOME": str(self.home),
            "ROLLOUT_CONFIG": str(config),
            "ROLLOUT_CACHE_DIR": str(self.home / "cache"),
            "AWS_ACCESS_KEY_ID": self.storage.credentials.access_key_id.get_secret_value(),
            "AWS_SECRET_ACCESS_KEY": self.storage.credentials.secret_access_key.get_secret_value(),
            "MY_API_KEY": SECRET_VALUE,
            **self.environ,
        }

    def cluster_args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig)]

    def storage_args(self) -> list[str]:
        assert self.storage.location.endpoint is not None
        return [
            "--storage-bucket", self.storage.location.bucket,
            "--storage-endpoint", self.storage.location.endpoint,
            "--storage-path-style",
        ]  # fmt: skip

    async def run(
        self,
        capsys: pytest.CaptureFixture[str],
        *argv: str,
        environ: Mapping[str, str | None] | None = None,
    ) -> Outcome:
        """Run `rollout argv...` in a thread; its exit code and what it printed. `environ`
        adds to the environment (a None value removes the variable)."""
        merged = {**self.environ, **(environ or {})}
        env = {key: value for key, value in merged.items() if value is not None}
        code = await asyncio.to_thread(main, list(argv), env)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)


# --- the operator's part ------------------------------------------------------------------------


def trial_files(agent: str, dataset: str, task: str, reward: float | None) -> dict[str, bytes]:
    """What a runner uploads for one trial, relative to the trial's prefix."""
    error = None if reward is not None else {"type": "agent_execution_failed", "message": "exit 2"}
    result = TrialResult(
        task_name=task,
        dataset_name=dataset,
        agent_name=agent,
        attempt=1,
        reward=reward,
        error=error,  # type: ignore[arg-type]
        timestamps=TrialTimestamps(started_at=NOW, ended_at=NOW + timedelta(seconds=5)),
    )
    files = {
        "result.json": result.to_json().encode(),
        SETUP_STDOUT: f"installing {agent}\n".encode(),
        SETUP_STDERR: b"",
        COMMAND_STDOUT: f"{agent} working on {task}\n".encode(),
        COMMAND_STDERR: b"warning: slow\n",
        "logs/agent/trace.jsonl": b'{"step": 1}\n',
    }
    if reward is None:
        files["error.txt"] = b"agent_execution_failed: exit 2\n"
    else:
        files["logs/verifier/reward.txt"] = f"{reward:g}\n".encode()
        files["logs/verifier/stdout.txt"] = f"checked {task}: reward {reward:g}\n".encode()
        files["logs/verifier/stderr.txt"] = b""
    return files


def rewards_of(trials: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], float | None]:
    """The rewards the test's operator hands out: oracle passes everything, coder passes hello,
    gets 0 on count and fails with an error on sort."""
    rewards: dict[tuple[str, str, str], float | None] = {}
    for agent, dataset, task in trials:
        if agent == "oracle" or task == "hello":
            rewards[(agent, dataset, task)] = 1.0
        elif task == "count":
            rewards[(agent, dataset, task)] = 0.0
        else:
            rewards[(agent, dataset, task)] = None
    return rewards


def write_results(
    store: ObjectStore,
    job_name: str,
    rewards: Mapping[tuple[str, str, str], float | None],
    metrics: Sequence[MetricType] = (MetricType.MEAN, MetricType.MAX),
    *,
    config: bool = True,
) -> dict[str, bytes]:
    """Every trial's files plus the job's result.json, as the operator and its runners leave
    them, and (with `config`) a config.json as the operator writes one for a job that the CLI
    did not submit (`rollout run` writes its own); returns {key: content}."""
    written: dict[str, bytes] = {}
    prefix = store.location.prefix
    trials = []
    for (agent, dataset, task), reward in rewards.items():
        base = trial_prefix(prefix, job_name, agent, dataset, task, 1)
        files = trial_files(agent, dataset, task, reward)
        for name, data in files.items():
            written[base + name] = data
        trials.append(TrialResult.from_json(files["result.json"]))
    result = aggregate(
        job_name, trials, metrics=metrics, started_at=NOW, ended_at=NOW + timedelta(minutes=2)
    )
    written[job_result_key(prefix, job_name)] = result.to_json().encode()
    if config:
        written[job_config_key(prefix, job_name)] = json.dumps({"name": job_name}).encode()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda item: store.put_bytes(*item), written.items()))
    return written


def job_status(
    phase: str,
    rewards: Mapping[tuple[str, str, str], float | None],
    *,
    finished: int | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """A RolloutJob status as the operator writes it."""
    done = list(rewards.values())[: len(rewards) if finished is None else finished]
    completed = [r for r in done if r is not None]
    status: dict[str, Any] = {
        "phase": phase,
        "counts": {
            "total": len(rewards),
            "pending": 0,
            "running": len(rewards) - len(done),
            "finished": len(done),
            "completed": len(completed),
            "failed": len(done) - len(completed),
        },
        "passRate": (sum(r == 1.0 for r in completed) / len(completed)) if completed else None,
        "meanReward": (sum(completed) / len(completed)) if completed else None,
        "metrics": [
            {"type": "mean", "value": (sum(completed) / len(completed)) if completed else None},
            {"type": "max", "value": max(completed) if completed else None},
        ],
    }
    if message is not None:
        status["conditions"] = [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DatasetNotFound",
                "message": message,
                "lastTransitionTime": "2025-01-15T10:30:00Z",
            }
        ]
    return status


async def wait_for_job(kube: Kube, name: str) -> dict[str, Any]:
    return await kube.wait_for(lambda: kube.find(ROLLOUT_JOBS, name), what=f"RolloutJob {name}")


def storage_tree(store: ObjectStore, key_prefix: str) -> dict[str, bytes]:
    """{path relative to the prefix: content} of everything in storage under it."""
    return {key[len(key_prefix) :]: store.get_bytes(key) for key in store.list_keys(key_prefix)}


def local_tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def job_tree(store: ObjectStore, job_name: str) -> dict[str, bytes]:
    return storage_tree(store, job_prefix(store.location.prefix, job_name))


def s3_client(settings: S3Settings) -> Any:
    """A plain boto3 client on the test bucket's endpoint, for what ObjectStore does not do
    (bucket versioning, listing object versions)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=settings.location.endpoint,
        region_name=settings.location.signing_region,
        aws_access_key_id=settings.credentials.access_key_id.get_secret_value(),
        aws_secret_access_key=settings.credentials.secret_access_key.get_secret_value(),
    )


def versions_by_key(settings: S3Settings, prefix: str = "") -> dict[str, int]:
    """How many versions each key under `prefix` has in the (versioned) bucket: a key written
    twice has two, whatever its content."""
    client = s3_client(settings)
    counts: dict[str, int] = {}
    for page in client.get_paginator("list_object_versions").paginate(
        Bucket=settings.location.bucket, Prefix=prefix
    ):
        for version in page.get("Versions", []):
            counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    return counts


async def wait_for_watch(kube: Kube, count: int = 1) -> None:
    """Until the CLI has listed the RolloutJob and opened `count` watches on it, so that what the
    test changes next arrives as watch events."""

    def watching() -> bool:
        calls = [c for c in kube.calls() if c.is_watch and c.resource == ROLLOUT_JOBS]
        return len(calls) >= count

    await kube.wait_for(watching, what=f"{count} watch(es) of RolloutJobs")


def rollout_job(
    name: str,
    *,
    job_name: str | None = None,
    storage: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A RolloutJob as `rollout run` applies it (status is set separately, through /status)."""
    spec: dict[str, Any] = {
        "jobName": job_name or name,
        "jobsDir": "jobs",
        "metrics": [{"type": "mean"}, {"type": "max"}],
        "agents": [{"name": "coder", "execute": "echo run"}, {"name": "oracle"}],
        "datasets": [
            {"name": "alpha", "digest": "a" * 64},
            {"name": "beta", "digest": "b" * 64},
        ],
    }
    if storage is not None:
        spec["storage"] = dict(storage)
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    body: dict[str, Any] = {"metadata": metadata, "spec": spec}
    if status is not None:
        body["status"] = dict(status)
    return body


async def create_job(kube: Kube, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create the RolloutJob (in the test's namespace unless it names one) and write its status
    as the operator would."""
    created = await kube.create(ROLLOUT_JOBS, {k: v for k, v in body.items() if k != "status"})
    if "status" in body:
        namespace = created["metadata"]["namespace"]
        created = await kube.patch_status(
            ROLLOUT_JOBS, body["metadata"]["name"], body["status"], namespace
        )
    return created
