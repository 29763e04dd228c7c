"""JSON POSTs with retries, made the one way the runner makes them: shared by the
`llm_judgement` judge (`rollout_runner.judge`) and the model agent (`rollout_runner.model_agent`),
both calling an OpenAI-compatible chat-completions API, and by the endpoint agent
(`rollout_runner.endpoint_agent`).

`ChatHttp(url, ...)` holds a connection pool to one URL and the retry policy; `post(body)` sends
one JSON body and returns the answer's bytes. Connection errors, timeouts, 429 and 5xx are
retried `max_retries` times after the first try: after the server's `Retry-After` (in seconds, at
most `RETRY_AFTER_MAX_SEC`) when it sends one, else with exponential backoff from
`backoff_initial_sec` (at most `BACKOFF_MAX_SEC`). Any other status that is not 2xx is not
retried. A caller whose server may still be at work on a request that timed out keeps such tries
from being repeated (`retry_timeouts=False`). Every failure is a `CallFailed` whose message names
the endpoint (`where`) and, for an HTTP error, quotes at most `BODY_SHOWN_CHARS` of the body.

A `deadline` (a `time.monotonic()` value) bounds a call: no try starts after it, each try's
timeouts are cut to what is left of it, no backoff is slept past it (a wait that would end
beyond it ends the call instead), and a call that ran out of time is a `CallFailed` with
`timed_out` set. A server sending its answer a byte at a time can still hold a try for one read
timeout past the deadline: the body is read in chunks and the deadline checked between them.

The API key goes in the `Authorization` header only: `where`, every message and every log line
are scrubbed of it (in case a server echoes it back), and no repr holds it.

Synchronous (urllib3): callers in async code run it in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import urllib3
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from rollout.api.rowrun import EVALUATOR_RESERVED_PARAMS

log = logging.getLogger(__name__)

BACKOFF_INITIAL_SEC = 0.5
BACKOFF_MAX_SEC = 8.0
RETRY_AFTER_MAX_SEC = 30.0
"""A server asking for a longer pause is waited for this long only: the caller's own timeout
stays in charge."""
BODY_SHOWN_CHARS = 300
"""How much of an error answer's body a message quotes."""
BODY_MAX_BYTES = 32 * 1024 * 1024
"""A larger answer is refused rather than held in memory (a chat completion is far smaller)."""
READ_CHUNK_BYTES = 64 * 1024
USER_AGENT = "rollout-operator"
RESERVED_PARAMS = EVALUATOR_RESERVED_PARAMS
"""Request fields the caller's own settings make (model, messages, temperature): `extra_params`
may not set them."""

Scrub = Callable[[str], str]


def chat_completions_url(base_url: str) -> str:
    """`{base_url}/chat/completions`, without doubling a trailing slash."""
    return f"{base_url.rstrip('/')}/chat/completions"


def check_chat_settings(
    who: str,
    *,
    model: str,
    base_url: str,
    temperature: float,
    max_retries: int,
    timeout_sec: float,
    extra_params: Mapping[str, Any],
) -> None:
    """Raise ValueError, naming `who` ("the judge"), for settings no request can be made with."""
    if not model:
        raise ValueError(f"{who}'s model is empty")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{who}'s base URL {base_url!r} is not an http(s) URL")
    if not 0.0 <= temperature <= 2.0:
        raise ValueError(f"{who}'s temperature {temperature} is not in 0.0-2.0")
    if max_retries < 0:
        raise ValueError(f"{who}'s max_retries {max_retries} is negative")
    if not (math.isfinite(timeout_sec) and timeout_sec > 0):
        raise ValueError(f"{who}'s timeout {timeout_sec} is not a positive number")
    clash = sorted(RESERVED_PARAMS & set(extra_params))
    if clash:
        raise ValueError(f"{who}'s extra params set {', '.join(clash)}, which {who} sets itself")


@dataclass(frozen=True)
class Reply:
    """A 2xx answer's body, and how many tries it took."""

    data: bytes
    attempts: int


