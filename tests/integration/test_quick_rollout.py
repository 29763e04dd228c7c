"""Seed 002's in-process entry points against an OpenAI-compatible server on loopback:
`quick_rollout` (one question, no cluster) and `AgentRunner` (start, run_task, stop), with
their scoring by a metric and by an llm_judgement evaluator on a second server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from chat_kit import API_KEY, ChatServer, Reply, chat_server, completion, tool_call, usage

from rollout.api.errors import InvalidInput
from rollout.python_api.agent_runner import AgentRunner, TaskResult
from rollout.python_api.config import RolloutConfig
from rollout.python_api.quick import quick_rollout
from rollout.python_api.tasks import load_tasks
from rollout_runner.model_agent import DEFAULT_SYSTEM_PROMPT

pytestmark = pytest.mark.integration

EVALUATOR_KEY = "sk-evaluator-test-key-51c9e0d2-never-print-me"
RESULT_FIELDS = {
    "task_id",
    "question",
    "predicted_answer",
    "success",
    "ground_truth",
    "score",
    "error",
    "trajectory",
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with chat_server() as chat:
        yield chat


@pytest.fixture
def evaluator() -> Iterator[ChatServer]:
    with chat_server() as chat:
        yield chat


# --- quick_rollout ----------------------------------------------------------------------------


def test_quick_rollout_answers_in_process(server: ChatServer) -> None:
    server.queue(completion("<answer>Paris</answer>", usage=usage(12, 5)))
    result = quick_rollout(
        "What is the capital of France?",
        model_name="gpt-test",
        api_key=API_KEY,
        base_url=server.base_url,
        temperature=0.2,
    )

    assert set(result) == {"question", "answer", "success", "error", "trajectory"}
    assert result["question"] == "What is the capital of France?"
    assert result["answer"] == "Paris"
    assert result["success"] is True
    assert result["error"] is None
    trajectory = result["trajectory"]
    assert trajectory["final_answer"] == "Paris"
    assert trajectory["total_turns"] == 1
    assert trajectory["usage"] == {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    [seen] = server.seen
    assert seen.headers["Authorization"] == f"Bearer {API_KEY}"
    assert seen.body["model"] == "gpt-test"
    assert seen.body["temperature"] == 0.2
    assert seen.body["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    json.dumps(result)  # plain data


def test_quick_rollout_takes_a_system_prompt_and_no_key(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    result = quick_rollout(
        "Capital of France?", base_url=server.base_url, system_prompt="One word only."
    )
    assert result["answer"] == "Paris"
    [seen] = server.seen
    assert "Authorization" not in seen.headers
    assert seen.body["model"] == "gpt-4.1-2025-04-14"  # seed 002's default
    assert seen.body["messages"][0] == {"role": "system", "content": "One word only."}


def test_quick_rollout_stops_at_max_turns(server: ChatServer) -> None:
    server.queue(completion(None, tool_calls=[tool_call("c1", "web:search", {"q": "x"})]))
    result = quick_rollout("Capital of France?", base_url=server.base_url, max_turns=2)
    assert result["success"] is False
    assert result["answer"] is None
    assert result["error"] == "no final answer within 2 turns"
    assert result["trajectory"]["total_turns"] == 2
    assert len(server.seen) == 2
    assert [m["role"] for m in result["trajectory"]["messages"]].count("tool") == 2


def test_quick_rollout_reports_a_refusal_without_the_key(server: ChatServer) -> None:
    server.queue(Reply(status=401, body=f'{{"error": "bad key {API_KEY}"}}'.encode()))
    result = quick_rollout("Capital of France?", base_url=server.base_url, api_key=API_KEY)
    assert result["success"] is False
    assert "answered HTTP 401" in result["error"]
    assert API_KEY not in json.dumps(result)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tools": ["web:search", "web:browse"]}, "tools given"),
        ({"sandbox_url": "http://127.0.0.1:18890"}, "sandbox_url given"),
        ({"tools": ["web:search"], "sandbox_url": "http://x"}, "tools and sandbox_url given"),
    ],
)
def test_quick_rollout_refuses_sandbox_tools(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match="sandbox server are not supported") as raised:
        quick_rollout("Capital of France?", base_url="http://model.invalid/v1", **kwargs)
    assert named in str(raised.value)


def test_quick_rollout_with_no_tools_listed_is_fine(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    assert quick_rollout("Capital?", base_url=server.base_url, tools=[])["success"] is True


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"question": "  "}, "the question is empty"),
        ({"temperature": 3.0}, "temperature 3.0 is not in 0.0-2.0"),
        ({"max_turns": 0}, "max_turns 0"),
        ({"base_url": "localhost:8000/v1"}, "is not an http"),
    ],
)
def test_quick_rollout_refuses_settings_it_cannot_use(kwargs: dict[str, Any], problem: str) -> None:
    question = kwargs.pop("question", "Capital?")
    with pytest.raises(ValueError, match=problem):
        quick_rollout(question, **kwargs)


# --- AgentRunner ------------------------------------------------------------------------------


def config(server: ChatServer, **keys: Any) -> RolloutConfig:
    values: dict[str, Any] = {
        "model_name": "gpt-test",
        "base_url": server.base_url,
        "api_key": API_KEY,
        "max_turns": 4,
    }
    values.update(keys)
    return RolloutConfig.from_mapping(values)


async def test_run_task_needs_a_started_runner(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    runner = AgentRunner(config(server), worker_id="w1")
    task = {"id": "q1", "question": "Capital of France?", "answer": "Paris"}
    with pytest.raises(RuntimeError, match="before start"):
        await runner.run_task(task)
    await runner.start()
    await runner.run_task(task)
    await runner.stop()
    with pytest.raises(RuntimeError, match="after stop"):
        await runner.run_task(task)
    with pytest.raises(RuntimeError, match="cannot start again"):
        await runner.start()
    assert len(server.seen) == 1


async def test_run_task_answers_and_scores_the_seeds_rows(server: ChatServer) -> None:
    server.queue(
        completion(None, tool_calls=[tool_call("c1", "web:search", {"q": "France"})]),
        completion("<answer>Paris</answer>", usage=usage(40, 6)),
        completion("It is Madrid."),
    )
    tasks = load_tasks(
        [
            {"id": "task_001", "question": "What is the capital of France?", "answer": "Paris"},
            {"task_id": "task_002", "query": "Capital of Spain?", "expected": "Madrid"},
        ]
    )
    runner = AgentRunner(config(server, evaluation_metric="contains_answer"), worker_id="w1")
    await runner.start()
    try:
        first = await runner.run_task(tasks[0])
        second = await runner.run_task(tasks[1])
    finally:
        await runner.stop()

    assert isinstance(first, TaskResult)
    assert set(first.to_dict()) == RESULT_FIELDS
    assert first.task_id == "task_001"
    assert first.question == "What is the capital of France?"
    assert first.predicted_answer == "Paris"
    assert first.success is True
    assert first.ground_truth == "Paris"
    assert first.score == 1.0
    assert first.error is None
    assert first.trajectory["task_id"] == "task_001"
    assert first.trajectory["total_turns"] == 2
    assert first.trajectory["tool_calls"][0]["name"] == "web:search"
    assert first.trajectory["usage"]["total_tokens"] == 46

    assert second.task_id == "task_002"
    assert second.predicted_answer == "It is Madrid."
    assert second.score == 1.0  # contains_answer
    assert server.seen[-1].body["messages"][1] == {"role": "user", "content": "Capital of Spain?"}
    json.dumps(first.to_dict())


async def test_run_task_takes_a_dict_and_scores_by_the_metric(server: ChatServer) -> None:
    server.queue(completion("Paris, France"))
    runner = AgentRunner(config(server, evaluation_metric="exact_match"))
    await runner.start()
    result = await runner.run_task(
        {"id": 7, "input": "Capital of France?", "ground_truth": "Paris"}
    )
    assert result.task_id == "7"
    assert result.predicted_answer == "Paris, France"
    assert result.score == 0.0  # not an exact match
    assert result.success is True


async def test_without_evaluation_or_ground_truth_there_is_no_score(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    runner = AgentRunner(config(server, evaluate_results=False))
    await runner.start()
    result = await runner.run_task({"id": "a", "question": "Capital?", "answer": "Paris"})
    assert result.score is None
    runner = AgentRunner(config(server))
    await runner.start()
    result = await runner.run_task({"id": "b", "question": "Capital?"})
    assert result.score is None
    assert result.ground_truth is None
    assert result.success is True


async def test_a_task_without_an_answer_fails_and_scores_zero(server: ChatServer) -> None:
    server.queue(Reply(status=400, body=f'{{"error": "no, {API_KEY}"}}'.encode()))
    runner = AgentRunner(config(server))
    await runner.start()
    result = await runner.run_task({"id": "q1", "question": "Capital?", "answer": "Paris"})
    assert result.success is False
    assert result.predicted_answer is None
    assert result.score == 0.0
    assert result.error is not None
    assert "answered HTTP 400" in result.error
    assert API_KEY not in json.dumps(result.to_dict())
    assert API_KEY not in repr(runner)


async def test_tasks_run_side_by_side(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    runner = AgentRunner(config(server))
    await runner.start()
    rows = [{"id": f"q{n}", "question": "Capital?", "answer": "Paris"} for n in range(4)]
    results = await asyncio.gather(*(runner.run_task(row) for row in rows))
    assert [r.task_id for r in results] == ["q0", "q1", "q2", "q3"]
    assert all(r.score == 1.0 for r in results)


async def test_llm_judgement_scores_through_the_evaluator(
    server: ChatServer, evaluator: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EVALUATOR_KEY", EVALUATOR_KEY)
    server.queue(completion("The capital is Paris."))
    evaluator.queue(completion("Right city.\nSCORE: 0.9"))
    runner = AgentRunner(
        config(
            server,
            evaluation_metric="llm_judgement",
            evaluator_model_name="judge-model",
            evaluator_base_url=evaluator.base_url,
            evaluator_api_key="${TEST_EVALUATOR_KEY}",
            evaluator_extra_params={"max_tokens": 64},
        )
    )
    await runner.start()
    result = await runner.run_task(
        {"id": "q1", "question": "Capital of France?", "answer": "Paris"}
    )

    assert result.score == 0.9
    assert result.error is None
    [judged] = evaluator.seen
    assert judged.headers["Authorization"] == f"Bearer {EVALUATOR_KEY}"
    assert judged.body["model"] == "judge-model"
    assert judged.body["max_tokens"] == 64
    assert "The capital is Paris." in judged.body["messages"][1]["content"]


async def test_an_evaluator_without_a_score_leaves_the_task_unscored(
    server: ChatServer, evaluator: ChatServer
) -> None:
    server.queue(completion("Paris"))
    evaluator.queue(completion("Looks fine to me."))
    runner = AgentRunner(
        config(
            server,
            evaluation_metric="llm_judgement",
            evaluator_model_name="judge-model",
            evaluator_base_url=evaluator.base_url,
        )
    )
    await runner.start()
    result = await runner.run_task({"id": "q1", "question": "Capital?", "answer": "Paris"})
    assert result.success is True
    assert result.score is None
    assert result.error is not None
    assert "holds no score" in result.error


def test_llm_judgement_needs_the_evaluator(server: ChatServer) -> None:
    with pytest.raises(InvalidInput) as raised:
        AgentRunner(config(server, evaluation_metric="llm_judgement"))
    fields = [problem.field for problem in raised.value.problems]
    assert fields == ["evaluator_model_name", "evaluator_base_url"]


async def test_a_key_reference_is_taken_from_the_environment(
    server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_MODEL_KEY", API_KEY)
    monkeypatch.delenv("TEST_UNSET_KEY", raising=False)
    server.queue(completion("Paris"))
    runner = AgentRunner(config(server, api_key="${TEST_MODEL_KEY}"))
    await runner.start()
    await runner.run_task({"id": "q1", "question": "Capital?"})
    assert server.seen[0].headers["Authorization"] == f"Bearer {API_KEY}"

    unset = AgentRunner(config(server, api_key="${TEST_UNSET_KEY}"))
    with pytest.raises(InvalidInput, match=r"api_key: refers to \$\{TEST_UNSET_KEY\}"):
        await unset.start()


async def test_the_system_prompt_file_is_read_when_the_runner_starts(
    server: ChatServer, tmp_path: Path
) -> None:
    prompt = tmp_path / "system.txt"
    prompt.write_text("You answer with a city name.", encoding="utf-8")
    server.queue(completion("Paris"))
    runner = AgentRunner(config(server, system_prompt_file=str(prompt)))
    await runner.start()
    await runner.run_task({"id": "q1", "question": "Capital?"})
    system = server.seen[0].body["messages"][0]
    assert system == {"role": "system", "content": "You answer with a city name."}

    missing = AgentRunner(config(server, system_prompt_file=str(tmp_path / "none.txt")))
    with pytest.raises(InvalidInput, match="system_prompt_file"):
        await missing.start()


async def test_any_object_with_the_seeds_keys_is_a_config(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    plain = SimpleNamespace(
        model_name="gpt-test",
        base_url=server.base_url,
        api_key=API_KEY,
        max_turns=3,
        system_prompt="",
        evaluator_api_key=None,  # None is the default
        evaluation_metric="exact_match",
    )
    runner = AgentRunner(plain, worker_id="plain")
    await runner.start()
    result = await runner.run_task({"id": "q1", "question": "Capital?", "answer": "paris"})
    assert result.score == 1.0
    assert server.seen[0].body["model"] == "gpt-test"


def test_the_sandbox_tools_are_refused_by_name(server: ChatServer) -> None:
    plain = SimpleNamespace(
        model_name="gpt-test", base_url=server.base_url, available_tools=["web:search"]
    )
    with pytest.raises(InvalidInput) as raised:
        AgentRunner(plain)
    assert [problem.field for problem in raised.value.problems] == ["available_tools"]
    with pytest.raises(InvalidInput, match="sandbox_auto_start"):
        AgentRunner({"model_name": "m", "sandbox_auto_start": True})


async def test_a_task_that_is_not_a_row_is_refused_by_field(server: ChatServer) -> None:
    runner = AgentRunner(config(server))
    await runner.start()
    with pytest.raises(InvalidInput) as raised:
        await runner.run_task({"id": "q1", "answer": "Paris"})
    [problem] = raised.value.problems
    assert problem.file == "run_task(task)"
    assert problem.field == "question"
    with pytest.raises(TypeError, match="not a str"):
        await runner.run_task("What is the capital of France?")  # type: ignore[arg-type]
    assert server.seen == []
