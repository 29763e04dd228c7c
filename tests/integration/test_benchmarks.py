"""The benchmark scripts still run: a refactor that breaks one shows here, not at the next
measurement. Their figures are never checked (benchmarks print figures, tests do not time)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakecontainer import requires_fake_container
from paths import REPO

pytestmark = pytest.mark.integration


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@requires_fake_container()
def test_the_runner_overhead_benchmark_runs() -> None:
    out = _run("runner_overhead.py", "--trials", "1")
    assert "runner overhead per trial, 1 trials" in out
    assert "agent_execution_sec" in out


def test_the_operator_throughput_benchmark_runs() -> None:
    out = _run("operator_throughput.py", "--trials", "10", "--driven", "2")
    assert out.startswith("API: the emulator")
    assert "job status patches" in out
