"""An endpoint agent (seed 003) end to end on a real cluster, as a user runs it: the example
agent service in the cluster (a Pod and a Service answering seed 003's payload with the sum of
the question's numbers and a score of its own), and `rollout run` of a job of 6 rows whose
agent is that endpoint, its Authorization header from the submitter's environment. Each
shard's Pod holds the runner alone.

Settings, from the environment (as test_cli_e2e.py), plus:

- ROLLOUT_E2E_ENDPOINT_IMAGE: an image with python3 for the agent service (default:
  ROLLOUT_RUNNER_IMAGE, which has it and which the cluster has pulled already); skipped
  without either.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_e2e import rollout

from paths import REPO

pytestmark = pytest.mark.e2e

ROWS = 6
TOKEN = "e2e-endpoint-token-7f3a"

# The agent service is the example's (examples/agents/arith_endpoint.py): it checks the token,
# answers "What is A + B?" and scores itself 1.0.
SERVER = (REPO / "examples" / "agents" / "arith_endpoint.py").read_text()


def kube_clients() -> tuple[Any, str]:
    """The core API client of the cluster KUBECONFIG names, and the namespace to use."""
    from kubernetes import client, config  # the e2e tests' own dependency on the cluster

    context = os.environ.get("ROLLOUT_E2E_CONTEXT")
    config.load_kube_config(context=context)
    _, active = config.list_kube_config_contexts()
    namespace = os.environ.get("ROLLOUT_E2E_NAMESPACE") or active["context"].get(
        "namespace", "default"
    )
    return client.CoreV1Api(), namespace


@pytest.fixture
def agent_service() -> Iterator[str]:
    """The agent service's URL, from inside the cluster."""
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("KUBECONFIG is not set: no cluster to run on")
    image = os.environ.get("ROLLOUT_E2E_ENDPOINT_IMAGE") or os.environ.get("ROLLOUT_RUNNER_IMAGE")
    if not image:
        pytest.skip("neither ROLLOUT_E2E_ENDPOINT_IMAGE nor ROLLOUT_RUNNER_IMAGE names an image")
    core, namespace = kube_clients()
    name = f"e2e-agent-{uuid.uuid4().hex[:8]}"
    labels = {"app": name}
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "agent",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [
                            "python3",
                            "-c",
                            SERVER,
                            "--host",
                            "0.0.0.0",
                            "--port",
                            "8080",
                        ],
                        "env": [{"name": "AGENT_RUN_TOKEN", "value": TOKEN}],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
                    }
                ]
            },
        },
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
        },
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            pod = core.read_namespaced_pod(name, namespace)
            conditions = {c.type: c.status for c in (pod.status.conditions or [])}
            if conditions.get("Ready") == "True":
                break
            time.sleep(2)
        else:
            pytest.fail(f"the agent service's Pod {namespace}/{name} did not become Ready")
        yield f"http://{name}.{namespace}.svc:8080/rollout/eval"
    finally:
        core.delete_namespaced_service(name, namespace)
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    if not os.environ.get("ROLLOUT_STORAGE_BUCKET"):
        pytest.skip("ROLLOUT_STORAGE_BUCKET is not set: the CLI needs object storage")
    dataset = tmp_path / "sums"
    (dataset / "data").mkdir(parents=True)
    (dataset / "dataset.toml").write_text('name = "sums"\n\n[verifier]\nmetric = "exact_match"\n')
    lines = [
        json.dumps({"id": f"s{i}", "question": f"What is {i} + {2 * i}?", "answer": str(3 * i)})
        for i in range(ROWS)
    ]
    (dataset / "data" / "test.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_an_endpoint_agent_answers_a_data_benchmark_end_to_end(
    workdir: Path, agent_service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"e2e-endpoint-{uuid.uuid4().hex[:8]}"
    (workdir / "job.yaml").write_text(
        f"name: {name}\n"
        "shard_size: 4\n"
        "agents:\n"
        "  - name: service\n"
        f"    endpoint: {agent_service}\n"
        "    headers:\n"
        '      Authorization: "Bearer ${E2E_AGENT_TOKEN}"\n'
        "    timeout_sec: 30\n"
        "datasets:\n  - path: ./sums\n"
    )
    monkeypatch.setenv("E2E_AGENT_TOKEN", TOKEN)  # the submitter's environment, as a user has it
    timeout = float(os.environ.get("ROLLOUT_E2E_TIMEOUT", "600"))
    run = rollout("job.yaml", cwd=workdir, timeout=timeout + 60)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    job_dir = workdir / "jobs" / name
    for i in range(ROWS):
        trial = job_dir / "service" / "sums" / f"s{i}__1"
        result = json.loads((trial / "result.json").read_text())
        assert result["error"] is None, result
        assert result["reward"] == 1.0
        assert result["rollout"]["evaluation"] == {"score": 1.0, "passed": True}
        request = json.loads((trial / "logs" / "agent" / "request.json").read_text())
        assert request["attempt"]["traceId"] == result["rollout"]["trace_id"]
    written = b"".join(p.read_bytes() for p in job_dir.rglob("*") if p.is_file())
    assert TOKEN.encode() not in written
    assert TOKEN not in run.stdout + run.stderr
