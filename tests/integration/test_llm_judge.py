"""The `llm_judgement` call (`rollout_runner.judge`) against an OpenAI-compatible server on
loopback: the request it sends, a score, a reply without one, retries on 429 (Retry-After) and
5xx, and an API key that never shows in an error."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from chat_kit import ChatServer, Reply, chat_server, completion

from loopback import HOST
from rollout_runner.judge import (
    JudgeFailed,
    JudgeSettings,
    JudgeUnparsable,
    JudgeVerdict,
    judge,
)

pytestmark = pytest.mark.integration

API_KEY = "sk-judge-test-key-3b1f0c9e-never-print-me"
FAST = 0.01
"""The first backoff of the tests: retries take milliseconds."""


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with chat_server() as found:
        yield found


def settings(server: ChatServer, **overrides: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "model": "judge-model",
        "base_url": server.base_url,
        "api_key": API_KEY,
        "max_retries": 3,
        "timeout_sec": 10.0,
    }
    values.update(overrides)
    return JudgeSettings(**values)


def ask(judge_settings: JudgeSettings, backoff_initial_sec: float = FAST) -> JudgeVerdict:
    return judge(
        judge_settings,
        question="What is the capital of France?",
        predicted="It is Paris.",
        ground_truth="Paris",
        backoff_initial_sec=backoff_initial_sec,
    )


# --- the request ------------------------------------------------------------------------------


def test_the_request_carries_the_settings_and_the_key(server: ChatServer) -> None:
    server.queue(completion("Correct.\nSCORE: 1.0"))
    ask(
        settings(
            server,
            base_url=server.base_url + "/",  # a trailing slash is not doubled
            temperature=0.3,
            extra_params={"max_tokens": 1024, "top_p": 0.5},
        )
    )
    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["Authorization"] == f"Bearer {API_KEY}"
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.body["model"] == "judge-model"
    assert seen.body["temperature"] == 0.3
    assert seen.body["max_tokens"] == 1024
    assert seen.body["top_p"] == 0.5
    roles = [message["role"] for message in seen.body["messages"]]
    assert roles == ["system", "user"]
    user = seen.body["messages"][1]["content"]
    assert "What is the capital of France?" in user
    assert "It is Paris." in user
    assert "Reference answer:\nParis" in user


def test_without_a_key_there_is_no_authorization(server: ChatServer) -> None:
    server.queue(completion("SCORE: 1"))
    ask(settings(server, api_key=None))
    assert "Authorization" not in server.seen[0].headers
    assert server.seen[0].body["temperature"] == 0.0  # seed 002's default


# --- the reply --------------------------------------------------------------------------------


def test_a_score_reply_is_the_verdict(server: ChatServer) -> None:
    reply = "The candidate names the right city.\nSCORE: 0.8"
    server.queue(completion(reply))
    verdict = ask(settings(server))
    assert verdict == JudgeVerdict(score=0.8, reply=reply, attempts=1)


@pytest.mark.parametrize(
    "content",
    ["The answer looks right to me.", "SCORE: 7", "SCORE: 0.2\nno, SCORE: 0.9", None],
    ids=["no-score", "out-of-range", "two-scores", "null-content"],
)
def test_a_reply_without_one_score_is_unparsable(server: ChatServer, content: str | None) -> None:
    server.queue(completion(content))
    with pytest.raises(JudgeUnparsable) as raised:
        ask(settings(server))
    assert raised.value.reply == (content or "")
    assert raised.value.attempts == 1
    assert "no score between 0.0 and 1.0" in str(raised.value)
    assert len(server.seen) == 1  # an answer is not retried


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"error": "oops"}', b'{"choices": []}', b'{"choices": [{"message": {}}]}'],
)
def test_a_body_that_is_not_a_chat_completion_fails(server: ChatServer, body: bytes) -> None:
    server.queue(Reply(body=body))
    with pytest.raises(JudgeFailed, match="something else than a chat completion") as raised:
        ask(settings(server))
    assert raised.value.attempts == 1


# --- retries ----------------------------------------------------------------------------------


def test_a_429_with_retry_after_is_retried(server: ChatServer) -> None:
    server.queue(
        Reply(status=429, body=b'{"error": "slow down"}', headers={"Retry-After": "0"}),
        completion("SCORE: 0.5"),
    )
    started = time.monotonic()
    # A long backoff: only by waiting the server's 0 s instead is the test quick.
    verdict = ask(settings(server, max_retries=1), backoff_initial_sec=20)
    assert time.monotonic() - started < 4  # the backoff, capped, would be 8 s
    assert verdict.score == 0.5
    assert verdict.attempts == 2
    assert len(server.seen) == 2


def test_5xx_beyond_max_retries_fails_without_the_key(server: ChatServer) -> None:
    # The server echoes the key back: the message must still not hold it.
    server.queue(Reply(status=500, body=f'{{"error": "bad key {API_KEY}"}}'.encode()))
    with pytest.raises(JudgeFailed) as raised:
        ask(settings(server, max_retries=2))
    assert raised.value.attempts == 3  # the first try and 2 retries
    assert len(server.seen) == 3
    assert "failed 3 time(s), the last with HTTP 500" in str(raised.value)
    assert API_KEY not in str(raised.value)
    assert API_KEY not in repr(raised.value)


def test_no_retries_means_one_try(server: ChatServer) -> None:
    server.queue(Reply(status=503))
    with pytest.raises(JudgeFailed):
        ask(settings(server, max_retries=0))
    assert len(server.seen) == 1


def test_a_client_error_is_not_retried_and_its_body_is_scrubbed(server: ChatServer) -> None:
    server.queue(Reply(status=401, body=f'{{"error": "invalid key {API_KEY}"}}'.encode()))
    with pytest.raises(JudgeFailed, match="answered HTTP 401") as raised:
        ask(settings(server))
    assert len(server.seen) == 1
    assert raised.value.attempts == 1
    assert API_KEY not in str(raised.value)
    assert 'invalid key ***"' in str(raised.value)


def test_a_server_that_is_not_there_fails_after_the_retries() -> None:
    with unserved_port() as port:
        judge_settings = JudgeSettings(
            model="judge-model",
            base_url=f"http://{HOST}:{port}/v1",
            api_key=API_KEY,
            max_retries=1,
            timeout_sec=5,
        )
        with pytest.raises(JudgeFailed, match="failed 2 time") as raised:
            ask(judge_settings)
    assert API_KEY not in str(raised.value)


@contextlib.contextmanager
def unserved_port() -> Iterator[int]:
    """A loopback port that is bound (so no one else takes it) and never listened on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield int(sock.getsockname()[1])


# --- the settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"temperature": 2.5}, "temperature 2.5 is not in 0.0-2.0"),
        ({"temperature": -0.1}, "temperature -0.1 is not in 0.0-2.0"),
        ({"max_retries": -1}, "max_retries -1 is negative"),
        ({"timeout_sec": 0}, "timeout 0 is not a positive number"),
        ({"base_url": "localhost:8000"}, "is not an http"),
        ({"extra_params": {"model": "other"}}, "extra params set model"),
    ],
)
def test_settings_are_checked(overrides: dict[str, Any], problem: str) -> None:
    values: dict[str, Any] = {"model": "m", "base_url": "http://judge.invalid/v1"}
    values.update(overrides)
    with pytest.raises(ValueError, match=problem):
        JudgeSettings(**values)


def test_the_key_is_not_in_the_settings_repr() -> None:
    shown = repr(JudgeSettings(model="m", base_url="http://judge.invalid/v1", api_key=API_KEY))
    assert API_KEY not in shown
    assert JudgeSettings(model="m", base_url="http://judge.invalid", temperature=2.0)
