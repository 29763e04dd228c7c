"""Uploads when the storage endpoint goes away: retried through an outage, bounded when dead."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runner_kit import (
    fast_store,
    make_spec,
    new_container_dir,
    publish_task,
    run_in,
    trial_objects,
)
from s3_kit import S3Settings

from fakecontainer import eventually, fake_container, requires_fake_container
from rollout.api.wire.termination import MAX_BYTES
from rollout.storage import ObjectStore, RetryPolicy
from s3server import S3Server

pytestmark = [pytest.mark.integration, requires_fake_container()]

# The agent waits until the test has taken the endpoint down, so that the outage is certain to
# cover the uploads (and not the task's download).
WAIT_FOR_OUTAGE = (
    "touch /logs/agent/started\n"
    "while [ ! -f /logs/agent/outage ]; do sleep 0.05; done\n"
    "echo 1 > /app/answer.txt\n"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[S3Server]:
    """An S3 server of this test's own, which the test stops and starts."""
    running = S3Server(log_dir=tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def settings(server: S3Server, make_s3_settings: Callable[..., S3Settings]) -> S3Settings:
    return make_s3_settings(endpoint_url=server.endpoint_url)


def store_on(settings: S3Settings, retry: RetryPolicy) -> ObjectStore:
    store = fast_store(settings, retry)
    store.ensure_bucket()
    return store


async def test_an_outage_during_the_uploads_is_ridden_out_and_nothing_is_lost(
    tmp_path: Path, server: S3Server, settings: S3Settings
) -> None:
    patient = RetryPolicy(
        max_attempts=100, max_seconds=60, initial_backoff_seconds=0.1, max_backoff_seconds=0.5
    )
    store = store_on(settings, patient)
    content_hash = publish_task(store, "reward-from-answer")
    spec = make_spec(
        store, "reward-from-answer", content_hash, agent="waiter", execute=WAIT_FOR_OUTAGE
    )
    with fake_container(new_container_dir(tmp_path)) as container:
        trial = asyncio.create_task(run_in(container, tmp_path, spec, store))
        try:
            agent_logs = container.logs_dir / "agent"
            await eventually(lambda: (agent_logs / "started").exists(), "the agent starts")
            await asyncio.to_thread(server.stop)
            (agent_logs / "outage").touch()
            await eventually(lambda: sum(store.stats.retries.values()) >= 2, "uploads retry", 60)
            # Back on the same port with the bucket (moto forgets everything when it stops).
            await asyncio.to_thread(server.start, [store.bucket])
            report = await asyncio.wait_for(trial, 60)
        finally:
            trial.cancel()

    assert report.upload_error is None
    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert store.stats.failures["upload_file"] == 0
    objects = trial_objects(store, spec)
    assert sorted(objects) == [
        "command/stderr.txt",
        "command/stdout.txt",
        "logs/agent/outage",
        "logs/agent/started",
        "logs/verifier/reward.txt",
        "logs/verifier/stderr.txt",
        "logs/verifier/stdout.txt",
        "result.json",
    ]
    assert objects["result.json"].decode() == report.result.to_json()


async def test_a_dead_endpoint_stops_the_uploads_after_bounded_retries(
    tmp_path: Path, server: S3Server, settings: S3Settings
) -> None:
    quick = RetryPolicy(
        max_attempts=3, max_seconds=2, initial_backoff_seconds=0.05, max_backoff_seconds=0.2
    )
    store = store_on(settings, quick)
    content_hash = publish_task(store, "reward-from-answer")
    spec = make_spec(
        store, "reward-from-answer", content_hash, agent="waiter", execute=WAIT_FOR_OUTAGE
    )
    with fake_container(new_container_dir(tmp_path)) as container:
        trial = asyncio.create_task(run_in(container, tmp_path, spec, store))
        try:
            agent_logs = container.logs_dir / "agent"
            await eventually(lambda: (agent_logs / "started").exists(), "the agent starts")
            await asyncio.to_thread(server.stop)
            (agent_logs / "outage").touch()
            started = time.monotonic()
            report = await asyncio.wait_for(trial, 60)
            elapsed = time.monotonic() - started
        finally:
            trial.cancel()

    assert elapsed < 30, f"the runner kept trying for {elapsed:.0f}s"
    # The trial's own outcome is untouched by the storage failure.
    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.uploaded == []
    error = report.upload_error
    assert error is not None
    assert error.startswith(f"storage upload_file of s3://{store.bucket}/jobs/")
    assert "after 3 attempts" in error
    assert server.endpoint_url in error
    assert "0 of 8 objects were uploaded, 8 (result.json among them) were not" in error
    assert store.stats.attempts["upload_file"] == 3  # the first failure stopped the rest

    message = report.termination_message()
    assert len(message) <= MAX_BYTES
    document = json.loads(message)
    assert document["reward"] == 1.0
    assert document["error"] is None
    assert document["upload_error"] == error
    assert document["result_uri"] == report.result_uri
    assert document["durations"]["total_sec"] == report.result.durations.total_sec
