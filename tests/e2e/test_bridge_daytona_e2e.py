"""The daytona provider for real: the oracle solves the offline example task in a Daytona sandbox,
driven by the runner's own `run_trial` as the bridge drives it, its files in a DirectoryStore.

Settings, from the environment: DAYTONA_API_KEY (required; skipped without it or without the
`daytona` package), DAYTONA_API_URL and DAYTONA_TARGET (optional), and
ROLLOUT_E2E_TASK_IMAGE (a registry image with sh, base64 and tar; debian:bookworm-slim by default).
The sandbox is deleted at the end whatever happens.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from rollout.api.layout import task_archive_key
from rollout.api.resources import RolloutTrialSpec
from rollout.api.taskdir import task_content_hash
from rollout.bridge.providers.base import SandboxRequest, sandbox_labels
from rollout.bridge.providers.daytona import API_KEY, DaytonaProvider
from rollout.datasets.bundle import task_archive
from rollout.storage import DirectoryStore
from rollout_runner.context import RunnerOptions
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import run_trial

pytestmark = [pytest.mark.e2e, pytest.mark.cloud]

TASKS = Path(__file__).resolve().parents[1] / "data" / "tasks"
IMAGE = os.environ.get("ROLLOUT_E2E_TASK_IMAGE", "debian:bookworm-slim")


def trial_spec(content_hash: str) -> RolloutTrialSpec:
    """The oracle's trial of the offline task, as the operator would write it."""
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "daytona-e2e",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": "hello-offline",
            "attempt": 1,
            "taskContentHash": content_hash,
            "image": IMAGE,
            "workdir": "/app",
            "resources": {"cpus": "1", "memory": "512Mi", "storage": "1G"},
            "timeouts": {
                "agentInstallSec": 120,
                "agentSec": 120,
                "verifierSec": 120,
                "buildSec": 600,
            },
            # A RolloutTrial always names a bucket; a DirectoryStore never uses it.
            "storage": {"bucket": "unused-by-a-directory", "prefix": "e2e"},
            "runnerImage": "rollout-runner:e2e",
        }
    )


@pytest.fixture
async def provider() -> DaytonaProvider:
    if not os.environ.get(API_KEY):
        pytest.skip(f"{API_KEY} is not set: the Daytona e2e test needs a Daytona API key")
    pytest.importorskip("daytona", reason="the Daytona SDK (`daytona`) is not installed")
    return await DaytonaProvider.connect(os.environ)


async def test_the_oracle_solves_a_task_in_a_daytona_sandbox(
    provider: DaytonaProvider, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    store = DirectoryStore(root, "e2e")
    task = TASKS / "hello-offline"
    content_hash = task_content_hash(task)
    store.put_bytes(task_archive_key(store.prefix, content_hash), task_archive(task))
    spec = trial_spec(content_hash)
    trial = f"daytona-e2e-{secrets.token_hex(3)}"
    labels = sandbox_labels("e2e", trial, spec.job_name, "daytona-e2e")
    sandbox = await provider.start(SandboxRequest("e2e", trial, spec, labels, None))
    try:
        report = await run_trial(
            spec,
            sandbox,
            store,
            agent_env=AgentEnv(),
            options=RunnerOptions(
                work_dir=tmp_path / "work",
                ready_timeout_sec=300.0,
                upload_timeout_sec=60.0,
                housekeeping_timeout_sec=60.0,
            ),
        )
        owned = await provider.owned("daytona-e2e")
    finally:
        await sandbox.terminate()
        await provider.aclose()

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.upload_error is None
    results = list(root.rglob("result.json"))
    assert [json.loads(path.read_text())["reward"] for path in results] == [1.0]
    assert any(found.sandbox_id == sandbox.sandbox_id for found in owned)
