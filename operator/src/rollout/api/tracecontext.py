"""W3C Trace Context for a trial: one fresh trace id per attempt, handed to every kind of agent in
the ecosystem's standard form, so an agent instrumented with OpenTelemetry links its spans to the
trial without any SDK of ours.

- an endpoint agent gets it in seed 003's payload (`attempt.traceId`, `trace.context.trace_id`)
  and as a `traceparent` header;
- a model agent's chat-completion requests carry the `traceparent` header;
- a script agent's install and execute scripts get it as `TRACEPARENT` (the variable
  OpenTelemetry's environment-carrier convention reads).

The trial's result.json (and a row's results.jsonl line) records the trace id under `rollout`,
so a user finds the agent's own trace from the trial. The format is the W3C one
(https://www.w3.org/TR/trace-context/): `00-<32 hex trace id>-<16 hex parent id>-01`, lowercase,
neither id all zeros; the parent id names the trial's own (root) span.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Final

TRACEPARENT_HEADER: Final = "traceparent"
TRACEPARENT_ENV_VAR: Final = "TRACEPARENT"

TRACE_ID_PATTERN: Final = r"^[0-9a-f]{32}$"
_TRACE_ID = re.compile(TRACE_ID_PATTERN)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def _nonzero_hex(n_bytes: int) -> str:
    while True:
        value = secrets.token_hex(n_bytes)
        if value.strip("0"):
            return value


@dataclass(frozen=True)
class TraceContext:
    """One attempt's trace: a fresh trace id, and the span id of the trial itself."""

    trace_id: str = field(default_factory=lambda: _nonzero_hex(16))
    span_id: str = field(default_factory=lambda: _nonzero_hex(8))

    def __post_init__(self) -> None:
        if not _TRACE_ID.match(self.trace_id) or not self.trace_id.strip("0"):
            raise ValueError(f"{self.trace_id!r} is not a W3C trace id (32 lowercase hex digits)")
        if not re.fullmatch(r"[0-9a-f]{16}", self.span_id) or not self.span_id.strip("0"):
            raise ValueError(f"{self.span_id!r} is not a W3C span id (16 lowercase hex digits)")

    @property
    def traceparent(self) -> str:
        """The `traceparent` value: version 00, sampled."""
        return f"00-{self.trace_id}-{self.span_id}-01"


def parse_traceparent(value: str) -> TraceContext | None:
    """The trace of a `traceparent` value, or None when it is not one (version 00)."""
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    try:
        return TraceContext(trace_id=match[1], span_id=match[2])
    except ValueError:
        return None
