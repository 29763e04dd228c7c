"""`rollout run` end to end on a real cluster, as a user runs it: the oracle agent on the example
offline task, with the operator installed (the Helm chart) in the cluster KUBECONFIG names.

Settings, from the environment:

- KUBECONFIG (required; the test is skipped without it) and, optionally, ROLLOUT_E2E_CONTEXT and
  ROLLOUT_E2E_NAMESPACE (default: the context's namespace);
- ROLLOUT_STORAGE_BUCKET (required; skipped without it), ROLLOUT_STORAGE_ENDPOINT,
  ROLLOUT_STORAGE_CLUSTER_ENDPOINT, ROLLOUT_STORAGE_PATH_STYLE, ROLLOUT_STORAGE_REGION,
  ROLLOUT_STORAGE_CREDENTIALS_SECRET, with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY for the CLI
  (for the quickstart cluster, see examples/quickstart.sh);
- ROLLOUT_E2E_TASK_IMAGE: the task's image (default: the example's debian:bookworm-slim);
- ROLLOUT_RUNNER_IMAGE: the runner image, when the operator's default is not wanted;
- ROLLOUT_E2E_TIMEOUT: seconds the job may take (default 600).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from paths import REPO

pytestmark = pytest.mark.e2e

TASK = REPO / "examples" / "tasks" / "hello-offline"


def rollout(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The `rollout` command, as a user types it (this interpreter's installation of it)."""
    cluster = []
    if context := os.environ.get("ROLLOUT_E2E_CONTEXT"):
        cluster += ["--context", context]
    if namespace := os.environ.get("ROLLOUT_E2E_NAMESPACE"):
        cluster += ["--namespace", namespace]
    command = [sys.executable, "-m", "rollout.cli.main", *args]
    if args[0] not in ("validate",):
        command += cluster
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    if not os.environ.get("ROLLOUT_STORAGE_BUCKET"):
        pytest.skip("ROLLOUT_STORAGE_BUCKET is not set: the CLI needs object storage")
    task = tmp_path / "tasks" / "hello-offline"
    shutil.copytree(TASK, task)
    if image := os.environ.get("ROLLOUT_E2E_TASK_IMAGE"):
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace('"debian:bookworm-slim"', json.dumps(image)))
    return tmp_path


def test_rollout_run_of_an_oracle_job_end_to_end(workdir: Path) -> None:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    (workdir / "job.yaml").write_text(
        f"name: {name}\n"
        "n_concurrent_trials: 1\n"
        "metrics:\n  - type: mean\n"
        "agents:\n  - name: oracle\n"
        "datasets:\n  - path: ./tasks\n"
    )
    timeout = float(os.environ.get("ROLLOUT_E2E_TIMEOUT", "600"))
    try:
        run = rollout("job.yaml", cwd=workdir, timeout=timeout + 60)
        assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
        job_dir = workdir / "jobs" / name
        trial = job_dir / "oracle" / "tasks" / "hello-offline__1"
        result = json.loads((trial / "result.json").read_text())
        assert (result["reward"], result["error"]) == (1.0, None), result
        assert (trial / "logs" / "verifier" / "reward.txt").read_text().strip() in ("1", "1.0")
        job_result = json.loads((job_dir / "result.json").read_text())
        assert (job_result["total_trials"], job_result["pass_rate"]) == (1, 1.0)
        # config.json: the job file as submitted (relative path, no defaults filled in).
        config = json.loads((job_dir / "config.json").read_text())
        assert config == yaml.safe_load((workdir / "job.yaml").read_text())
        assert "oracle" in run.stdout  # the summary table

        status = rollout("status", name, cwd=workdir)
        assert status.returncode == 0, status.stderr
        assert "Completed" in status.stdout
        logs = rollout("logs", name, "oracle/tasks/hello-offline__1", cwd=workdir)
        assert logs.returncode == 0, logs.stderr
    finally:
        rollout("cancel", name, "--delete-results", cwd=workdir)


def test_rollout_run_resume_runs_only_the_infrastructure_failure_again(workdir: Path) -> None:
    """A job of the example task and a copy of it whose image cannot be pulled (an
    infrastructure failure, seed 000's environment_image_pull_failed). `--resume` replaces the
    finished RolloutJob and runs that trial alone again: the scored trial keeps its record byte
    for byte, the other's first try is under retries/1/ and its new record says tries 2."""
    name = f"e2e-resume-{uuid.uuid4().hex[:8]}"
    unpullable = workdir / "tasks" / "unpullable"
    shutil.copytree(workdir / "tasks" / "hello-offline", unpullable)
    toml = unpullable / "task.toml"
    text = toml.read_text()
    image = text.split("docker_image = ", 1)[1].splitlines()[0]
    toml.write_text(text.replace(image, '"registry.invalid/rollout-e2e/no-such-image:1"'))
    (workdir / "job.yaml").write_text(
        f"name: {name}\n"
        "n_concurrent_trials: 2\n"
        "agents:\n  - name: oracle\n"
        "datasets:\n  - path: ./tasks\n"
    )
    timeout = float(os.environ.get("ROLLOUT_E2E_TIMEOUT", "600"))
    job_dir = workdir / "jobs" / name
    good = job_dir / "oracle" / "tasks" / "hello-offline__1"
    bad = job_dir / "oracle" / "tasks" / "unpullable__1"
    try:
        first = rollout("job.yaml", cwd=workdir, timeout=timeout + 60)
        assert first.returncode == 0, f"stdout:\n{first.stdout}\nstderr:\n{first.stderr}"
        kept = (good / "result.json").read_bytes()
        failed = json.loads((bad / "result.json").read_text())
        assert failed["error"]["type"] == "environment_image_pull_failed", failed
        assert failed["rollout"]["failure_class"] == "infrastructure"

        again = rollout("run", "job.yaml", "--resume", cwd=workdir, timeout=timeout + 180)
        assert again.returncode == 0, f"stdout:\n{again.stdout}\nstderr:\n{again.stderr}"
        assert "--resume: deleting the finished RolloutJob" in again.stderr
        assert (good / "result.json").read_bytes() == kept
        assert not (good / "retries").exists()
        earlier = json.loads((bad / "retries" / "1" / "result.json").read_text())
        assert earlier["error"] == failed["error"]
        rerun = json.loads((bad / "result.json").read_text())
        assert rerun["rollout"]["tries"] == 2
        job_result = json.loads((job_dir / "result.json").read_text())
        assert (job_result["total_trials"], job_result["completed_trials"]) == (2, 1)
    finally:
        rollout("cancel", name, "--delete-results", cwd=workdir)
