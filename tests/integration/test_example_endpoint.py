"""The example endpoint agent, as its job file's comment says to run it: the example service
(examples/agents/arith_endpoint.py) as a process, then `rollout run examples/endpoint-job.yaml
--local` as a process; every row of the arithmetic benchmark is answered and scored 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from paths import REPO

pytestmark = pytest.mark.integration

TOKEN = "example-token-1234"


def test_the_example_endpoint_job_runs_as_documented(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "ROLLOUT_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "AGENT_RUN_TOKEN": TOKEN,
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",  # no container engine is needed
    }
    service = subprocess.Popen(
        [sys.executable, str(REPO / "examples/agents/arith_endpoint.py"), "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert service.stdout is not None
        url = re.search(r"http://\S+", service.stdout.readline())
        assert url is not None
        # The example job, its endpoint at the port the service got, beside the example data.
        job = (REPO / "examples/endpoint-job.yaml").read_text()
        job = job.replace("http://127.0.0.1:8765/rollout/eval", url[0])
        job = job.replace("./benchmarks/arith", str(REPO / "examples/benchmarks/arith"))
        (tmp_path / "endpoint-job.yaml").write_text(job)
        run = subprocess.run(
            [sys.executable, "-m", "rollout.cli.main", "run", "endpoint-job.yaml", "--local"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        service.terminate()
        service.wait(timeout=10)
    assert run.returncode == 0, run.stderr
    job_dir = tmp_path / "jobs" / "arith-endpoint"
    results = sorted(job_dir.glob("arith-service/arith/*/result.json"))
    assert len(results) == 20
    for path in results:
        result = json.loads(path.read_text())
        assert result["reward"] == 1.0, result
        assert result["rollout"]["evaluation"] == {"score": 1.0, "passed": True}
    summary = json.loads(next(job_dir.glob("summary_arith_*.json")).read_text())
    assert (summary["total_tasks"], summary["average_score"]) == (20, 1.0)
    assert TOKEN not in run.stdout + run.stderr
