"""Seed 003's endpoint contract: the JSON payload the runner POSTs to an endpoint agent per
attempt, and how its reply is read. Pure; the runner makes the request
(`rollout_runner.endpoint_agent`).

The payload, every key always present:

    {"benchmark": {"id": <dataset>, "name": <dataset>},
     "run": {"id": <job name>},
     "attempt": {"id": <agent>/<dataset>/<task>__<n>, "traceId": <W3C trace id>},
     "task": {"instruction": <the instruction>, "input": {...}, "metadata": {...}},
     "trace": {"context": {"run_id": <job name>, "rollout_id": <attempt id>,
                           "trace_id": <W3C trace id>}}}

The attempt's id is the trial's directory under the job (unique in the run, and where its files
are). `task.input` is a data row's input (`question`, and `kwargs` when the row has them); a
task directory's is `{}`. `task.metadata` is the row's metadata, or task.toml's [metadata].
Never the ground truth.

The reply is a JSON object with `output` (the answer: a string; another JSON value is kept as
its JSON text) and, when the endpoint scores the attempt, one of `score` (a number),
`score: {"score": number}` or `passed` (a boolean); both may be given. A reply that is not
JSON, not an object, has no `output`, or a score or passed of another type is refused with a
message saying which (`agent_execution_failed`).

The endpoint's own evaluation (`EndpointEvaluation`) is recorded under `rollout.evaluation` of
the trial's result.json. Where the trial has its own verifier (a task's tests, a row's metric
with a ground truth to compare, a Python verifier), that gives the reward and the endpoint's
score is kept beside it; where it has none (a row without a ground truth), the endpoint's score
is the reward: `score`, else 1 for `passed: true` and 0 for `passed: false`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from rollout.api.base import ApiModel


class EndpointEvaluation(ApiModel):
    """What the endpoint said of its own attempt."""

    score: float | None = Field(
        None, allow_inf_nan=False, description="The endpoint's score, when it gave one."
    )
    passed: bool | None = Field(None, description="The endpoint's pass/fail, when it gave one.")

    @property
    def reward(self) -> float | None:
        """The reward it stands for when the trial has no verifier of its own."""
        if self.score is not None:
            return self.score
        if self.passed is not None:
            return 1.0 if self.passed else 0.0
        return None


@dataclass(frozen=True)
class EndpointReply:
    output: str
    evaluation: EndpointEvaluation | None
    """None when the endpoint gave neither a score nor passed."""


class ReplyRefused(ValueError):
    """The reply breaks the contract; the message says how."""


def attempt_id(agent: str, dataset: str, task: str, attempt: int) -> str:
    """The attempt's id in the payload: its trial directory under the job."""
    return f"{agent}/{dataset}/{task}__{attempt}"


def endpoint_payload(
    *,
    dataset: str,
    job: str,
    attempt: str,
    trace_id: str,
    instruction: str,
    task_input: dict[str, Any],
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """Seed 003's payload for one attempt (see the module docstring)."""
    return {
        "benchmark": {"id": dataset, "name": dataset},
        "run": {"id": job},
        "attempt": {"id": attempt, "traceId": trace_id},
        "task": {"instruction": instruction, "input": task_input, "metadata": metadata},
        "trace": {"context": {"run_id": job, "rollout_id": attempt, "trace_id": trace_id}},
    }


def read_reply(data: bytes) -> EndpointReply:
    """The reply's output and evaluation; ReplyRefused saying what is wrong."""
    try:
        reply = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReplyRefused(f"the reply is not JSON ({err})") from None
    if not isinstance(reply, dict):
        raise ReplyRefused(f"the reply is a JSON {type(reply).__name__}, not an object")
    output = reply.get("output")
    if output is None:
        raise ReplyRefused("the reply has no 'output' (the answer)")
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    score = _score(reply.get("score"))
    passed = reply.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise ReplyRefused(f"the reply's 'passed' is {passed!r}, not true or false")
    evaluation = None
    if score is not None or passed is not None:
        evaluation = EndpointEvaluation(score=score, passed=passed)
    return EndpointReply(output=text, evaluation=evaluation)


def _score(value: Any) -> float | None:
    if value is None:
        return None
    number = value.get("score") if isinstance(value, dict) else value
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        raise ReplyRefused(
            f"the reply's 'score' is {value!r}, not a number or {{\"score\": <number>}}"
        )
    return float(number)
