"""Endpoint and model agents in job.yaml and the RolloutJob: what each kind may combine, the
`${VAR}`s of headers and of a model's key (resolved, put in the Secret, given back), seed 003's
payload and reply, and W3C trace contexts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout.api.endpoint import (
    EndpointEvaluation,
    ReplyRefused,
    attempt_id,
    endpoint_payload,
    read_reply,
)
from rollout.api.envrefs import resolve_agent_env
from rollout.api.errors import InvalidInput
from rollout.api.job import load_job, parse_job
from rollout.api.resources import DatasetRef, RolloutTrialSpec
from rollout.api.service_agents import AgentKind
from rollout.api.tracecontext import TraceContext, parse_traceparent
from rollout.api.translate import job_to_rollout_job, rollout_job_to_job
from rollout.api.wire.spec import agent_secret_carriers

ENDPOINT = {
    "name": "svc",
    "endpoint": "https://agent.example.com/rollout/eval",
    "headers": {"Authorization": "Bearer ${AGENT_RUN_TOKEN}", "X-Team": "evals"},
    "timeout_sec": 30,
}
MODEL = {
    "name": "gpt",
    "model": {
        "name": "gpt-4.1-mini",
        "api_key": "${OPENAI_API_KEY}",
        "max_turns": 5,
        "extra_params": {"max_tokens": 64},
    },
}
DIGEST = "a" * 64


def job(*agents: dict[str, Any]) -> dict[str, Any]:
    return {"name": "svc-job", "agents": list(agents), "datasets": [{"path": "rows"}]}


def problems(*agents: dict[str, Any]) -> list[tuple[str | None, str]]:
    with pytest.raises(InvalidInput) as caught:
        parse_job(job(*agents))
    return [(p.field, p.message) for p in caught.value.problems]


def test_each_kind_of_agent_is_told_apart() -> None:
    parsed = parse_job(job({"name": "oracle"}, {"name": "s", "execute": "x"}, ENDPOINT, MODEL))
    assert [a.kind for a in parsed.agents] == [
        AgentKind.ORACLE,
        AgentKind.SCRIPT,
        AgentKind.ENDPOINT,
        AgentKind.MODEL,
    ]
    endpoint, model = parsed.agents[2], parsed.agents[3]
    assert endpoint.request_timeout_sec == 30
    assert parse_job(job({**ENDPOINT, "timeout_sec": None})).agents[0].request_timeout_sec == 60
    assert model.model is not None
    assert model.model.base_url == "https://api.openai.com/v1"  # seed 002's provider
    assert (model.model.temperature, model.model.max_retries) == (0.0, 3)


@pytest.mark.parametrize(
    ("agent", "field", "words"),
    [
        ({"name": "a"}, "agents[0].execute", "needs an 'execute' script, an 'endpoint' or a"),
        ({**ENDPOINT, "execute": "x"}, "agents[0].endpoint", "one of: a script, an endpoint"),
        ({**MODEL, "endpoint": "http://x"}, "agents[0].model", "one of"),
        ({**ENDPOINT, "install": "pip install x"}, "agents[0].install", "only a script agent"),
        ({"name": "oracle", "endpoint": "http://x"}, "agents[0].endpoint", "takes no 'endpoint'"),
        ({"name": "oracle", "model": {"name": "m"}}, "agents[0].model", "takes no 'model'"),
        (
            {"name": "s", "execute": "x", "headers": {"A": "b"}},
            "agents[0].headers",
            "only an endpoint agent",
        ),
        ({"name": "s", "execute": "x", "timeout_sec": 5}, "agents[0].timeout_sec", "request"),
        ({**ENDPOINT, "endpoint": "ftp://x/y"}, "agents[0].endpoint", "not an http://"),
        ({**ENDPOINT, "timeout_sec": 0}, "agents[0].timeout_sec", "positive"),
        ({**ENDPOINT, "headers": {"Bad Name": "x"}}, "agents[0].headers.Bad Name", "header name"),
        ({**ENDPOINT, "headers": {"traceparent": "x"}}, "agents[0].headers.traceparent", "runner"),
        ({**ENDPOINT, "headers": {"X": 5}}, "agents[0].headers.X", "must be strings"),
        ({**ENDPOINT, "headers": {"X": "${bad-ref}"}}, "agents[0].headers.X", "unsupported"),
        (
            {"name": "m", "model": {"name": "m", "api_key": "sk-literal"}},
            "agents[0].model.api_key",
            "${VAR} reference",
        ),
        (
            {"name": "m", "model": {"name": "m", "available_tools": ["web:search"]}},
            "agents[0].model.available_tools",
            "sandbox server are not supported",
        ),
        (
            {"name": "m", "model": {"name": "m", "sandbox_server_url": "http://x"}},
            "agents[0].model.sandbox_server_url",
            "not supported",
        ),
        (
            {"name": "m", "model": {"name": "m", "extra_params": {"messages": []}}},
            "agents[0].model.extra_params",
            "may not set messages",
        ),
        (
            {"name": "m", "model": {"name": "m", "temperature": 3}},
            "agents[0].model.temperature",
            "less than or equal to 2",
        ),
        (
            {"name": "m", "model": {"name": "m", "system_prompt": "a", "system_prompt_file": "b"}},
            "agents[0].model.system_prompt_file",
            "not both",
        ),
        (
            {"name": "m", "model": {"name": "m", "base_url": "api.x"}},
            "agents[0].model.base_url",
            "http",
        ),
    ],
)
def test_what_an_agent_may_not_combine_is_refused_naming_the_field(
    agent: dict[str, Any], field: str, words: str
) -> None:
    found = problems(agent)
    assert len(found) == 1, found
    assert found[0][0] == field
    assert words in found[0][1]


def test_header_and_model_key_references_resolve_and_unset_ones_are_named() -> None:
    parsed = parse_job(job(ENDPOINT, MODEL))
    resolved = resolve_agent_env(parsed, {"AGENT_RUN_TOKEN": "tok", "OPENAI_API_KEY": "sk-1"})
    assert resolved == {
        "svc": {"header:Authorization": "Bearer tok", "header:X-Team": "evals"},
        "gpt": {"model:api_key": "sk-1"},
    }
    with pytest.raises(InvalidInput) as caught:
        resolve_agent_env(parsed, {}, file="job.yaml")
    assert [(p.field, p.message) for p in caught.value.problems] == [
        (
            "agents[0].headers.Authorization",
            "environment variable AGENT_RUN_TOKEN is not set (agent 'svc' takes "
            "headers.Authorization from ${AGENT_RUN_TOKEN})",
        ),
        (
            "agents[1].model.api_key",
            "environment variable OPENAI_API_KEY is not set (agent 'gpt' takes model.api_key "
            "from ${OPENAI_API_KEY})",
        ),
    ]


def test_secrets_go_to_the_secret_and_the_resource_gives_job_yaml_back() -> None:
    parsed = parse_job(job(ENDPOINT, MODEL))
    environ = {"AGENT_RUN_TOKEN": "tok-123", "OPENAI_API_KEY": "sk-abc"}
    rollout_job, secret = job_to_rollout_job(
        parsed,
        namespace="evals",
        datasets=[DatasetRef(name="rows", digest=DIGEST)],
        environ=environ,
    )
    manifest = json.dumps(rollout_job.manifest())
    assert "tok-123" not in manifest
    assert "sk-abc" not in manifest
    assert secret is not None
    assert sorted(secret["data"]) == ["gpt.model.api-key", "svc.header.Authorization"]
    svc, gpt = rollout_job.spec.agents
    assert [(h.name, h.value) for h in svc.headers] == [
        ("Authorization", None),
        ("X-Team", "evals"),
    ]
    assert gpt.model is not None
    assert gpt.model.api_key is not None
    assert gpt.model.api_key.key == "gpt.model.api-key"
    # The runner variables that carry them, as the operator sets them from the Secret.
    assert [(c.variable, c.selector.key) for c in agent_secret_carriers(svc)] == [
        ("ROLLOUT_AGENT_HEADER_0", "svc.header.Authorization")
    ]
    assert [(c.variable, c.selector.key) for c in agent_secret_carriers(gpt)] == [
        ("ROLLOUT_AGENT_MODEL_API_KEY", "gpt.model.api-key")
    ]
    assert rollout_job_to_job(rollout_job).agents == parsed.agents


def test_a_header_name_that_is_no_secret_key_gets_a_safe_distinct_key() -> None:
    agent = {**ENDPOINT, "headers": {"X~A": "${T}", "X-A": "${T}"}}
    _, secret = job_to_rollout_job(
        parse_job(job(agent)),
        namespace="evals",
        datasets=[DatasetRef(name="rows", digest=DIGEST)],
        environ={"T": "t"},
    )
    assert secret is not None
    keys = sorted(secret["data"])
    assert len(keys) == 2
    assert "svc.header.X-A" in keys
    assert all(
        set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._")
        for k in keys
    )


def test_a_system_prompt_file_is_read_relative_to_the_job_file(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "system.txt").write_text("Answer in one word.\n")
    agent = {"name": "m", "model": {"name": "m", "system_prompt_file": "prompts/system.txt"}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(agent)))
    model = load_job(path).agents[0].model
    assert model is not None
    assert (model.system_prompt, model.system_prompt_file) == ("Answer in one word.\n", None)

    agent["model"]["system_prompt_file"] = "prompts/missing.txt"  # type: ignore[index]
    path.write_text(yaml.safe_dump(job(agent)))
    with pytest.raises(InvalidInput) as caught:
        load_job(path)
    (problem,) = caught.value.problems
    assert problem.field == "agents[0].model.system_prompt_file"
    assert "missing.txt" in problem.message
    assert "cannot be read" in problem.message


def test_rows_answered_by_an_endpoint_or_a_model_need_no_environment() -> None:
    spec = {
        "jobName": "j",
        "datasetName": "d",
        "taskName": "shard-1",
        "attempt": 1,
        "image": "runner:1",
        "resources": {"cpus": "1", "memory": "1G", "storage": "1G"},
        "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 1},
        "storage": {"bucket": "b"},
        "runnerImage": "runner:1",
        "rows": {
            "number": 1,
            "items": [{"id": "r1", "attempt": 1}],
            "verifier": {"kind": "metric", "metric": "exact_match"},
        },
    }
    agents = {
        "script": {"name": "s", "execute": "x"},
        "oracle": {"name": "oracle"},
        "endpoint": {"name": "e", "endpoint": "http://e"},
        "model": {"name": "m", "model": {"name": "m"}},
    }
    needs = {
        kind: RolloutTrialSpec.model_validate({**spec, "agent": agent}).needs_environment
        for kind, agent in agents.items()
    }
    assert needs == {"script": True, "oracle": False, "endpoint": False, "model": False}
    task_spec = {k: v for k, v in spec.items() if k != "rows"}
    for agent in agents.values():  # a task's verifier runs in its environment, whoever answered
        assert RolloutTrialSpec.model_validate({**task_spec, "agent": agent}).needs_environment


# --- seed 003's payload and reply -----------------------------------------------------------


def test_the_payload_has_every_key_of_seed_003() -> None:
    attempt = attempt_id("svc", "gsm8k", "q17", 2)
    assert attempt == "svc/gsm8k/q17__2"
    payload = endpoint_payload(
        dataset="gsm8k",
        job="nightly",
        attempt=attempt,
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        instruction="What is 2 + 2?",
        task_input={"question": "What is 2 + 2?"},
        metadata={"level": 1},
    )
    assert payload == {
        "benchmark": {"id": "gsm8k", "name": "gsm8k"},
        "run": {"id": "nightly"},
        "attempt": {"id": attempt, "traceId": "4bf92f3577b34da6a3ce929d0e0e4736"},
        "task": {
            "instruction": "What is 2 + 2?",
            "input": {"question": "What is 2 + 2?"},
            "metadata": {"level": 1},
        },
        "trace": {
            "context": {
                "run_id": "nightly",
                "rollout_id": attempt,
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            }
        },
    }


@pytest.mark.parametrize(
    ("reply", "output", "evaluation", "reward"),
    [
        ({"output": "4"}, "4", None, None),
        ({"output": "4", "score": 0.92}, "4", (0.92, None), 0.92),
        ({"output": "4", "score": {"score": 1}}, "4", (1.0, None), 1.0),
        ({"output": "4", "passed": True}, "4", (None, True), 1.0),
        ({"output": "4", "passed": False}, "4", (None, False), 0.0),
        ({"output": "4", "score": {"score": 0.5}, "passed": True}, "4", (0.5, True), 0.5),
        ({"output": {"a": [1, "é"]}}, '{"a": [1, "é"]}', None, None),
        ({"output": 4, "score": None}, "4", None, None),
    ],
)
def test_each_reply_shape_of_seed_003_is_read(
    reply: dict[str, Any],
    output: str,
    evaluation: tuple[float | None, bool | None] | None,
    reward: float | None,
) -> None:
    read = read_reply(json.dumps(reply).encode())
    assert read.output == output
    if evaluation is None:
        assert read.evaluation is None
    else:
        assert read.evaluation == EndpointEvaluation(score=evaluation[0], passed=evaluation[1])
        assert read.evaluation.reward == reward


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"<html>", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"answer": "4"}', "no 'output'"),
        (b'{"output": null}', "no 'output'"),
        (b'{"output": "4", "score": "high"}', "'score' is 'high'"),
        (b'{"output": "4", "score": {"value": 1}}', "not a number or"),
        (b'{"output": "4", "score": true}', "'score' is True"),
        (b'{"output": "4", "passed": "yes"}', "'passed' is 'yes'"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_a_reply_that_breaks_the_contract_says_how(body: bytes, words: str) -> None:
    with pytest.raises(ReplyRefused) as caught:
        read_reply(body)
    assert words in str(caught.value)


# --- W3C trace context ----------------------------------------------------------------------


def test_trace_contexts_are_fresh_w3c_ones_and_read_back() -> None:
    traces = [TraceContext() for _ in range(50)]
    assert len({t.trace_id for t in traces}) == 50
    for trace in traces:
        parsed = parse_traceparent(trace.traceparent)
        assert parsed == trace
    assert parse_traceparent("00-" + "0" * 32 + "-" + "1" * 16 + "-01") is None  # all-zero id
    assert parse_traceparent("01-" + "a" * 32 + "-" + "1" * 16 + "-01") is None  # version
    assert parse_traceparent("not a traceparent") is None
    with pytest.raises(ValueError, match="W3C trace id"):
        TraceContext(trace_id="ABC")
