"""Endpoint agents (seed 003), and a model agent on a task, run by the real runner against HTTP
servers on loopback written in the tests: data rows in a runner-only shard (no environment),
and a task in a fake container whose verifier scores the answer the runner wrote to
/logs/agent/.

The server plays one behaviour per row (chosen by the row id at the end of `attempt.id`) and
records every request it got: the exact payload, the headers (the Secret-backed Authorization,
a literal one, `traceparent`), how many times each row was asked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_kit import API_KEY, chat_server, completion, tool_call, usage
from json_server import JsonServer, Reply, Request, json_server
from runner_kit import (
    DATASET,
    JOB,
    make_spec,
    publish_task,
    run_in_fake_container,
    trial_objects,
)
from test_runner_shards import publish_rows, row_files, shard_spec, write_dataset

from fakecontainer import requires_fake_container
from rollout.api.errors import ErrorType
from rollout.api.layout import job_prefix
from rollout.api.results import TrialResult
from rollout.api.tracecontext import parse_traceparent
from rollout.storage import ObjectStore
from rollout_runner.context import RunnerOptions
from rollout_runner.environment import NoEnvironment
from rollout_runner.shard import run_shard
from rollout_runner.spec import resolve_agent_env

pytestmark = pytest.mark.integration

AGENT = "service"
TOKEN = "s3cr3t-token-4f9a"
SECRET_HEADER = f"Bearer {TOKEN}"

ROWS = [
    {"id": "score", "question": "Capital of France?", "answer": "Paris", "kwargs": {"k": 1}},
    {"id": "nested", "question": "Capital of France?", "answer": "Paris"},
    {"id": "passed", "question": "Capital of France?", "answer": "Paris"},
    {"id": "plain", "question": "Capital of France?", "answer": "Paris", "level": "easy"},
    {"id": "no-truth", "question": "Say anything"},
    {"id": "unauthorized", "question": "Q", "answer": "A"},
    {"id": "flaky", "question": "Capital of France?", "answer": "Paris"},
    {"id": "broken", "question": "Q", "answer": "A"},
    {"id": "slow", "question": "Q", "answer": "A"},
    {"id": "not-json", "question": "Q", "answer": "A"},
    {"id": "no-output", "question": "Q", "answer": "A"},
]


def row_of(request: Request) -> str:
    """The row an endpoint request is for: the end of its `attempt.id`."""
    return str(request.body["attempt"]["id"]).rsplit("/", 1)[-1].removesuffix("__1")


def asked(server: JsonServer, row: str) -> list[Request]:
    return [request for request in server.seen if row_of(request) == row]


def reply_for(request: Request, asked_before: int) -> Reply:
    """The row's behaviour."""
    replies: dict[str, tuple[int, Any]] = {
        "score": (200, {"output": "Paris", "score": 0.25}),
        "nested": (200, {"output": "Lyon", "score": {"score": 0.9}, "passed": True}),
        "passed": (200, {"output": "Paris", "passed": False}),
        "plain": (200, {"output": " Paris "}),
        "no-truth": (200, {"output": "anything", "score": 0.7}),
        "task": (200, {"output": "42", "passed": True}),
        "no-output": (200, {"score": 1}),
        "broken": (500, {"error": "the agent crashed"}),
        # An endpoint that shows what it was sent: the runner must scrub it.
        "unauthorized": (401, {"detail": f"bad token: {request.headers['authorization']}"}),
    }
    row = row_of(request)
    if row == "flaky" and asked_before == 0:
        return Reply(429, {"error": "slow down"}, {"Retry-After": "0"})
    if row == "flaky":
        return Reply(200, {"output": "Paris"})
    if row == "slow":
        return Reply(200, {"output": "too late"}, delay_sec=3.0)
    if row == "not-json":
        return Reply(200, b"<html>oops</html>")
    return Reply(*replies[row])


@pytest.fixture
def endpoint() -> Iterator[JsonServer]:
    server: JsonServer

    def respond(request: Request) -> Reply:
        return reply_for(request, len(asked(server, row_of(request))) - 1)

    with json_server(respond) as server:
        yield server


def endpoint_agent(url: str, timeout_sec: float = 1.0) -> dict[str, Any]:
    return {
        "endpoint": url,
        "timeoutSec": timeout_sec,
        "headers": [
            {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "X-Team", "value": "evals"},
        ],
    }


def everything_under(store: ObjectStore, prefix: str) -> bytes:
    return b"".join(store.get_bytes(key) for key in store.list_keys(prefix))


