"""A whole trial through the shim, for what makes it fast: the task fetched while the environment
starts, every answer announced through the done FIFO, few round trips, and the agent's output
uploaded while the verifier runs (result.json still last, a failure of those uploads reported as
any upload failure is)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from runner_kit import (
    KILL_GRACE_SEC,
    TASKS,
    make_spec,
    new_container_dir,
    options_for,
    publish_task,
    run_in,
    trial_objects,
    trial_prefix_of,
)

from fakecontainer import eventually, fake_container, requires_fake_container
from rollout.api.errors import ErrorType
from rollout.api.layout import task_archive_key
from rollout.storage import ObjectStore, StorageError
from rollout_runner.context import RunnerOptions
from rollout_runner.phases.common import reads_any_file
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import run_trial

pytestmark = [pytest.mark.integration, requires_fake_container()]

TASK = "reward-from-answer"
# The verifier waits until the test has seen the agent's output in storage.
WAITING_TEST = """\
#!/bin/bash
while [ ! -e /logs/agent/seen ]; do sleep 0.02; done
cat /app/answer.txt > /logs/verifier/reward.txt
"""
AGENT: dict[str, Any] = {
    "agent": "trivial",
    "install": "true",
    "execute": "echo 1 > /app/answer.txt",
}


class RecordingStore:
    """A `Store` that passes every call on and records the keys uploaded, in order; with
    `fail_under`, an upload of a key under it fails as a dead endpoint's would."""

    def __init__(self, store: ObjectStore, fail_under: str | None = None) -> None:
        self.store = store
        self.fail_under = fail_under
        self.uploaded: list[str] = []
        self.failed: list[str] = []
        self.fetched: list[str] = []
        self._lock = threading.Lock()

    @property
    def prefix(self) -> str:
        return self.store.prefix

    def uri(self, key: str) -> str:
        return self.store.uri(key)

    def secrets(self) -> list[str]:
        return self.store.secrets()

    def get_bytes(self, key: str) -> bytes:
        data = self.store.get_bytes(key)
        with self._lock:
            self.fetched.append(key)
        return data

    def upload_file(self, local_path: Path | str, key: str) -> None:
        if self.fail_under is not None and key.startswith(self.fail_under):
            with self._lock:
                self.failed.append(key)
            raise StorageError(
                f"storage upload_file of {self.uri(key)} failed after 3 attempts: injected",
                operation="upload_file",
                key=key,
                endpoint="injected",
                attempts=3,
                transient=True,
            )
        self.store.upload_file(local_path, key)
        with self._lock:
            self.uploaded.append(key)


def waiting_task(tmp_path: Path) -> Path:
    """reward-from-answer with a verifier that waits for /logs/agent/seen."""
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / TASK, tasks / "waits-for-uploads")
    (tasks / "waits-for-uploads" / "tests" / "test.sh").write_text(WAITING_TEST)
    return tasks


async def test_a_trivial_trial_takes_few_round_trips_each_answer_told(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash, **AGENT)
    with fake_container(new_container_dir(tmp_path)) as container:
        # Never looks for an answer it was not told of: an untold one would hold the trial 600 s.
        env = ShimEnvironment(
            container.control_dir, kill_grace_sec=KILL_GRACE_SEC, answer_check_sec=600
        )
        async with asyncio.timeout(120):
            report = await run_in(container, tmp_path, spec, fast_retry_store, environment=env)

    assert report.result.reward == 1.0, report.error_text
    assert report.upload_error is None
    # /logs prepared with the instruction's copy, tests/ cleared with their copy; /logs made
    # readable to all only for a runner that cannot read every file anyway (two more).
    #   setup: 1, install: 2, execute: 2, kill-all: 1, verifier: 3, teardown: 1
    assert env.stats.requests == (10 if reads_any_file() else 12)
    assert env.stats.checks <= 2 * env.stats.requests


async def test_the_agents_output_is_uploaded_while_the_verifier_runs_and_result_json_last(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "waits-for-uploads", waiting_task(tmp_path))
    spec = make_spec(fast_retry_store, "waits-for-uploads", content_hash, **AGENT)
    store = RecordingStore(fast_retry_store)
    prefix = trial_prefix_of(fast_retry_store, spec)
    early = {f"{prefix}{name}" for name in ("command/stdout.txt", "command/stderr.txt")}
    with fake_container(new_container_dir(tmp_path)) as container:
        trial = asyncio.create_task(run_in(container, tmp_path, spec, store))
        try:
            await eventually(lambda: early <= set(store.uploaded), "command/ is uploaded", 30)
            assert f"{prefix}result.json" not in store.uploaded
            (container.logs_dir / "agent" / "seen").touch()  # the verifier may end now
            report = await asyncio.wait_for(trial, 60)
        finally:
            trial.cancel()

    assert report.result.reward == 1.0, report.error_text
    assert report.upload_error is None
    assert store.uploaded[-1] == f"{prefix}result.json"
    assert sorted(store.uploaded) == sorted(report.uploaded)
    stored = trial_objects(fast_retry_store, spec)
    assert sorted(f"{prefix}{name}" for name in stored) == sorted(store.uploaded)
    assert {"setup/stdout.txt", "command/stdout.txt", "logs/agent/seen"} <= set(stored)