class CallFailed(Exception):
    """No 2xx answer: a status that is not retried, the retries exhausted, the deadline passed,
    an answer too large. `message` is scrubbed of the key."""

    def __init__(
        self, message: str, *, attempts: int, timed_out: bool = False, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.attempts = attempts
        self.timed_out = timed_out
        self.status = status
        """The HTTP status of a refusal that is not retried; None otherwise."""


class _Transient(Exception):
    """A failure worth another try; `retry_after` is the server's wish, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _OutOfTime(Exception):
    """The deadline passed before a try could start."""


class _NoAnswerInTime(Exception):
    """A try sent its request and waited its read timeout for the answer (not retried when
    `retry_timeouts` is off)."""


class ChatHttp:
    """A connection pool to one chat-completions URL and the retry policy of its calls."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        where: str,
        timeout_sec: float,
        max_retries: int,
        backoff_initial_sec: float = BACKOFF_INITIAL_SEC,
        retry_timeouts: bool = True,
        logger: logging.Logger | None = None,
    ) -> None:
        """`where` names the endpoint in messages ("judge gpt-4.1 at https://..."); `timeout_sec`
        bounds each try's connect and each wait between bytes of its answer.

        `retry_timeouts=False`: a try that sent its request and then waited `timeout_sec` for
        (the rest of) the answer is not tried again, and the call fails at once with `timed_out`
        set, for a server that may still be working on the request (sending it again would
        start the work twice). A try that could not connect in time is still retried."""
        self.url = url
        self.scrub: Scrub = scrubber(api_key)
        self.where = self.scrub(where)
        self._timeout_sec = timeout_sec
        self._tries = max_retries + 1
        self._backoff_initial_sec = backoff_initial_sec
        self._retry_timeouts = retry_timeouts
        self._log = logger or log
        self._headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool = urllib3.PoolManager()

    def __repr__(self) -> str:
        return f"ChatHttp({self.where!r})"

    def __enter__(self) -> ChatHttp:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._pool.clear()

    def post(
        self,
        body: Mapping[str, Any],
        *,
        deadline: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """POST `body` as JSON, with `headers` beside the usual ones; the first 2xx answer.

        Raises CallFailed (see the module)."""
        payload = json.dumps(body).encode()
        sent = {**self._headers, **(headers or {})}
        attempts = 0
        last_reason = ""

        def attempt() -> bytes:
            nonlocal attempts, last_reason
            timeout = _timeout(self._timeout_sec, deadline)
            attempts += 1
            try:
                return self._post_once(payload, sent, timeout, deadline)
            except _Transient as error:
                last_reason = self.scrub(error.reason)
                raise

        wait = _wait(self._backoff_initial_sec)
        retrying = Retrying(
            stop=_stop(self._tries, deadline, wait),
            wait=wait,
            retry=retry_if_exception_type(_Transient),
            before_sleep=self._log_retry(),
            reraise=True,
        )
        try:
            data: bytes = retrying(attempt)
        except _NoAnswerInTime:
            if _passed(deadline):
                message = f"{self.where} gave no answer before the deadline"
            else:
                message = f"{self.where} gave no answer within {self._timeout_sec:g} seconds"
            raise CallFailed(
                f"{message} (try {attempts}, not repeated: the request may still be at work)",
                attempts=attempts,
                timed_out=True,
            ) from None
        except (_Transient, _OutOfTime):
            if attempts == 0:
                raise CallFailed(
                    f"{self.where} was not asked: the deadline had passed",
                    attempts=0,
                    timed_out=True,
                ) from None
            if attempts < self._tries or _passed(deadline):
                raise CallFailed(
                    f"{self.where} gave no answer before the deadline: {_tries(attempts)}, "
                    f"the last with {last_reason}",
                    attempts=attempts,
                    timed_out=True,
                ) from None
            raise CallFailed(
                f"{self.where} failed {attempts} time(s), the last with {last_reason}",
                attempts=attempts,
            ) from None
        except CallFailed as error:
            error.attempts = attempts
            raise
        return Reply(data=data, attempts=attempts)

    def _post_once(
        self,
        payload: bytes,
        headers: Mapping[str, str],
        timeout: urllib3.Timeout,
        deadline: float | None,
    ) -> bytes:
        try:
            response = self._pool.request(
                "POST",
                self.url,
                body=payload,
                headers=dict(headers),
                timeout=timeout,
                retries=False,
                redirect=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as error:
            raise self._failed_try(error, "no answer") from None
        whole = False
        try:
            data = self._read(response, deadline)
            whole = True
        except urllib3.exceptions.HTTPError as error:
            raise self._failed_try(error, "no whole answer") from None
        finally:
            if not whole:  # unread bytes would spoil the connection for the next try
                response.close()
            response.release_conn()
        if response.status == 429 or response.status >= 500:
            raise _Transient(f"HTTP {response.status}", retry_after(response.headers))
        if not 200 <= response.status < 300:
            raise CallFailed(
                f"{self.where} answered HTTP {response.status}: {shown(data, self.scrub)}",
                attempts=0,
                status=response.status,
            )
        return data

    def _failed_try(self, error: urllib3.exceptions.HTTPError, what: str) -> Exception:
        """What a try that got no (whole) answer raises: a read timeout is not repeated when
        `retry_timeouts` is off; anything else is worth another try."""
        if isinstance(error, urllib3.exceptions.ReadTimeoutError) and not self._retry_timeouts:
            return _NoAnswerInTime()
        return _Transient(f"{what} ({type(error).__name__})")

    def _read(self, response: Any, deadline: float | None) -> bytes:
        """The body, in chunks, checking the size and the deadline between them."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.stream(READ_CHUNK_BYTES):
            size += len(chunk)
            if size > BODY_MAX_BYTES:
                raise CallFailed(
                    f"{self.where} answered HTTP {response.status} with more than "
                    f"{BODY_MAX_BYTES // (1024 * 1024)} MiB",
                    attempts=0,
                )
            chunks.append(chunk)
            if _passed(deadline):
                raise _Transient("an answer still arriving at the deadline")
        return b"".join(chunks)

    def _log_retry(self) -> Callable[[RetryCallState], None]:
        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            reason = self.scrub(error.reason) if isinstance(error, _Transient) else "an error"
            wait = state.next_action.sleep if state.next_action else 0.0
            self._log.warning(
                "%s: try %d of %d failed (%s); retrying in %.2f s",
                self.where,
                state.attempt_number,
                self._tries,
                reason,
                wait,
            )

        return log_retry


def completion_message(data: bytes) -> dict[str, Any] | None:
    """`choices[0].message` of a chat completion, or None when `data` is not one."""
    try:
        message = json.loads(data)["choices"][0]["message"]
    except (ValueError, LookupError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def not_a_completion(where: str, data: bytes, scrub: Scrub) -> str:
    """The message for an answer that is not a chat completion."""
    return f"{where} answered with something else than a chat completion: {shown(data, scrub)}"


def shown(data: bytes, scrub: Scrub) -> str:
    """The start of a body, scrubbed before it is cut (a cut key would escape the scrubbing)."""
    text = scrub(data.decode(errors="replace")).strip()
    return text if len(text) <= BODY_SHOWN_CHARS else text[:BODY_SHOWN_CHARS] + "..."


def retry_after(headers: Any) -> float | None:
    """The `Retry-After` header in seconds (its HTTP-date form is not used), capped."""
    value = headers.get("Retry-After")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, RETRY_AFTER_MAX_SEC)


def scrubber(secret: str | None) -> Scrub:
    """A function replacing `secret` by `***` in a text (the identity without a secret)."""
    if not secret:
        return str
    return lambda text: text.replace(secret, "***")


def scrub_value(value: Any, scrub: Scrub) -> Any:
    """A JSON-like value with every string in it (keys too) scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_value(key, scrub): scrub_value(item, scrub) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(item, scrub) for item in value]
    return value


def _timeout(timeout_sec: float, deadline: float | None) -> urllib3.Timeout:
    if deadline is None:
        return urllib3.Timeout(connect=timeout_sec, read=timeout_sec)
    left = deadline - time.monotonic()
    if left <= 0:
        raise _OutOfTime
    cut = min(timeout_sec, left)
    return urllib3.Timeout(connect=cut, read=cut, total=left)


def _passed(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _tries(count: int) -> str:
    return "1 try" if count == 1 else f"{count} tries"


def _wait(backoff_initial_sec: float) -> Callable[[RetryCallState], float]:
    backoff = wait_exponential(multiplier=backoff_initial_sec, max=BACKOFF_MAX_SEC)

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Transient) and error.retry_after is not None:
            return error.retry_after
        return float(backoff(state))

    return wait


def _stop(
    tries: int, deadline: float | None, wait: Callable[[RetryCallState], float]
) -> Callable[[RetryCallState], bool]:
    """Stop after `tries`, or when the wait before the next try would end past the deadline."""

    def stop(state: RetryCallState) -> bool:
        if state.attempt_number >= tries:
            return True
        return deadline is not None and time.monotonic() + wait(state) >= deadline

    return stop