async def test_rows_are_posted_seed_003_payloads_and_each_reply_shape_is_recorded(
    tmp_path: Path, fast_retry_store: ObjectStore, endpoint: JsonServer
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS))
    ids = [r["id"] for r in ROWS]
    spec = shard_spec(
        store,
        content_hash,
        verifier,
        ids,
        agent=AGENT,
        execute=None,  # type: ignore[arg-type]
        spec_fields={"agent_fields": endpoint_agent(f"{endpoint.url}/rollout/eval")},
    )
    assert not spec.needs_environment  # the Pod holds the runner alone
    agent_env = resolve_agent_env(spec.agent, {"ROLLOUT_AGENT_HEADER_0": SECRET_HEADER})
    report = await run_shard(
        spec,
        NoEnvironment(),
        store,
        agent_env=agent_env,
        options=RunnerOptions(work_dir=tmp_path / "work", upload_timeout_sec=30.0),
    )
    assert (report.upload_errors, report.error) == ([], None)
    results = {
        row: TrialResult.from_json(row_files(store, row, AGENT)["result.json"]) for row in ids
    }

    def error_of(row: str) -> tuple[ErrorType | None, str]:
        error = results[row].error
        return (error.type, error.message) if error else (None, "")

    # The exact payload, every key, and the headers.
    (seen,) = asked(endpoint, "score")
    trace_id = results["score"].rollout.trace_id  # type: ignore[union-attr]
    assert trace_id is not None
    attempt = f"{AGENT}/{DATASET}/score__1"
    assert seen.body == {
        "benchmark": {"id": DATASET, "name": DATASET},
        "run": {"id": JOB},
        "attempt": {"id": attempt, "traceId": trace_id},
        "task": {
            "instruction": "Capital of France?",
            "input": {"question": "Capital of France?", "kwargs": {"k": 1}},
            "metadata": {},
        },
        "trace": {"context": {"run_id": JOB, "rollout_id": attempt, "trace_id": trace_id}},
    }
    assert seen.headers["authorization"] == SECRET_HEADER
    assert seen.headers["x-team"] == "evals"
    assert seen.headers["content-type"] == "application/json"
    traceparent = parse_traceparent(seen.headers["traceparent"])
    assert traceparent is not None
    assert traceparent.trace_id == trace_id
    assert asked(endpoint, "plain")[0].body["task"]["metadata"] == {"level": "easy"}
    # A fresh trace per attempt.
    traces = {r.rollout.trace_id for r in results.values() if r.rollout}
    assert len(traces) == len(ids)

    # Each reply shape: the row's metric gives the reward, the endpoint's score is kept beside.
    def evaluation(row: str) -> dict[str, Any] | None:
        additions = results[row].model_dump(mode="json")["rollout"]
        return additions.get("evaluation")

    assert (results["score"].reward, evaluation("score")) == (1, {"score": 0.25, "passed": None})
    assert (results["nested"].reward, evaluation("nested")) == (0, {"score": 0.9, "passed": True})
    assert (results["passed"].reward, evaluation("passed")) == (1, {"score": None, "passed": False})
    assert (results["plain"].reward, evaluation("plain")) == (1, None)
    # No ground truth to compare: the endpoint's score is the reward.
    assert (results["no-truth"].reward, error_of("no-truth")) == (0.7, (None, ""))
    line = json.loads(row_files(store, "score", AGENT)["row.json"])
    assert line["predicted_answer"] == "Paris"
    assert line["rollout"]["trace_id"] == trace_id
    assert line["rollout"]["evaluation"] == {"score": 0.25, "passed": None}
    files = row_files(store, "score", AGENT)
    assert json.loads(files["logs/agent/request.json"]) == seen.body
    assert json.loads(files["logs/agent/response.json"]) == {"output": "Paris", "score": 0.25}
    assert files["logs/agent/answer.txt"] == b"Paris"

    # Failures, each with its type and a message saying what happened.
    kind, message = error_of("unauthorized")
    assert kind is ErrorType.AGENT_EXECUTION_FAILED
    assert "HTTP 401" in message
    assert "bad token" in message
    assert len(asked(endpoint, "unauthorized")) == 1  # a 401 is not retried
    assert (results["flaky"].reward, len(asked(endpoint, "flaky"))) == (1, 2)  # 429, then 200
    kind, message = error_of("broken")
    assert kind is ErrorType.AGENT_EXECUTION_FAILED
    assert "HTTP 500" in message
    assert "4 time(s)" in message
    assert len(asked(endpoint, "broken")) == 4  # the first try and three retries
    kind, message = error_of("slow")
    assert kind is ErrorType.AGENT_EXECUTION_TIMEOUT
    assert "no answer within 1 seconds" in message  # the request's limit, not the attempt's
    assert len(asked(endpoint, "slow")) == 1  # a request that timed out is never sent again
    kind, message = error_of("not-json")
    assert (kind, "not JSON" in message) == (ErrorType.AGENT_EXECUTION_FAILED, True)
    kind, message = error_of("no-output")
    assert (kind, "no 'output'" in message) == (ErrorType.AGENT_EXECUTION_FAILED, True)
    for row in ("unauthorized", "broken", "slow", "not-json", "no-output"):
        assert results[row].reward is None
        assert json.loads(row_files(store, row, AGENT)["row.json"])["success"] is False

    # The Secret-backed header (and its token alone) is nowhere in what the runner wrote.
    written = everything_under(store, job_prefix(store.prefix, JOB))
    assert TOKEN.encode() not in written
    assert b"***" in row_files(store, "unauthorized", AGENT)["error.txt"]


