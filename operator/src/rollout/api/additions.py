"""What the project adds to the seed's result files: all of it under ONE key, `rollout`.

The seed's trial and job result.json fields keep their names, types, meaning and order, so a
reader written for the seed never breaks. Everything the project adds (now the failure class, the
job's metrics and its failed trials per class, a trial's tries; later per-key rewards, trace ids)
lives under one key, `rollout` (`PROJECT_KEY`), the last key of both files:

    trial result.json   "rollout": {"failure_class": "agent" | "task" | "infrastructure" | null,
                                    "tries": 1,
                                    "rewards": {"accuracy": 1, "style": 0.5},
                                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                                    "evaluation": {"score": 0.92, "passed": true},
                                    "usage": {"input_tokens": 120, "output_tokens": 24,
                                              "total_tokens": 144},
                                    "agent": {"builtin": "claude-code", "version": "2.0.14",
                                              "model": "claude-sonnet-4-5"}}
    job result.json     "rollout": {"metrics": [{"type": "mean", "value": 0.85}],
                                    "failures": {"agent": 1, "task": 0, "infrastructure": 1},
                                    "agents": {"<agent>": {"failures": {...}}}}

- `failure_class`: the class of the trial's error (`rollout.api.failures`), null without one.
- `tries`: how many Pods the trial ran in: 1, plus one per infrastructure retry (a lost Pod).
  The earlier tries' files are kept under the trial's `retries/<k>/` (`rollout.api.layout`).
- `rewards`: the object the reward came from (a reward.json such as `{"accuracy": 1, "style":
  0.5}`), kept whole; absent when the reward was a plain number or there is none. The reward
  itself follows the one coercion rule (`rollout.api.reward`).
- `trace_id`: the attempt's W3C trace id (`rollout.api.tracecontext`), which its agent got as
  seed 003's `attempt.traceId`, a `traceparent` header or `TRACEPARENT`: the key to the
  agent's own trace.
- `evaluation`: an endpoint agent's own score and/or pass (`rollout.api.endpoint`), kept beside
  the reward.
- `usage`: a model agent's tokens over its turns; a script agent's (a built-in's) tokens and
  cost in USD as it reported them in /logs/agent/usage.json.
- `agent`: a built-in agent (`rollout.api.catalogue`): which, the version installed and the model
  it was given, so that a run can be repeated.
- `metrics`: the job.yaml metrics over the completed trials' rewards (`[]` when none is
  configured).
- `failures`: the failed trials (the seed's `failed_trials`) by the class of their error, so that
  `agent + task + infrastructure == failed_trials`; `agents` has the same per agent.

The key is left out of a file that has none (a seed file, another tool's), so such a file
round-trips byte for byte; a key under it that this version does not know (a later version's) is
kept and written back, never refused. A value this version cannot know of a file (the failures
of a job result.json written before they were counted) is left out, never guessed.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field

from rollout.api.base import ApiModel
from rollout.api.endpoint import EndpointEvaluation
from rollout.api.failures import FailureClass
from rollout.api.metrics import MetricValue
from rollout.api.tracecontext import TRACE_ID_PATTERN

PROJECT_KEY: Final = "rollout"
"""The one key of a result.json under which everything the project adds lives."""

Count = Annotated[int, Field(ge=0)]


def _absent(value: object) -> bool:
    return value is None


class _Additions(ApiModel):
    # Keys a later version adds under `rollout` are kept (and written back), never refused, so
    # that this version reads the files of later ones.
    model_config = ConfigDict(extra="allow")


class TrialAdditions(_Additions):
    """What the project adds to a trial's result.json, under `rollout`."""

    failure_class: FailureClass | None = Field(
        None, description="Whose failure the trial's error is; null when it has none."
    )
    tries: Annotated[int, Field(ge=1)] | None = Field(
        None,
        exclude_if=_absent,
        description="Pods the trial ran in (1 + its infrastructure retries); absent when unknown.",
    )
    rewards: dict[str, Any] | None = Field(
        None,
        exclude_if=_absent,
        description="The object the reward came from (say a reward.json with several keys), "
        "kept whole; absent when the reward was a plain number.",
    )
    trace_id: str | None = Field(
        None,
        exclude_if=_absent,
        pattern=TRACE_ID_PATTERN,
        description="The attempt's W3C trace id, as its agent got it; absent when unknown.",
    )
    evaluation: EndpointEvaluation | None = Field(
        None,
        exclude_if=_absent,
        description="An endpoint agent's own evaluation of the attempt (score, passed).",
    )
    usage: TokenUsage | None = Field(
        None,
        exclude_if=_absent,
        description="The agent's tokens over the attempt (a model agent's, or as a script agent "
        "reported them).",
    )
    agent: BuiltinRun | None = Field(
        None, exclude_if=_absent, description="The built-in agent that ran, and how."
    )


class BuiltinRun(ApiModel):
    """A built-in agent's run: which one, its version and its model."""

    builtin: str = Field(description="The built-in agent (`rollout agents list`).")
    version: str = Field(description="The version its install pinned.")
    model: str | None = Field(None, description="The model it was given; null: the CLI's own.")


class TokenUsage(ApiModel):
    """An agent's tokens: a model agent's summed over its chat completions, a script agent's as
    it reported them."""

    input_tokens: Count = Field(0, description="Prompt tokens.")
    output_tokens: Count = Field(0, description="Completion tokens.")
    total_tokens: Count = Field(0, description="All tokens, as the API counted them.")
    cost_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None, exclude_if=_absent, description="What the agent reported its calls cost, in USD."
    )


class FailureCounts(ApiModel):
    """Failed trials (the seed's `failed_trials`) by the class of their error."""

    agent: Count = Field(0, description="Failed trials whose error is the agent's.")
    task: Count = Field(0, description="Failed trials whose error is the task's.")
    infrastructure: Count = Field(
        0, description="Failed trials whose error is the infrastructure's."
    )

    @property
    def total(self) -> int:
        return self.agent + self.task + self.infrastructure


class AgentAdditions(_Additions):
    """What the project adds to one agent's figures in the job's result.json."""

    failures: FailureCounts | None = Field(
        None, exclude_if=_absent, description="The agent's failed trials by class."
    )


class JobAdditions(_Additions):
    """What the project adds to the job's result.json, under `rollout`."""

    metrics: list[MetricValue] | None = Field(
        None,
        exclude_if=_absent,
        description="The metrics job.yaml asks for, in its order (`[]` for none).",
    )
    failures: FailureCounts | None = Field(
        None,
        exclude_if=_absent,
        description="The job's failed trials by class; absent from a file that did not count "
        "them (an earlier version's).",
    )
    agents: dict[str, AgentAdditions] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="Per agent, in the order of the seed's `agents`.",
    )
