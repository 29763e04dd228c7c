"""Endpoint and model agents on the cluster, end to end: the real operator runs a job of an
endpoint agent (seed 003) and a model agent (seed 002) over data rows; each shard's Pod holds
the runner alone and runs for real (`run_trial_pod`), calling HTTP servers on loopback written
here: an agent endpoint and an OpenAI-compatible chat-completions API, both of which add the two
numbers of the question. Their credentials come from a Secret, as `rollout run` makes it: the
Pod takes them by reference, and no value appears in a resource or a stored file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from json_server import JsonServer, Reply, Request, json_server
from operator_kit import job_manifest, job_phase
from s3_kit import S3Settings
from test_operator_rows import (
    DATASET,
    expected_reward,
    operator_memo_with_secret,
    publish_rows,
    row_id,
    run_pods,
    write_rows,
)

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS, SECRETS
from rollout.api.layout import job_prefix, trial_prefix
from rollout.api.results import JobResult, TrialResult
from rollout.api.rowrun import shard_task_name
from rollout.api.trials import trial_resource_name
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

JOB = "services"
HEADER_VALUE = "Bearer endpoint-token-5c1d"
MODEL_KEY = "sk-model-key-9e2b"
KEYS_SECRET = "agent-keys"


def sum_of(text: str) -> str:
    """The agents' arithmetic: "r004: add 4 and 8" -> "12" (a refusal is answered too)."""
    a, b = (int(n) for n in re.findall(r"(\d+) and (\d+)", text)[0])
    return str(a + b)


def answer(request: Request) -> Reply:
    """The agent endpoint (POST /eval) and the chat-completions API (POST /v1/chat/completions)
    both answer the sum of the question's two numbers."""
    if request.path == "/eval":
        return Reply(body={"output": sum_of(request.body["task"]["instruction"]), "score": 0.5})
    question = request.body["messages"][-1]["content"]
    return Reply(
        body={
            "choices": [{"message": {"role": "assistant", "content": sum_of(question)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    )


@pytest.fixture
def services() -> Iterator[JsonServer]:
    with json_server(answer) as server:
        yield server


def secret_ref(key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": KEYS_SECRET, "key": key}}


async def test_endpoint_and_model_agents_answer_rows_in_pods_of_the_runner_alone(
    kube: Kube,
    s3_settings: S3Settings,
    store: ObjectStore,
    tmp_path: Path,
    services: JsonServer,
) -> None:
    numbers = list(range(1, 5))
    dataset = publish_rows(store, write_rows(tmp_path / "dataset", len(numbers)))
    await kube.create(
        SECRETS,
        {
            "metadata": {"name": KEYS_SECRET},
            "stringData": {
                "svc.header.Authorization": HEADER_VALUE,
                "llm.model.api-key": MODEL_KEY,
            },
        },
    )
    agents = [
        {
            "name": "svc",
            "endpoint": f"{services.url}/eval",
            "timeoutSec": 10,
            "headers": [
                {"name": "Authorization", "valueFrom": secret_ref("svc.header.Authorization")},
                {"name": "X-Team", "value": "evals"},
            ],
        },
        {
            "name": "llm",
            "model": {
                "name": "adder-1",
                "baseUrl": f"{services.url}/v1",
                "apiKey": {"name": KEYS_SECRET, "key": "llm.model.api-key"},
                "maxTurns": 2,
            },
        },
    ]
    shards = {
        a["name"]: trial_resource_name(JOB, a["name"], DATASET, shard_task_name(1), 1)
        for a in agents
    }
    async with kube.operator(memo=await operator_memo_with_secret(kube, s3_settings)):
        await kube.create(ROLLOUT_JOBS, job_manifest(JOB, [dataset], agents=agents, shardSize=10))
        pods = {
            agent: await kube.wait_for(lambda s=shard: kube.find(PODS, s), what=f"{agent}'s Pod")
            for agent, shard in shards.items()
        }
        outcomes = await run_pods(
            kube, JOB, tmp_path / "pods", lambda: job_phase(kube, JOB, "Completed"), within=60
        )
        trials = [await kube.get(ROLLOUT_TRIALS, name) for name in shards.values()]

    assert set(outcomes) == set(shards.values())
    for outcome in outcomes.values():
        assert outcome.exit_code == 0, outcome.stderr[-3000:]
    # The runner alone, its secrets by reference.
    for agent, pod in pods.items():
        assert [c["name"] for c in pod["spec"]["containers"]] == ["runner"], agent
    runner_env = {e["name"]: e for e in pods["svc"]["spec"]["containers"][0]["env"]}
    assert runner_env["ROLLOUT_AGENT_HEADER_0"]["valueFrom"] == secret_ref(
        "svc.header.Authorization"
    )
    runner_env = {e["name"]: e for e in pods["llm"]["spec"]["containers"][0]["env"]}
    assert runner_env["ROLLOUT_AGENT_MODEL_API_KEY"]["valueFrom"] == secret_ref("llm.model.api-key")

    # Each agent answered each row once, with its credentials.
    endpoint_calls = [(r.headers, r.body) for r in services.requests_to("/eval")]
    model_calls = [(r.headers, r.body) for r in services.requests_to("/v1/chat/completions")]
    assert len(endpoint_calls) == len(model_calls) == len(numbers)
    assert {h["authorization"] for h, _ in endpoint_calls} == {HEADER_VALUE}
    assert {h["x-team"] for h, _ in endpoint_calls} == {"evals"}
    assert {h["authorization"] for h, _ in model_calls} == {f"Bearer {MODEL_KEY}"}
    assert {b["model"] for _, b in model_calls} == {"adder-1"}

    for agent in ("svc", "llm"):
        for number in numbers:
            prefix = trial_prefix("", JOB, agent, DATASET, row_id(number), 1)
            result = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
            assert result.reward == expected_reward(number), (agent, number, result.error)
            additions = result.model_dump(mode="json")["rollout"]
            assert re.fullmatch(r"[0-9a-f]{32}", additions["trace_id"])
            if agent == "svc":
                assert additions["evaluation"] == {"score": 0.5, "passed": None}
            else:
                assert additions["usage"] == {
                    "input_tokens": 10,
                    "output_tokens": 2,
                    "total_tokens": 12,
                }
    # The endpoint got each row's trace id, which its result.json records.
    traced = {b["attempt"]["id"]: b["attempt"]["traceId"] for _, b in endpoint_calls}
    for number in numbers:
        prefix = trial_prefix("", JOB, "svc", DATASET, row_id(number), 1)
        result = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert result.rollout is not None
        assert traced[f"svc/{DATASET}/{row_id(number)}__1"] == result.rollout.trace_id

    job_result = JobResult.from_json(store.get_bytes(job_prefix("", JOB) + "result.json"))
    assert job_result.total_trials == 2 * len(numbers)

    # No secret value in any resource or stored file.
    resources = json.dumps([*trials, *pods.values()])
    stored = b"".join(store.get_bytes(k) for k in store.list_keys(job_prefix("", JOB)))
    for secret in (HEADER_VALUE, "endpoint-token-5c1d", MODEL_KEY):
        assert secret not in resources
        assert secret.encode() not in stored
