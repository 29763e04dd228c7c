"""The model agent (`rollout_runner.model_agent`) against an OpenAI-compatible server on
loopback: the requests it sends, direct and multi-turn answers, tool calls answered with "no
tools", max_turns, retries (429 with Retry-After, 5xx), client errors, foreign bodies, the
deadline, usage, and an API key that shows nowhere."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from chat_kit import API_KEY, ChatServer, Reply, chat_server, completion, tool_call, usage

from rollout_runner.chat_http import CallFailed, ChatHttp
from rollout_runner.model_agent import (
    DEFAULT_SYSTEM_PROMPT,
    NO_TOOLS_REPLY,
    ModelAnswer,
    ModelSettings,
    answer_question,
)

pytestmark = pytest.mark.integration

FAST = 0.01
"""The first backoff of the tests: retries take milliseconds."""
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
QUESTION = "What is the capital of France?"
SEED_FIELDS = {
    "task_id",
    "question",
    "messages",
    "tool_calls",
    "final_answer",
    "total_turns",
    "success",
    "start_time",
    "end_time",
    "execution_time_ms",
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with chat_server() as chat:
        yield chat


def settings(server: ChatServer, **overrides: Any) -> ModelSettings:
    values: dict[str, Any] = {
        "model": "test-model",
        "base_url": server.base_url,
        "api_key": API_KEY,
        "max_retries": 3,
        "request_timeout_sec": 10.0,
    }
    values.update(overrides)
    return ModelSettings(**values)


def ask(model: ModelSettings, **kwargs: Any) -> ModelAnswer:
    kwargs.setdefault("backoff_initial_sec", FAST)
    kwargs.setdefault("task_id", "task_001")
    return answer_question(model, QUESTION, **kwargs)


def assert_no_key(answer: ModelAnswer, caplog: pytest.LogCaptureFixture | None = None) -> None:
    for text in (repr(answer), str(answer.error), json.dumps(answer.trajectory)):
        assert API_KEY not in text
    if caplog is not None:
        assert API_KEY not in caplog.text


# --- one turn ---------------------------------------------------------------------------------


def test_a_direct_answer_is_the_final_answer(server: ChatServer) -> None:
    server.queue(completion("Paris", usage=usage(20, 3)))
    answer = ask(settings(server))

    assert answer.answer == "Paris"
    assert answer.error is None
    assert not answer.timed_out
    trajectory = answer.trajectory
    assert set(trajectory) == SEED_FIELDS | {"usage"}
    assert trajectory["task_id"] == "task_001"
    assert trajectory["question"] == QUESTION
    assert trajectory["final_answer"] == "Paris"
    assert trajectory["total_turns"] == 1
    assert trajectory["success"] is True
    assert trajectory["tool_calls"] == []
    assert trajectory["messages"] == [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "Paris"},
    ]
    started = datetime.fromisoformat(trajectory["start_time"])
    ended = datetime.fromisoformat(trajectory["end_time"])
    assert trajectory["start_time"].endswith("Z")
    assert started <= ended
    assert isinstance(trajectory["execution_time_ms"], int)
    assert 0 <= trajectory["execution_time_ms"] < 10_000
    assert answer.usage == {"input_tokens": 20, "output_tokens": 3, "total_tokens": 23}
    assert trajectory["usage"] == answer.usage

    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.body == {
        "model": "test-model",
        "messages": trajectory["messages"][:2],
        "temperature": 0.0,
    }


def test_the_answer_is_inside_the_answer_tags(server: ChatServer) -> None:
    server.queue(
        completion("Let me think. <answer>draft</answer> Final: <answer>\n Paris \n</answer>")
    )
    answer = ask(settings(server))
    assert answer.answer == "Paris"
    assert answer.trajectory["final_answer"] == "Paris"
    # the conversation keeps what the model wrote
    assert answer.trajectory["messages"][-1]["content"].startswith("Let me think.")


def test_the_settings_shape_the_request(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    model = settings(
        server,
        base_url=server.base_url + "/",  # a trailing slash is not doubled
        temperature=0.7,
        system_prompt="Answer in one word.",
        extra_params={"max_tokens": 1024, "top_p": 0.5},
    )
    ask(model, instruction="Name the capital of France.", traceparent=TRACEPARENT)

    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["Authorization"] == f"Bearer {API_KEY}"
    assert seen.headers["traceparent"] == TRACEPARENT
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.body["temperature"] == 0.7
    assert seen.body["max_tokens"] == 1024
    assert seen.body["top_p"] == 0.5
    assert seen.body["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Name the capital of France."},
    ]


def test_without_a_key_or_a_traceparent_neither_header_is_sent(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    ask(settings(server, api_key=None))
    headers = {name.lower() for name in server.seen[0].headers}
    assert "authorization" not in headers
    assert "traceparent" not in headers


# --- several turns ----------------------------------------------------------------------------


def test_tool_calls_are_answered_with_no_tools_until_the_final_answer(server: ChatServer) -> None:
    server.queue(
        completion(
            None,
            tool_calls=[tool_call("call_1", "web_search", {"query": "capital of France"})],
            usage=usage(30, 10),
        ),
        completion(
            "Trying again.",
            tool_calls=[
                tool_call("call_2", "web_browse", {"url": "https://example.org"}),
                tool_call("call_3", "web_search", {"query": "France"}),
            ],
            usage=usage(50, 12),
        ),
        completion("<answer>Paris</answer>", usage=usage(80, 4)),
    )
    answer = ask(settings(server, max_turns=5), traceparent=TRACEPARENT)

    assert answer.answer == "Paris"
    trajectory = answer.trajectory
    assert trajectory["total_turns"] == 3
    assert trajectory["success"] is True
    assert trajectory["tool_calls"] == [
        {
            "turn": 1,
            "id": "call_1",
            "name": "web_search",
            "arguments": json.dumps({"query": "capital of France"}),
        },
        {
            "turn": 2,
            "id": "call_2",
            "name": "web_browse",
            "arguments": json.dumps({"url": "https://example.org"}),
        },
        {
            "turn": 2,
            "id": "call_3",
            "name": "web_search",
            "arguments": json.dumps({"query": "France"}),
        },
    ]
    roles = [message["role"] for message in trajectory["messages"]]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    tools = [message for message in trajectory["messages"] if message["role"] == "tool"]
    assert [message["tool_call_id"] for message in tools] == ["call_1", "call_2", "call_3"]
    assert all(message["content"] == NO_TOOLS_REPLY for message in tools)
    assert "No tools are available" in NO_TOOLS_REPLY
    assert trajectory["messages"][2]["tool_calls"][0]["id"] == "call_1"
    assert trajectory["messages"][-1] == {"role": "assistant", "content": "<answer>Paris</answer>"}

    # each request carries the whole conversation so far, and the trace context
    assert len(server.seen) == 3
    assert [len(seen.body["messages"]) for seen in server.seen] == [2, 4, 7]
    assert server.seen[2].body["messages"] == trajectory["messages"][:-1]
    assert all(seen.headers["traceparent"] == TRACEPARENT for seen in server.seen)

    # usage is summed over the turns
    expected = {"input_tokens": 160, "output_tokens": 26, "total_tokens": 186}
    assert answer.usage == expected
    assert trajectory["usage"] == expected


def test_no_final_answer_within_max_turns(server: ChatServer) -> None:
    server.queue(completion(None, tool_calls=[tool_call("call_x", "search", {})]))
    answer = ask(settings(server, max_turns=3))

    assert answer.answer is None
    assert answer.error == "no final answer within 3 turns"
    assert not answer.timed_out
    assert len(server.seen) == 3
    assert answer.trajectory["total_turns"] == 3
    assert answer.trajectory["success"] is False
    assert answer.trajectory["final_answer"] is None
    assert len(answer.trajectory["tool_calls"]) == 3
    assert [call["turn"] for call in answer.trajectory["tool_calls"]] == [1, 2, 3]


def test_usage_missing_from_a_reply_counts_nothing(server: ChatServer) -> None:
    server.queue(
        completion(None, tool_calls=[tool_call("c1", "search", {})]),
        completion(
            "Paris", usage={"prompt_tokens": 7, "completion_tokens": 2}
        ),  # no total: the sum
    )
    answer = ask(settings(server))
    assert answer.usage == {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}


# --- retries ----------------------------------------------------------------------------------


def test_a_429_with_retry_after_is_retried(server: ChatServer) -> None:
    server.queue(
        Reply(status=429, body=b'{"error": "slow down"}', headers={"Retry-After": "0"}),
        completion("Paris"),
    )
    started = time.monotonic()
    # A long backoff: only by waiting the server's 0 s instead is the test quick.
    answer = ask(settings(server, max_retries=1), backoff_initial_sec=20)
    assert time.monotonic() - started < 4  # the backoff, capped, would be 8 s
    assert answer.answer == "Paris"
    assert answer.trajectory["total_turns"] == 1
    assert len(server.seen) == 2


def test_5xx_until_the_retries_are_exhausted(
    server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.queue(Reply(status=500, body=f'{{"error": "bad key {API_KEY}"}}'.encode()))
    answer = ask(settings(server, max_retries=2))

    assert answer.answer is None
    assert not answer.timed_out
    assert len(server.seen) == 3  # the first try and 2 retries
    assert answer.error is not None
    assert "failed 3 time(s), the last with HTTP 500" in answer.error
    assert answer.trajectory["total_turns"] == 0
    assert answer.trajectory["success"] is False
    assert "try 1 of 3 failed (HTTP 500)" in caplog.text
    assert_no_key(answer, caplog)


def test_a_401_is_not_retried_and_the_echoed_key_is_scrubbed(
    server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.queue(Reply(status=401, body=f'{{"error": "invalid key {API_KEY}"}}'.encode()))
    answer = ask(settings(server))

    assert len(server.seen) == 1
    assert answer.answer is None
    assert answer.error is not None
    assert "answered HTTP 401" in answer.error
    assert 'invalid key ***"' in answer.error
    assert_no_key(answer, caplog)


def test_a_key_echoed_in_the_conversation_is_scrubbed(server: ChatServer) -> None:
    server.queue(completion(f"Your key is {API_KEY}. <answer>{API_KEY}</answer>"))
    answer = ask(settings(server))
    assert answer.answer == "***"
    assert_no_key(answer)


def test_a_long_error_body_is_cut(server: ChatServer) -> None:
    server.queue(Reply(status=400, body=b'{"error": "' + b"x" * 5000 + b'"}'))
    answer = ask(settings(server))
    assert answer.error is not None
    assert answer.error.endswith("...")
    assert len(answer.error) < 600


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        b'{"error": "oops"}',
        b'{"choices": []}',
        b'{"choices": [{"message": {"content": 42}}]}',
        b'{"choices": [{"message": {"content": null, "tool_calls": "search"}}]}',
    ],
    ids=["not-json", "no-choices", "empty-choices", "content-not-text", "tool-calls-not-a-list"],
)
def test_a_body_that_is_not_a_chat_completion_is_no_answer(server: ChatServer, body: bytes) -> None:
    server.queue(Reply(body=body))
    answer = ask(settings(server))
    assert answer.answer is None
    assert answer.error is not None
    assert "something else than a chat completion" in answer.error
    assert len(server.seen) == 1  # an answer is not retried
    assert answer.trajectory["total_turns"] == 0


# --- the deadline -----------------------------------------------------------------------------


def test_a_slow_server_runs_into_the_deadline(server: ChatServer) -> None:
    server.queue(Reply(body=completion("Paris").body, delay_sec=30))
    started = time.monotonic()
    answer = ask(settings(server, request_timeout_sec=30), deadline=started + 0.5)
    took = time.monotonic() - started

    assert answer.timed_out
    assert answer.answer is None
    assert answer.error is not None
    assert "before the deadline" in answer.error
    assert 0.4 < took < 3
    assert len(server.seen) == 1  # no retry past the deadline
    assert answer.trajectory["success"] is False


def test_a_backoff_past_the_deadline_is_not_slept(server: ChatServer) -> None:
    server.queue(Reply(status=503, headers={"Retry-After": "20"}))
    started = time.monotonic()
    answer = ask(settings(server), deadline=started + 2)
    assert time.monotonic() - started < 1.5
    assert answer.timed_out
    assert answer.error is not None
    assert "the last with HTTP 503" in answer.error
    assert len(server.seen) == 1


def test_a_deadline_already_passed_sends_nothing(server: ChatServer) -> None:
    server.queue(completion("Paris"))
    answer = ask(settings(server), deadline=time.monotonic() - 1)
    assert answer.timed_out
    assert answer.answer is None
    assert server.seen == []


def test_turns_within_the_deadline_still_answer(server: ChatServer) -> None:
    server.queue(
        completion(None, tool_calls=[tool_call("c1", "search", {})]),
        completion("Paris"),
    )
    answer = ask(settings(server), deadline=time.monotonic() + 30)
    assert answer.answer == "Paris"
    assert not answer.timed_out


# --- the shared client (rollout_runner.chat_http) ----------------------------------------------


def client(server: ChatServer, **overrides: Any) -> ChatHttp:
    values: dict[str, Any] = {
        "api_key": API_KEY,
        "where": "the test server",
        "timeout_sec": 0.3,
        "max_retries": 1,
        "backoff_initial_sec": FAST,
    }
    values.update(overrides)
    return ChatHttp(server.base_url + "/chat/completions", **values)


def test_a_read_timeout_is_retried_by_default(server: ChatServer) -> None:
    server.queue(Reply(body=b"{}", delay_sec=30))
    with client(server) as http, pytest.raises(CallFailed) as raised:
        http.post({"x": 1})
    assert len(server.seen) == 2
    assert raised.value.attempts == 2
    assert not raised.value.timed_out
    assert "failed 2 time(s), the last with no answer (ReadTimeoutError)" in str(raised.value)


def test_a_read_timeout_is_not_repeated_when_the_caller_says_so(server: ChatServer) -> None:
    server.queue(Reply(body=b"{}", delay_sec=30))
    with client(server, retry_timeouts=False) as http, pytest.raises(CallFailed) as raised:
        http.post({"x": 1})
    assert len(server.seen) == 1
    assert raised.value.timed_out
    assert raised.value.attempts == 1
    assert "the test server gave no answer within 0.3 seconds" in str(raised.value)


def test_a_5xx_is_still_retried_when_timeouts_are_not(server: ChatServer) -> None:
    server.queue(Reply(status=502), Reply(body=b'{"ok": true}'))
    with client(server, retry_timeouts=False) as http:
        reply = http.post({"x": 1}, headers={"X-Extra": "yes"})
    assert reply.data == b'{"ok": true}'
    assert reply.attempts == 2
    assert server.seen[1].headers["X-Extra"] == "yes"
    assert server.seen[1].headers["Authorization"] == f"Bearer {API_KEY}"


# --- the settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"extra_params": {"messages": []}}, "extra params set messages"),
        ({"extra_params": {"model": "x", "temperature": 1}}, "extra params set model, temperature"),
        ({"max_turns": 0}, "max_turns 0 is not at least 1"),
        ({"max_retries": -1}, "max_retries -1 is negative"),
        ({"temperature": 2.5}, "temperature 2.5 is not in 0.0-2.0"),
        ({"request_timeout_sec": 0}, "timeout 0 is not a positive number"),
        ({"base_url": "api.openai.com/v1"}, "is not an http"),
        ({"model": ""}, "model is empty"),
    ],
)
def test_settings_are_checked(overrides: dict[str, Any], problem: str) -> None:
    values: dict[str, Any] = {"model": "m", "base_url": "http://model.invalid/v1"}
    values.update(overrides)
    with pytest.raises(ValueError, match=problem) as raised:
        ModelSettings(**values)
    assert "the model agent's" in str(raised.value)


def test_the_key_is_not_in_the_settings_repr() -> None:
    model = ModelSettings(model="m", base_url="http://model.invalid/v1", api_key=API_KEY)
    assert API_KEY not in repr(model)
    assert model.url == "http://model.invalid/v1/chat/completions"
