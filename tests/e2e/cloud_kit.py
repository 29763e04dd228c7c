"""The cloud providers' e2e tests, shared: the oracle on the offline example task in a real
sandbox of the provider, driven by the runner's own `run_trial` as the bridge drives it, its
files in a DirectoryStore; the sandbox found among the bridge's own and terminated at the end
whatever happens.

ROLLOUT_E2E_TASK_IMAGE is the task's registry image (debian:bookworm-slim by default): it needs
sh and tar, and what each provider's README section adds.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from rollout.api.layout import task_archive_key
from rollout.api.resources import RolloutTrialSpec
from rollout.api.taskdir import task_content_hash
from rollout.bridge.providers.base import Provider, SandboxRequest, sandbox_labels
from rollout.datasets.bundle import task_archive
from rollout.storage import DirectoryStore
from rollout_runner.archive import extract_task_archive
from rollout_runner.context import RunnerOptions
from rollout_runner.spec import AgentEnv
from rollout_runner.trial import run_trial

TASK = Path(__file__).resolve().parents[1] / "data" / "tasks" / "hello-offline"
IMAGE = os.environ.get("ROLLOUT_E2E_TASK_IMAGE", "debian:bookworm-slim")


def trial_spec(provider: str, content_hash: str) -> RolloutTrialSpec:
    """The oracle's trial of the offline task, as the operator would write it."""
    return RolloutTrialSpec.model_validate(
        {
            "jobName": f"{provider}-e2e",
            "environmentType": provider,
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
                "buildSec": 1200,
            },
            # A RolloutTrial always names a bucket; a DirectoryStore never uses it.
            "storage": {"bucket": "unused-by-a-directory", "prefix": "e2e"},
            "runnerImage": "rollout-runner:e2e",
        }
    )


async def oracle_solves_the_task(provider: Provider, name: str, tmp_path: Path) -> None:
    """Run the oracle's trial in a sandbox of `provider` and check its record and its listing
    among the bridge's own sandboxes; the provider is closed at the end."""
    root = tmp_path / "store"
    root.mkdir()
    store = DirectoryStore(root, "e2e")
    content_hash = task_content_hash(TASK)
    store.put_bytes(task_archive_key(store.prefix, content_hash), task_archive(TASK))
    spec = trial_spec(name, content_hash)
    task_dir = tmp_path / "task"  # for a provider that builds (E2B makes a template of it)
    extract_task_archive(task_archive(TASK), task_dir)
    bridge = f"{name}-e2e"
    trial = f"{name}-e2e-{secrets.token_hex(3)}"
    labels = sandbox_labels("e2e", trial, spec.job_name, bridge)
    sandbox = await provider.start(SandboxRequest("e2e", trial, spec, labels, task_dir))
    try:
        owned = await provider.owned(bridge)
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
    finally:
        await sandbox.terminate()
        await provider.aclose()

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.upload_error is None
    results = list(root.rglob("result.json"))
    assert [json.loads(path.read_text())["reward"] for path in results] == [1.0]
    assert any(found.sandbox_id == sandbox.sandbox_id for found in owned)
