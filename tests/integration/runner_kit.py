"""Shared by the runner's integration tests: trial specs, published tasks, a fake-container run.

Tasks come from tests/data/tasks (offline tasks: their scripts need only sh, bash and coreutils)
and are published into the test's S3 bucket the way the CLI publishes them: the archive of
`rollout.datasets.bundle` under `rollout.api.layout.task_archive_key`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3_kit import S3Settings

from fakecontainer import FakeContainer, fake_container
from rollout.api.layout import task_archive_key, trial_prefix
from rollout.api.resources import RolloutTrialSpec
from rollout.api.taskdir import task_content_hash
from rollout.datasets.bundle import task_archive
from rollout.storage import DirectoryStore, ObjectStore, RetryPolicy, Store
from rollout_runner.context import RunnerOptions
from rollout_runner.environment import Environment
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import TrialReport, run_trial

TASKS = Path(__file__).resolve().parents[1] / "data" / "tasks"
JOB = "job-1"
DATASET = "offline"
FAST_RETRY = RetryPolicy(
    max_attempts=4, max_seconds=5, initial_backoff_seconds=0.05, max_backoff_seconds=0.5
)
KILL_GRACE_SEC = 0.3


def fast_store(settings: S3Settings, retry: RetryPolicy = FAST_RETRY) -> ObjectStore:
    """An ObjectStore that gives up on a dead endpoint within seconds, not a minute."""
    return settings.store(retry=retry)


def publish_task(store: ObjectStore | DirectoryStore, name: str, tasks: Path = TASKS) -> str:
    """Put tests/data/tasks/<name> (or `tasks`/<name>) into the bucket (or directory) as the CLI
    would; its content hash."""
    directory = tasks / name
    content_hash = task_content_hash(directory)
    store.put_bytes(task_archive_key(store.prefix, content_hash), task_archive(directory))
    return content_hash


def make_spec(
    store: ObjectStore | DirectoryStore,
    task: str,
    content_hash: str | None,
    *,
    agent: str = "oracle",
    install: str | None = None,
    execute: str | None = None,
    env: Sequence[dict[str, Any]] = (),
    install_sec: float = 20.0,
    agent_sec: float = 20.0,
    verifier_sec: float = 20.0,
    attempt: int = 1,
    agent_fields: dict[str, Any] | None = None,
    **fields: Any,
) -> RolloutTrialSpec:
    """A RolloutTrial spec as the operator would write it, from its camelCase JSON form;
    `agent_fields` go into its agent (an endpoint agent's `endpoint`, `headers`, ...)."""
    data: dict[str, Any] = {
        "jobName": JOB,
        "agent": {"name": agent, "install": install, "execute": execute, "env": list(env)},
        "datasetName": DATASET,
        "taskName": task,
        "attempt": attempt,
        "taskContentHash": content_hash,
        "image": "debian:bookworm-slim",
        "resources": {"cpus": "1", "memory": "512M", "storage": "1G"},
        "timeouts": {
            "agentInstallSec": install_sec,
            "agentSec": agent_sec,
            "verifierSec": verifier_sec,
            "buildSec": 600,
        },
        "storage": _storage_spec(store),
        "runnerImage": "rollout-runner:test",
        **fields,
    }
    if agent == "oracle":
        data["agent"] = {"name": "oracle", "env": list(env)}
    data["agent"].update(agent_fields or {})
    return RolloutTrialSpec.model_validate(data)


def _storage_spec(store: ObjectStore | DirectoryStore) -> dict[str, Any]:
    if isinstance(store, DirectoryStore):
        # A RolloutTrial always names a bucket; a runner given ROLLOUT_STORAGE_DIR never uses it.
        return {"bucket": "unused-by-a-directory", "prefix": store.prefix}
    return {
        "bucket": store.location.bucket,
        "prefix": store.location.prefix,
        "endpoint": store.location.endpoint,
        "pathStyle": True,
    }


def trial_objects(store: ObjectStore, spec: RolloutTrialSpec) -> dict[str, bytes]:
    """Every object under the trial's prefix, by its path relative to the prefix."""
    prefix = trial_prefix_of(store, spec)
    return {key[len(prefix) :]: store.get_bytes(key) for key in store.list_keys(prefix)}


def trial_prefix_of(store: ObjectStore, spec: RolloutTrialSpec) -> str:
    return trial_prefix(
        store.location.prefix,
        spec.job_name,
        spec.agent.name,
        spec.dataset_name,
        spec.task_name,
        spec.attempt,
    )


def options_for(container: FakeContainer, work_dir: Path, **fields: Any) -> RunnerOptions:
    values: dict[str, Any] = {
        "work_dir": work_dir,
        "logs_dir": container.logs_dir,
        "ready_timeout_sec": 20.0,
        "upload_timeout_sec": 30.0,
        "housekeeping_timeout_sec": 20.0,
    }
    values.update(fields)
    return RunnerOptions(**values)


async def run_in(
    container: FakeContainer,
    tmp_path: Path,
    spec: RolloutTrialSpec,
    store: Store,
    *,
    agent_env: AgentEnv | None = None,
    environment: Environment | None = None,
    **options: Any,
) -> TrialReport:
    """Run the trial in a running fake container (which stays up for the test to inspect)."""
    return await run_trial(
        spec,
        environment or ShimEnvironment(container.control_dir, kill_grace_sec=KILL_GRACE_SEC),
        store,
        agent_env=agent_env or AgentEnv(),
        options=options_for(container, tmp_path / "work", **options),
    )


def new_container_dir(tmp_path: Path) -> Path:
    base = tmp_path / "container"
    base.mkdir()
    return base


async def run_in_fake_container(
    tmp_path: Path,
    spec: RolloutTrialSpec,
    store: ObjectStore,
    *,
    agent_env: AgentEnv | None = None,
    shell: str = "/bin/sh",
    **options: Any,
) -> TrialReport:
    """Run the trial with a fresh fake container as its environment; the container is gone after."""
    with fake_container(new_container_dir(tmp_path), shell) as container:
        return await run_in(container, tmp_path, spec, store, agent_env=agent_env, **options)


def traced(additions: dict[str, Any]) -> dict[str, Any]:
    """A result.json's `rollout` object without its `trace_id`, which every record the runner
    writes has, fresh (checked here to be a W3C trace id)."""
    rest = dict(additions)
    trace_id = rest.pop("trace_id")
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id), trace_id
    assert trace_id.strip("0")
    return rest
