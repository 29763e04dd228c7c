"""The README's first command, run exactly as written, in a copy of the repository: it installs the
project into a new virtualenv and runs the example job in local mode, which must score 1.0.

It needs what a user's machine needs: pip reaching a package index (or its cache) for the
project's dependencies, and namespaces for the host sandbox; it skips without the latter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from paths import REPO
from rollout.local.host import host_sandbox_unavailable

NO_HOST_SANDBOX = host_sandbox_unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(NO_HOST_SANDBOX is not None, reason=NO_HOST_SANDBOX or ""),
]

COPY_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".*_cache", "jobs", "dist", "build"
)


def first_command(readme: str) -> str:
    """The first command of the README's first `sh` block (comments skipped)."""
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    return next(line for line in block.splitlines() if line.strip() and not line.startswith("#"))


def test_the_first_command_is_the_local_quickstart() -> None:
    command = first_command((REPO / "README.md").read_text())
    assert "pip install" in command
    assert "--local" in command


@pytest.mark.timeout(900)
def test_the_readme_first_command_runs_the_example_job_to_reward_one(tmp_path: Path) -> None:
    copy = tmp_path / "rollout-operator"
    shutil.copytree(REPO, copy, ignore=COPY_IGNORED)
    command = first_command((copy / "README.md").read_text())
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    result = json.loads((copy / "jobs" / "hello-local" / "result.json").read_text())
    assert result["total_trials"] == 2
    assert result["mean_reward"] == 1.0
    for trial in result["results"]:
        assert trial["reward"] == 1.0, trial
