"""The benchmark scripts still run: a refactor that breaks one shows here, not at the next
measurement. Their figures are never checked (benchmarks print figures, tests do not time)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from buildah_kit import base_image_unavailable_reason
from fakecontainer import requires_fake_container
from paths import REPO
from registry_server import registry_unavailable_reason

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
    out = _run(
        "runner_overhead.py", "--trials", "1", "--slim-botocore", "--environment-after-ms", "50"
    )
    title = "runner overhead, a Pod's view (the environment started 50 ms after the runner)"
    assert f"{title} (1 trials" in out
    assert "environment start -> runner exit" in out
    assert "as reported (ready file -> runner end)" in out
    assert "the same, botocore slimmed as in the runner image (1 trials" in out
    assert "removed " in out  # slim_botocore.py ran on the copy
    assert "agent_execution_sec" in out
    assert "shim round trips per trial: " in out


def test_the_operator_throughput_benchmark_runs() -> None:
    out = _run("operator_throughput.py", "--trials", "10", "--driven", "2")
    assert out.startswith("API: the emulator")
    assert "job status patches" in out


def test_the_image_builds_benchmark_runs() -> None:
    reason = registry_unavailable_reason() or base_image_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    out = _run("image_builds.py", "--trials", "2")
    assert out.startswith("API: the emulator")
    assert "1. uncached, the image built: " in out
    assert "3. cached, a job in another namespace (registry HEAD): " in out
    assert "cached/uncached: " in out