@requires_fake_container()
async def test_a_task_asks_the_endpoint_and_its_verifier_scores_the_answer(
    tmp_path: Path, fast_retry_store: ObjectStore, endpoint: JsonServer
) -> None:
    store = fast_retry_store
    content_hash = publish_task(store, "endpoint-answer")
    spec = make_spec(
        store,
        "task",  # the server answers "42" to the row id "task"
        content_hash,
        agent=AGENT,
        agent_fields=endpoint_agent(f"{endpoint.url}/rollout/eval", timeout_sec=5.0),
    )
    assert spec.needs_environment  # the task's verifier runs in it
    agent_env = resolve_agent_env(spec.agent, {"ROLLOUT_AGENT_HEADER_0": SECRET_HEADER})
    report = await run_in_fake_container(tmp_path, spec, store, agent_env=agent_env)
    result = report.result
    assert result.error is None
    assert result.reward == 1  # the task's verifier read /logs/agent/answer.txt
    assert result.model_dump(mode="json")["rollout"]["evaluation"] == {
        "score": None,
        "passed": True,
    }
    (seen,) = asked(endpoint, "task")
    task = seen.body["task"]
    assert task["instruction"].startswith("What is six times seven?")
    assert task["input"] == {}
    assert task["metadata"]["category"] == "arithmetic"
    assert result.durations.agent_execution_sec is not None
    assert result.durations.agent_setup_sec is None  # nothing to install


@requires_fake_container()
async def test_a_model_agent_answers_a_task_and_its_verifier_scores_the_answer(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    """The same task with a model agent: the runner converses with the model (here after one
    tool call it cannot make), writes the final answer to /logs/agent/answer.txt with the
    trajectory, and the task's verifier scores it."""
    store = fast_retry_store
    content_hash = publish_task(store, "endpoint-answer")
    with chat_server() as server:
        server.queue(
            completion(None, tool_calls=[tool_call("c1", "calculator", {"x": "6*7"})]),
            completion("<answer>42</answer>", usage=usage(30, 5)),
        )
        spec = make_spec(
            store,
            "task",
            content_hash,
            agent="llm",
            agent_fields={
                "model": {
                    "name": "test-model",
                    "baseUrl": server.base_url,
                    "apiKey": {"name": "s", "key": "k"},
                    "maxTurns": 3,
                }
            },
        )
        agent_env = resolve_agent_env(spec.agent, {"ROLLOUT_AGENT_MODEL_API_KEY": API_KEY})
        report = await run_in_fake_container(tmp_path, spec, store, agent_env=agent_env)
    result = report.result
    assert result.error is None
    assert result.reward == 1
    additions = result.model_dump(mode="json")["rollout"]
    assert additions["usage"] == {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}
    first, second = server.seen
    assert first.body["messages"][-1]["content"].startswith("What is six times seven?")
    assert second.body["messages"][-1]["role"] == "tool"  # no tools here, said to the model
    traceparent = parse_traceparent(first.headers["traceparent"])
    assert traceparent is not None
    assert traceparent.trace_id == additions["trace_id"]
    files = trial_objects(store, spec)
    trajectory = json.loads(files["logs/agent/trajectory.json"])
    assert (trajectory["total_turns"], trajectory["final_answer"]) == (2, "42")
    assert files["logs/agent/answer.txt"] == b"42"
    assert API_KEY.encode() not in b"".join(files.values())