async def test_an_early_upload_that_fails_stops_the_uploads_as_any_failed_upload_does(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash, **AGENT)
    prefix = trial_prefix_of(fast_retry_store, spec)
    store = RecordingStore(fast_retry_store, fail_under=f"{prefix}command/")
    with fake_container(new_container_dir(tmp_path)) as container:
        report = await run_trial(
            spec,
            ShimEnvironment(container.control_dir, kill_grace_sec=KILL_GRACE_SEC),
            store,
            agent_env=AgentEnv(),
            options=options_for(container, tmp_path / "work"),
        )

    # The trial itself is scored; its files are not all stored, so neither is result.json.
    assert report.result.reward == 1.0, report.error_text
    assert store.uploaded == [f"{prefix}setup/stdout.txt", f"{prefix}setup/stderr.txt"]
    # The first failure stops the rest: what was under way beside it (command/'s other file,
    # once an object has gone through) may fail too, nothing later starts.
    command = {f"{prefix}command/stdout.txt", f"{prefix}command/stderr.txt"}
    assert store.failed
    assert set(store.failed) <= command
    assert report.uploaded == store.uploaded
    failures = {
        f"storage upload_file of {store.uri(key)} failed after 3 attempts: injected; 2 of 8 "
        "objects were uploaded, 6 (result.json among them) were not"
        for key in store.failed
    }
    assert report.upload_error in failures
    assert sorted(trial_objects(fast_retry_store, spec)) == [
        "setup/stderr.txt",
        "setup/stdout.txt",
    ]


async def test_the_task_is_fetched_while_the_environment_starts(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(fast_retry_store, TASK, content_hash, **AGENT)
    store = RecordingStore(fast_retry_store)
    base = new_container_dir(tmp_path)  # the fake container's, not started yet
    options = RunnerOptions(
        work_dir=tmp_path / "work", logs_dir=base / "logs", ready_timeout_sec=60
    )
    environment = ShimEnvironment(base / "control", kill_grace_sec=KILL_GRACE_SEC)
    trial = asyncio.create_task(
        run_trial(spec, environment, store, agent_env=AgentEnv(), options=options)
    )
    try:
        archive = task_archive_key(store.prefix, content_hash)
        await eventually(lambda: archive in store.fetched, "the task is fetched", 30)
        with fake_container(base):  # only now does the environment start
            report = await asyncio.wait_for(trial, 60)
    finally:
        trial.cancel()
    assert report.result.reward == 1.0, report.error_text
    assert store.fetched == [archive]


async def test_an_environment_that_never_starts_is_the_error_even_without_a_task(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    spec = make_spec(fast_retry_store, TASK, "0" * 64, **AGENT)  # no such archive
    options = RunnerOptions(work_dir=tmp_path / "work", logs_dir=None, ready_timeout_sec=1)
    environment = ShimEnvironment(tmp_path / "control", kill_grace_sec=KILL_GRACE_SEC)
    report = await run_trial(
        spec, environment, fast_retry_store, agent_env=AgentEnv(), options=options
    )
    assert report.result.error is not None
    assert report.result.error.type is ErrorType.ENVIRONMENT_START_FAILED
    assert report.error_text is not None
    assert "task_not_found" not in report.error_text  # fetched meanwhile, and not recorded


def test_the_runner_starts_without_what_only_shards_and_service_agents_need() -> None:
    """The runner starts once per trial: its imports are part of every trial's overhead."""
    probe = (
        "import sys, rollout_runner.main; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('rollout'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    assert "rollout_runner.trial" in loaded
    assert "rollout.api.resources.trial_resource" in loaded
    only_for_some = {
        "rollout_runner.shard",
        "rollout_runner.row",
        "rollout_runner.phases.service",
        "rollout_runner.endpoint_agent",
        "rollout_runner.model_agent",
        # The RolloutJob's and RolloutImage's models (and job.yaml's, which the first brings).
        "rollout.api.resources.job_resource",
        "rollout.api.resources.image_resource",
        "rollout.api.job",
    }
    assert loaded & only_for_some == set()
