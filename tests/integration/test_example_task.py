"""examples/tasks/hello-offline works offline under real processes: in a fake container (its own
root filesystem with /app, /logs, /oracle and /tests, no network needed), `bash /oracle/solve.sh`
then `bash /tests/test.sh` give reward 1, and the verifier alone gives reward 0."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from fakecontainer import fake_container, requires_fake_container
from paths import REPO
from rollout.datasets.bundle import task_archive

pytestmark = [pytest.mark.integration, requires_fake_container()]

TASK = REPO / "examples" / "tasks" / "hello-offline"

# What the harness does, in the order the seed gives: the solution goes to /oracle and runs from
# the working directory (/app); only then do the tests go to /tests and run. The task arrives as
# its bundle archive (base64 in an argument), so it is in place before anything runs.
HARNESS = """
set -eu
mkdir -p /task /logs/agent /logs/verifier
printf '%s' "$2" | base64 -d | tar -xzf - -C /task
if [ "$1" = oracle ]; then
  mkdir -p /oracle && cp -R /task/solution/. /oracle/
  bash /oracle/solve.sh > /logs/agent/stdout.txt 2>&1
fi
mkdir -p /tests && cp -R /task/tests/. /tests/
bash /tests/test.sh > /logs/verifier/stdout.txt 2> /logs/verifier/stderr.txt
"""


def run_trial(tmp_path: Path, agent: str) -> Path:
    """Run the harness in a fake container; returns the host directory holding its /logs."""
    archive = base64.b64encode(task_archive(TASK)).decode()
    command = ["/bin/bash", "-c", HARNESS, "harness", agent, archive]
    with fake_container(tmp_path, command=command) as c:
        code = c.wait_exit(timeout=60)
        assert code == 0, c.log()
        return c.logs_dir


def test_oracle_solution_earns_reward_1(tmp_path: Path) -> None:
    logs = run_trial(tmp_path, "oracle")
    assert (logs / "agent" / "stdout.txt").read_text() == "wrote /app/hello.txt\n"
    assert (logs / "verifier" / "reward.txt").read_text() == "1\n"
    assert "ok: /app/hello.txt says hello" in (logs / "verifier" / "stdout.txt").read_text()


def test_doing_nothing_earns_reward_0(tmp_path: Path) -> None:
    logs = run_trial(tmp_path, "nop")
    assert not (logs / "agent" / "stdout.txt").exists()
    assert (logs / "verifier" / "reward.txt").read_text() == "0\n"
