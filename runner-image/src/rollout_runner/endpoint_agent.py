"""An endpoint agent's call (seed 003): one POST of the attempt's payload, its reply read.

The payload and the reply's rules are `rollout.api.endpoint`'s; this module makes the request,
with `rollout_runner.chat_http`'s client (the one way the runner POSTs JSON): the agent's
headers and a `traceparent` header (`rollout.api.tracecontext`) sent; `timeout_sec` bounds each
request (connecting, and each wait for the answer's bytes); connection errors, 429 and 5xx
retried `ENDPOINT_RETRIES` times after the first try, with backoff and `Retry-After`; nothing past
the attempt's `deadline` (the task's agent timeout). A request that times out is not retried:
the endpoint may still be working on the attempt, and sending it again would start it twice.

| what happens                                      | outcome                   |
| ------------------------------------------------- | ------------------------- |
| a 2xx reply with `output`                         | the answer (and any score)|
| a 2xx reply that is not JSON, or has no `output`  | agent_execution_failed    |
| another status (401, 404, ...)                    | agent_execution_failed    |
| 429/5xx/no connection, still after the retries    | agent_execution_failed    |
| no answer within `timeout_sec`, or the deadline   | agent_execution_timeout   |

Messages quote at most a bounded excerpt of a body. Header values are secrets: the runner's
redactor scrubs every Secret-backed one wherever the runner writes, and the request headers are
never logged or written.

Synchronous (urllib3): callers run it in a thread (`asyncio.to_thread`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.api.endpoint import EndpointReply, ReplyRefused, read_reply
from rollout.api.tracecontext import TRACEPARENT_HEADER
from rollout_runner.chat_http import BACKOFF_INITIAL_SEC, CallFailed, ChatHttp

ENDPOINT_RETRIES = 3
"""Tries after the first one for connection errors, 429 and 5xx."""


@dataclass(frozen=True)
class EndpointCall:
    """Where and how to call an endpoint agent."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_sec: float = 60.0
    max_retries: int = ENDPOINT_RETRIES
    backoff_initial_sec: float = BACKOFF_INITIAL_SEC


@dataclass(frozen=True)
class EndpointOutcome:
    """The reply, or why there is none."""

    reply: EndpointReply | None
    body: bytes | None
    """The answer's body as it came (2xx only), for the agent's logs."""
    error: str | None = None
    timed_out: bool = False
    attempts: int = 0


def call_endpoint(
    call: EndpointCall,
    payload: Mapping[str, Any],
    *,
    traceparent: str | None = None,
    deadline: float | None = None,
) -> EndpointOutcome:
    """POST `payload` to the endpoint and read its reply (see the module's table)."""
    headers = dict(call.headers)
    if traceparent is not None:
        headers[TRACEPARENT_HEADER] = traceparent
    where = f"the agent endpoint {call.url}"
    client = ChatHttp(
        call.url,
        api_key=None,
        where=where,
        timeout_sec=call.timeout_sec,
        max_retries=call.max_retries,
        backoff_initial_sec=call.backoff_initial_sec,
        retry_timeouts=False,
    )
    with client:
        try:
            answer = client.post(payload, deadline=deadline, headers=headers)
        except CallFailed as failed:
            return EndpointOutcome(
                None,
                None,
                error=failed.message,
                timed_out=failed.timed_out,
                attempts=failed.attempts,
            )
    try:
        reply = read_reply(answer.data)
    except ReplyRefused as refused:
        return EndpointOutcome(
            None, answer.data, error=f"{where}: {refused}", attempts=answer.attempts
        )
    return EndpointOutcome(reply, answer.data, attempts=answer.attempts)
