"""The `llm_judgement` metric's call: one chat completion from an OpenAI-compatible judge model.

What to ask and how to read the answer are pure and live in `rollout.api.scoring`
(`judge_messages`, `parse_judge_score`); this module only makes the request, here in the runner
because `rollout.api` reaches no network. Seed 002's evaluator settings map onto `JudgeSettings`
(`evaluator_model_name` is `model`, `evaluator_base_url` is `base_url`, and so on).

The request is `POST {base_url}/chat/completions` with `{"model", "messages", "temperature",
**extra_params}` and, when there is a key, `Authorization: Bearer <key>`. Connection errors,
timeouts, 429 and 5xx are retried `max_retries` times after the first try: after the server's
`Retry-After` (in seconds, at most `RETRY_AFTER_MAX_SEC`) when it sends one, else with
exponential backoff from `backoff_initial_sec` (`rollout_runner.chat_http`, which the model
agent shares). The outcomes, as the caller reports them:

- a score: `JudgeVerdict`;
- a chat completion whose text holds no score: `JudgeUnparsable` (`verifier_reward_invalid`),
  with the text kept for the verifier log;
- anything else (an HTTP error, still failing after the retries, a body that is not a chat
  completion): `JudgeFailed` (`verifier_failed`).

The API key is sent in the header only: it is not in any repr, log line or exception message
(every message is scrubbed of it, in case a server echoes it back).

Synchronous (urllib3): callers run it in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rollout.api.scoring import judge_messages, parse_judge_score
from rollout_runner.chat_http import (
    BACKOFF_INITIAL_SEC,
    BACKOFF_MAX_SEC,
    BODY_SHOWN_CHARS,
    RESERVED_PARAMS,
    RETRY_AFTER_MAX_SEC,
    USER_AGENT,
    CallFailed,
    ChatHttp,
    chat_completions_url,
    check_chat_settings,
    completion_message,
    not_a_completion,
)

__all__ = [
    "BACKOFF_INITIAL_SEC",
    "BACKOFF_MAX_SEC",
    "BODY_SHOWN_CHARS",
    "RESERVED_PARAMS",
    "RETRY_AFTER_MAX_SEC",
    "USER_AGENT",
    "JudgeFailed",
    "JudgeSettings",
    "JudgeUnparsable",
    "JudgeVerdict",
    "judge",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeSettings:
    """Seed 002's evaluator settings (`evaluator_*`)."""

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.0
    max_retries: int = 3
    """Retries after the first try."""
    extra_params: dict[str, Any] = field(default_factory=dict)
    """More fields of the request body (`max_tokens`, ...)."""
    timeout_sec: float = 60.0
    """For each request: to connect, and between bytes of the answer."""

    def __post_init__(self) -> None:
        check_chat_settings(
            "the judge",
            model=self.model,
            base_url=self.base_url,
            temperature=self.temperature,
            max_retries=self.max_retries,
            timeout_sec=self.timeout_sec,
            extra_params=self.extra_params,
        )

    @property
    def url(self) -> str:
        return chat_completions_url(self.base_url)


@dataclass
class JudgeVerdict:
    score: float
    reply: str
    """The judge's whole text, for the verifier log."""
    attempts: int


class JudgeFailed(Exception):
    """No chat completion from the judge: an HTTP error, retries exhausted, a foreign body."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts


class JudgeUnparsable(Exception):
    """The judge answered, but its text holds no single score in 0.0-1.0."""

    def __init__(self, message: str, *, reply: str, attempts: int) -> None:
        super().__init__(message)
        self.message = message
        self.reply = reply
        self.attempts = attempts


def judge(
    settings: JudgeSettings,
    *,
    question: str,
    predicted: str,
    ground_truth: object,
    backoff_initial_sec: float = BACKOFF_INITIAL_SEC,
) -> JudgeVerdict:
    """Ask the judge to score `predicted` against `ground_truth`.

    Raises JudgeFailed or JudgeUnparsable (see the module), and ValueError for a ground truth
    `rollout.api.scoring` refuses.
    """
    body = {
        "model": settings.model,
        "messages": judge_messages(question, predicted, ground_truth),
        "temperature": settings.temperature,
        **settings.extra_params,
    }
    with ChatHttp(
        settings.url,
        api_key=settings.api_key,
        where=f"judge {settings.model} at {settings.url}",
        timeout_sec=settings.timeout_sec,
        max_retries=settings.max_retries,
        backoff_initial_sec=backoff_initial_sec,
        logger=log,
    ) as http:
        try:
            reply = http.post(body)
        except CallFailed as error:
            raise JudgeFailed(error.message, attempts=error.attempts) from None
    attempts = reply.attempts
    message = completion_message(reply.data)
    if message is None or "content" not in message:
        raise JudgeFailed(not_a_completion(http.where, reply.data, http.scrub), attempts=attempts)
    content = message["content"]
    if content is None:  # a completion without text (a refusal, a tool call)
        content = ""
    if not isinstance(content, str):
        raise JudgeFailed(not_a_completion(http.where, reply.data, http.scrub), attempts=attempts)
    score = parse_judge_score(content)
    if score is None:
        raise JudgeUnparsable(
            f"{http.where} gave no score between 0.0 and 1.0 (asked for a final line "
            f"'SCORE: <number>'); its reply is in the verifier log",
            reply=http.scrub(content),
            attempts=attempts,
        )
    return JudgeVerdict(score=score, reply=http.scrub(content), attempts=attempts)
