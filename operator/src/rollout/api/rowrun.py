"""A shard of a data dataset, as a trial spec carries it to the runner (seed 002/004 Shape A).

A row is not worth a Pod: the rows of a data dataset run in shards of `shard_size` (row,
attempt) pairs, one RolloutTrial (and one runner) per shard. The shard's spec names its rows, how
they are scored and what their result lines keep; everything else (agent, image, timeouts,
storage) is an ordinary trial spec's. The runner writes each row's trial directory at the seed's
path, `<agent>/<dataset>/<row id>__<attempt>/`, with the row's line of results.jsonl beside its
result.json (`rollout.api.rowresults.ROW_LINE`), from which the job's results.jsonl is put
together when the job ends.

An evaluator's API key is never in a spec: the runner reads it from its own environment
(`EVALUATOR_API_KEY_ENV`), set from a Secret on a cluster and from the `${VAR}` of job.yaml in
local mode.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from rollout.api.base import ApiModel
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.rules import TaskName
from rollout.api.secretref import SecretKeySelector
from rollout.api.service_agents import CHAT_RESERVED_PARAMS
from rollout.api.verifiers import Metric, VerifierChoice, VerifierKind, VerifierSource

EVALUATOR_API_KEY_ENV = "ROLLOUT_EVALUATOR_API_KEY"
"""The runner's environment variable holding the llm_judgement evaluator's API key."""

EVALUATOR_RESERVED_PARAMS = CHAT_RESERVED_PARAMS
"""Request fields the evaluator's own settings make: evaluator_extra_params may not set them."""

SHARD_TASK_PREFIX = "shard-"
"""A shard's spec.taskName is `shard-<n>` (n from 1, six digits): it names the shard's file of
result lines; the rows' own directories are named by their ids."""


def shard_task_name(number: int) -> str:
    """`shard-000001` for shard 1."""
    if number < 1:
        raise ValueError(f"shard numbers start at 1, not {number}")
    return f"{SHARD_TASK_PREFIX}{number:06d}"


class RowItem(ApiModel):
    """One (row, attempt) of a shard: a trial of the seed's enumeration."""

    id: TaskName = Field(description="The row's id: its trial directory is <id>__<attempt>.")
    attempt: int = Field(ge=1, description="Attempt number, from 1.")
    try_number: int | None = Field(
        None,
        ge=1,
        exclude_if=lambda v: v is None,
        description="Which try at the row this is (a resumed job's); absent: the shard's.",
    )


class RowVerifier(ApiModel):
    """How the shard's rows are scored (`rollout.api.verifiers`)."""

    kind: VerifierKind = Field(description="metric, or python (a dataset's evaluate.py).")
    metric: Metric | None = Field(None, description="The metric, for kind metric.")
    script: str | None = Field(
        None, description="The Python verifier, relative to the rows archive, for kind python."
    )
    source: VerifierSource = Field(VerifierSource.DEFAULT, description="Where it was declared.")

    @model_validator(mode="after")
    def _consistent(self) -> RowVerifier:
        if self.kind is VerifierKind.SHELL:
            raise ValueError("rows are scored by a metric or a Python verifier, not a shell one")
        self.choice()  # raises ValueError when kind, metric and script disagree
        return self

    def label(self) -> str:
        """`exact_match`, or `python tests/evaluate.py`: how results name the verifier."""
        if self.metric is not None:
            return self.metric.value
        return f"python {self.script}"

    def choice(self) -> VerifierChoice:
        return VerifierChoice(self.kind, self.source, metric=self.metric, script=self.script)

    @classmethod
    def of(cls, choice: VerifierChoice) -> RowVerifier:
        return cls(
            kind=choice.kind, metric=choice.metric, script=choice.script, source=choice.source
        )


class EvaluatorSettings(ApiModel):
    """The llm_judgement evaluator (seed 002's evaluator_* settings, but its API key)."""

    model_name: str = Field(min_length=1, description="The evaluator model.")
    base_url: str = Field(min_length=1, description="Its OpenAI-compatible API's base URL.")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed call.")
    extra_params: dict[str, Any] = Field(
        default_factory=dict, description="More request parameters (max_tokens, ...)."
    )
    api_key: SecretKeySelector | None = Field(
        None,
        description=f"The Secret key holding its API key (the runner gets it in "
        f"{EVALUATOR_API_KEY_ENV}); none: no key, or (local mode) given to the runner directly.",
    )


class ShardRows(ApiModel):
    """The rows a shard trial runs, and how their results are scored and kept."""

    number: int = Field(ge=1, description="The shard's number in its agent and dataset, from 1.")
    items: list[RowItem] = Field(min_length=1, description="Its (row, attempt)s, in trial order.")
    verifier: RowVerifier = Field(description="How each row's answer is scored.")
    evaluator: EvaluatorSettings | None = Field(
        None, description="The llm_judgement evaluator, when that is the metric."
    )
    save_trajectories: bool = Field(True, description="Keep each row's trajectory in its line.")
    trajectory_only: bool = Field(
        False, description="Keep only a minimal trajectory (no messages or tool calls)."
    )

    @model_validator(mode="after")
    def _judge_needs_evaluator(self) -> ShardRows:
        if self.verifier.metric is Metric.LLM_JUDGEMENT and self.evaluator is None:
            raise ValueError("llm_judgement needs the evaluator's settings")
        return self


class RowOutcome(ApiModel):
    """A row's outcome in its shard's trial status: what the job's figures need of it (its
    result.json has the rest). A shard's status lists every row once the shard has finished."""

    id: TaskName = Field(description="The row's id.")
    attempt: int = Field(ge=1, description="Attempt number, from 1.")
    reward: float | None = Field(None, allow_inf_nan=False, description="The row's reward.")
    error_type: ErrorType | None = Field(None, description="The row's error type, if any.")
    failure_class: FailureClass | None = Field(
        None, description="Whose failure the row's error is."
    )
