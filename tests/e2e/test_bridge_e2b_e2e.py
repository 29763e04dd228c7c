"""The e2b provider for real: an E2B sandbox started from the offline example task's image runs
the oracle's trial through the runner's own `run_trial`, its files kept in a directory store.

Settings, from the environment:
- E2B_API_KEY (required; skipped without it), and E2B_DOMAIN for an E2B other than e2b.app.
- ROLLOUT_E2E_TASK_IMAGE: the image the task runs in (default debian:bookworm-slim, what its
  environment/Dockerfile starts from; E2B builds a template from it once).
The sandbox is killed at the end, whatever happened.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.api.layout import task_archive_key
from rollout.api.resources import RolloutTrialSpec
from rollout.api.taskdir import task_content_hash
from rollout.bridge.providers.base import SandboxRequest, sandbox_labels
from rollout.bridge.providers.e2b import E2BProvider
from rollout.datasets.bundle import task_archive
from rollout.storage import DirectoryStore
from rollout_runner.archive import extract_task_archive
from rollout_runner.context import RunnerOptions
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import run_trial

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.cloud,
    pytest.mark.skipif(
        not os.environ.get("E2B_API_KEY"), reason="no E2B_API_KEY: no E2B account to run on"
    ),
    pytest.mark.timeout(1800),
]

TASK = Path(__file__).resolve().parents[1] / "data" / "tasks" / "hello-offline"
IMAGE = os.environ.get("ROLLOUT_E2E_TASK_IMAGE", "debian:bookworm-slim")


def trial_spec(content_hash: str, prefix: str) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "e2b-e2e",
            "environmentType": "e2b",
            "agent": {"name": "oracle", "env": []},
            "datasetName": "offline",
            "taskName": "hello-offline",
            "attempt": 1,
            "taskContentHash": content_hash,
            "image": IMAGE,
            "workdir": "/app",
            "resources": {"cpus": "1", "memory": "512M", "storage": "1G"},
            "timeouts": {
                "agentInstallSec": 120,
                "agentSec": 120,
                "verifierSec": 120,
                "buildSec": 1200,
            },
            "storage": {"bucket": "unused-by-a-directory", "prefix": prefix},
            "runnerImage": "rollout-runner:unused",
        }
    )


async def test_the_oracle_solves_the_offline_task_in_an_e2b_sandbox(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    store = DirectoryStore(store_dir, "e2e")
    content_hash = task_content_hash(TASK)
    store.put_bytes(task_archive_key(store.prefix, content_hash), task_archive(TASK))
    spec = trial_spec(content_hash, store.prefix)
    task_dir = tmp_path / "task"
    extract_task_archive(task_archive(TASK), task_dir)
    labels = sandbox_labels("e2e", "hello-offline-1", spec.job_name, "e2b-e2e-bridge")

    provider = await E2BProvider.connect(os.environ)
    sandbox = await provider.start(SandboxRequest("e2e", "hello-offline-1", spec, labels, task_dir))
    try:
        owned = await provider.owned("e2b-e2e-bridge")
        assert any(o.sandbox_id == sandbox.sandbox_id for o in owned)
        await sandbox.wait_ready(120)
        report = await run_trial(
            spec,
            sandbox,
            store,
            agent_env=AgentEnv(),
            options=RunnerOptions(work_dir=tmp_path / "work"),
        )
    finally:
        await sandbox.terminate()
        await provider.aclose()

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.upload_error is None
