"""The `llm_judgement` metric's call: one chat completion from an OpenAI-compatible judge model.

What to ask and how to read the answer are pure and live in `rollout.api.scoring`
(`judge_messages`, `parse_judge_score`); this module only makes the request, here in the runner
because `rollout.api` reaches no network. Seed 002's evaluator settings map onto `JudgeSettings`
(`evaluator_model_name` is `model`, `evaluator_base_url` is `base_url`, and so on).

The request is `POST {base_url}/chat/completions` with `{"model", "messages", "temperature",
**extra_params}` and, when there is a key, `Authorization: Bearer <key>`. Connection errors,
timeouts, 429 and 5xx are retried `max_retries` times after the first try: after the server's
`Retry-After` (in seconds, at most `RETRY_AFTER_MAX_SEC`) when it sends one, else with
exponential backoff from `backoff_initial_sec`. The outcomes, as the caller reports them:

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

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from rollout.api.rowrun import EVALUATOR_RESERVED_PARAMS
from rollout.api.scoring import judge_messages, parse_judge_score

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SEC = 0.5
BACKOFF_MAX_SEC = 8.0
RETRY_AFTER_MAX_SEC = 30.0
"""A server asking for a longer pause is waited for this long only: the trial's own verifier
timeout stays in charge."""
BODY_SHOWN_CHARS = 300
"""How much of an error answer's body a message quotes."""
RESERVED_PARAMS = EVALUATOR_RESERVED_PARAMS
USER_AGENT = "rollout-operator"


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
        if not self.model:
            raise ValueError("the judge's model is empty")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"the judge's base URL {self.base_url!r} is not an http(s) URL")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"the judge's temperature {self.temperature} is not in 0.0-2.0")
        if self.max_retries < 0:
            raise ValueError(f"the judge's max_retries {self.max_retries} is negative")
        if not (math.isfinite(self.timeout_sec) and self.timeout_sec > 0):
            raise ValueError(f"the judge's timeout {self.timeout_sec} is not a positive number")
        clash = sorted(RESERVED_PARAMS & set(self.extra_params))
        if clash:
            raise ValueError(
                f"the judge's extra params set {', '.join(clash)}, which the judge sets itself"
            )

    @property
    def url(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"


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


class _Transient(Exception):
    """A failure worth another try; `retry_after` is the server's wish, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


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
    scrub = _scrubber(settings.api_key)
    where = scrub(f"judge {settings.model} at {settings.url}")
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    if settings.api_key:
        headers["Authorization"] = f"Bearer {settings.api_key}"
    payload = json.dumps(body).encode()
    timeout = urllib3.Timeout(connect=settings.timeout_sec, read=settings.timeout_sec)
    attempts = 0

    with urllib3.PoolManager(headers=headers) as pool:

        def attempt() -> bytes:
            nonlocal attempts
            attempts += 1
            return _post(pool, settings.url, payload, timeout, where, scrub)

        retrying = Retrying(
            stop=stop_after_attempt(settings.max_retries + 1),
            wait=_wait(backoff_initial_sec),
            retry=retry_if_exception_type(_Transient),
            before_sleep=_log_retry(where, settings.max_retries + 1),
            reraise=True,
        )
        try:
            data = retrying(attempt)
        except _Transient as error:
            raise JudgeFailed(
                f"{where} failed {attempts} time(s), the last with {scrub(error.reason)}",
                attempts=attempts,
            ) from None
        except JudgeFailed as error:
            error.attempts = attempts
            raise

    reply = _completion_text(data, where, scrub, attempts)
    score = parse_judge_score(reply)
    if score is None:
        raise JudgeUnparsable(
            f"{where} gave no score between 0.0 and 1.0 (asked for a final line "
            f"'SCORE: <number>'); its reply is in the verifier log",
            reply=scrub(reply),
            attempts=attempts,
        )
    return JudgeVerdict(score=score, reply=scrub(reply), attempts=attempts)


def _post(
    pool: urllib3.PoolManager,
    url: str,
    payload: bytes,
    timeout: urllib3.Timeout,
    where: str,
    scrub: Callable[[str], str],
) -> bytes:
    try:
        response = pool.request(
            "POST", url, body=payload, timeout=timeout, retries=False, redirect=False
        )
    except urllib3.exceptions.HTTPError as error:
        raise _Transient(f"no answer ({type(error).__name__})") from None
    if response.status == 429 or response.status >= 500:
        raise _Transient(f"HTTP {response.status}", _retry_after(response.headers))
    if response.status != 200:
        raise JudgeFailed(
            f"{where} answered HTTP {response.status}: {_shown(response.data, scrub)}",
            attempts=0,
        )
    return response.data


def _completion_text(data: bytes, where: str, scrub: Callable[[str], str], attempts: int) -> str:
    """`choices[0].message.content` of a chat completion (None is an empty text)."""
    try:
        content = json.loads(data)["choices"][0]["message"]["content"]
    except (ValueError, LookupError, TypeError):
        pass
    else:
        if content is None:  # a completion without text (a refusal, a tool call)
            return ""
        if isinstance(content, str):
            return content
    raise JudgeFailed(
        f"{where} answered with something else than a chat completion: {_shown(data, scrub)}",
        attempts=attempts,
    )


def _shown(data: bytes, scrub: Callable[[str], str]) -> str:
    """The start of a body, scrubbed before it is cut (a cut key would escape the scrubbing)."""
    text = scrub(data.decode(errors="replace")).strip()
    return text if len(text) <= BODY_SHOWN_CHARS else text[:BODY_SHOWN_CHARS] + "..."


def _retry_after(headers: Any) -> float | None:
    """The `Retry-After` header in seconds (its HTTP-date form is not used), capped."""
    value = headers.get("Retry-After")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, RETRY_AFTER_MAX_SEC)


def _wait(backoff_initial_sec: float) -> Callable[[RetryCallState], float]:
    backoff = wait_exponential(multiplier=backoff_initial_sec, max=BACKOFF_MAX_SEC)

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Transient) and error.retry_after is not None:
            return error.retry_after
        return float(backoff(state))

    return wait


def _log_retry(where: str, tries: int) -> Callable[[RetryCallState], None]:
    def log_retry(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        reason = error.reason if isinstance(error, _Transient) else "an error"
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s: try %d of %d failed (%s); retrying in %.2f s",
            where,
            state.attempt_number,
            tries,
            reason,
            wait,
        )

    return log_retry


def _scrubber(secret: str | None) -> Callable[[str], str]:
    if not secret:
        return str
    return lambda text: text.replace(secret, "***")
