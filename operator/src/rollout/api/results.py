"""The trial and job result.json files, and the definitions by which trials are counted.

The models reproduce the seed's files key for key and in the same order. Timestamps are always
written in UTC with a `Z` ("2025-01-15T10:30:00Z"); fractional seconds are written only when the
time has them, so nothing is lost on a round trip. Reading accepts any explicit offset
("+00:00", "+02:00") and converts to UTC; a timestamp without a timezone is refused, since nobody
could tell which clock it came from.

How a trial counts (the seed's field definitions, implemented once in `is_completed` and
`is_failed` and used by everything else):

- completed: the verifier produced a reward (reward is not null), whatever its value and whatever
  error the trial also has (a teardown error never changes the reward, so such a trial is
  completed);
- failed: no reward, and an error of any type except `environment_teardown_failed`;
- neither: no reward and no error that explains it, e.g. the job disabled the verifier, or the
  trial has not finished yet (the operator aggregates pending trials too, so that `total_trials`
  is right). Such trials count in `total_trials` only, never in pass_rate, mean_reward or metrics.

So `total_trials - completed_trials - failed_trials` is the number of trials without a verdict.

What the project adds to the seed's files lives under ONE key, `rollout`, the last key of both
files (`rollout.api.additions` says what it holds); the seed's fields keep their names, types,
meaning and order. A job result.json of the previous version had `metrics` as a top-level key;
it is read into `rollout.metrics`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, Self, TypeGuard

from pydantic import (
    AfterValidator,
    Field,
    FiniteFloat,
    NonNegativeFloat,
    PlainSerializer,
    ValidationError,
    model_validator,
)

from rollout.api.additions import PROJECT_KEY, JobAdditions, TrialAdditions
from rollout.api.base import ApiModel, FileModel
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.failures import FailureClass, failure_class
from rollout.api.metrics import MetricValue
from rollout.api.problems import problems_from_validation_error

# --- timestamps ---------------------------------------------------------------------------------


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp has no timezone; write it in UTC, e.g. 2025-01-15T10:30:00Z")
    return value.astimezone(UTC)


def format_timestamp(value: datetime) -> str:
    """A timestamp the way result.json writes it: UTC, ending in `Z`."""
    return _to_utc(value).isoformat().replace("+00:00", "Z")


Timestamp = Annotated[
    datetime,
    AfterValidator(_to_utc),
    PlainSerializer(format_timestamp, return_type=str, when_used="json"),
]
"""A point in time in a result file: aware, converted to UTC when read, `...Z` when written."""

Reward = FiniteFloat
"""A verifier's reward: any finite number (1 passes, 0 fails, 0.5 is partial credit)."""

Seconds = Annotated[NonNegativeFloat, Field(allow_inf_nan=False)]
"""A duration: finite and never negative."""

Cost = Annotated[NonNegativeFloat, Field(allow_inf_nan=False)]
"""What a trial cost on its environment (provider-specific units): finite and never negative."""


# --- reading and writing -------------------------------------------------------------------------


class _ResultFile(FileModel):
    """A whole result.json: parsed with errors naming the file, written as the seed writes it."""

    @classmethod
    def from_json(cls, data: str | bytes, file: str = "result.json") -> Self:
        """Parse a result.json; every problem is reported against `file` and the field."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as err:
            raise InvalidInput(problems_from_validation_error(err, file)) from None

    def to_json(self) -> str:
        """The file's text: two-space indent, keys in the seed's order, a final newline."""
        return json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def _absent(value: object) -> bool:
    return value is None


# --- trial result.json -------------------------------------------------------------------------


class TrialError(ApiModel):
    """Why a trial failed: one of the seed's error types and a message for people."""

    type: ErrorType = Field(description="One of the seed's error types.")
    message: str = Field(description="What went wrong.")


class TrialDurations(ApiModel):
    """Seconds spent in each phase; null for a phase that did not run."""

    total_sec: Seconds | None = Field(None, description="The whole trial.")
    environment_setup_sec: Seconds | None = Field(
        None, description="Image build or pull, container start, file copies."
    )
    agent_setup_sec: Seconds | None = Field(None, description="Agent install.")
    agent_execution_sec: Seconds | None = Field(None, description="Agent execution.")
    verifier_sec: Seconds | None = Field(None, description="Verifier.")


class TrialTimestamps(ApiModel):
    """When each phase started and ended (UTC); null for a phase that did not run."""

    started_at: Timestamp | None = Field(None, description="Trial start.")
    environment_setup_started_at: Timestamp | None = Field(
        None, description="Environment setup start."
    )
    environment_setup_ended_at: Timestamp | None = Field(None, description="Environment setup end.")
    agent_setup_started_at: Timestamp | None = Field(None, description="Agent install start.")
    agent_setup_ended_at: Timestamp | None = Field(None, description="Agent install end.")
    agent_execution_started_at: Timestamp | None = Field(None, description="Agent execution start.")
    agent_execution_ended_at: Timestamp | None = Field(None, description="Agent execution end.")
    verifier_started_at: Timestamp | None = Field(None, description="Verifier start.")
    verifier_ended_at: Timestamp | None = Field(None, description="Verifier end.")
    ended_at: Timestamp | None = Field(None, description="Trial end.")


class TrialResult(_ResultFile):
    """A trial's result.json: `<job>/<agent>/<dataset>/<task>__<n>/result.json`."""

    task_name: str = Field(description="The task's folder name.")
    dataset_name: str = Field(description="The dataset the task belongs to.")
    agent_name: str = Field(description="The agent, as named in job.yaml.")
    attempt: int = Field(ge=1, description="Which attempt at this (agent, task), from 1.")
    reward: Reward | None = Field(
        default=None, description="The verifier's reward; null when the verifier gave none."
    )
    cost: Cost | None = Field(
        default=None, description="What the trial cost on its environment, when known."
    )
    error: TrialError | None = Field(default=None, description="Why the trial failed, if it did.")
    durations: TrialDurations = Field(default_factory=TrialDurations)
    timestamps: TrialTimestamps = Field(default_factory=TrialTimestamps)
    rollout: TrialAdditions | None = Field(
        default=None,
        exclude_if=_absent,
        description="What the project adds (see the module docstring); absent in a seed file.",
    )

    @property
    def failure_class(self) -> FailureClass | None:
        """Its error's class: as the file records it, else the table's (a seed file has none).
        Null with an error means none was recorded, so the table's too."""
        recorded = self.rollout.failure_class if self.rollout else None
        if recorded is not None or self.error is None:
            return recorded
        return failure_class(self.error.type, agent_name=self.agent_name)

    @property
    def completed(self) -> bool:
        """The verifier produced a reward (see the module's definitions)."""
        return is_completed(self.reward)

    @property
    def failed(self) -> bool:
        """An error left the trial without a reward (see the module's definitions)."""
        return is_failed(self.reward, self.error.type if self.error else None)


# --- job result.json ---------------------------------------------------------------------------


class TrialSummary(FileModel):
    """One trial in the job result's `results` list."""

    task_name: str
    dataset_name: str
    agent_name: str
    attempt: int = Field(ge=1)
    reward: Reward | None = None


def _check_counts(total: int, completed: int, failed: int, where: str) -> None:
    if completed + failed > total:
        raise ValueError(
            f"{where}completed_trials ({completed}) + failed_trials ({failed}) "
            f"exceed total_trials ({total})"
        )


Count = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class AgentSummary(ApiModel):
    """One agent's aggregate over its trials."""

    # Defined exactly as the job's own figures. The job's result.json spells the counts as the
    # seed does (`total_trials`...), the RolloutJob status as `total`, `completed`, `failed`.

    total_trials: Count = Field(0, alias="total", description="The agent's trials.")
    completed_trials: Count = Field(
        0, alias="completed", description="Its trials whose verifier produced a reward."
    )
    failed_trials: Count = Field(
        0, alias="failed", description="Its trials an error kept from a reward."
    )
    pass_rate: Fraction | None = Field(None, description="Completed trials with reward 1.0.")
    mean_reward: Reward | None = Field(None, description="Mean reward of completed trials.")
    total_cost: Cost | None = Field(None, description="Sum of its trials' costs.")

    @model_validator(mode="after")
    def _counts_add_up(self) -> Self:
        _check_counts(self.total_trials, self.completed_trials, self.failed_trials, "")
        return self


class JobResult(_ResultFile):
    """The job's result.json: `jobs/<job>/result.json`."""

    job_name: str
    total_trials: int = Field(ge=0, description="Every trial of the job.")
    completed_trials: int = Field(ge=0, description="Trials whose verifier produced a reward.")
    failed_trials: int = Field(
        ge=0,
        description="Trials left without a reward by an error other than a teardown error.",
    )
    pass_rate: float | None = Field(
        default=None, ge=0, le=1, description="Share of completed trials with reward 1.0."
    )
    mean_reward: Reward | None = Field(
        default=None, description="Mean reward over completed trials; null when none completed."
    )
    total_cost: Cost | None = Field(
        default=None, description="Sum of the trials' known costs; null when none is known."
    )
    total_duration_sec: Seconds | None = Field(
        default=None, description="ended_at - started_at, when both are known."
    )
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    agents: dict[str, AgentSummary] = Field(default_factory=dict)
    results: list[TrialSummary] = Field(default_factory=list)
    rollout: JobAdditions | None = Field(
        default=None,
        exclude_if=_absent,
        description="What the project adds (see the module docstring); absent in a seed file.",
    )

    @model_validator(mode="before")
    @classmethod
    def _metrics_of_the_previous_version(cls, data: Any) -> Any:
        # The previous version wrote the metrics as a top-level key: read them where they live now.
        if not isinstance(data, dict) or "metrics" not in data:
            return data
        data = dict(data)
        metrics = data.pop("metrics")
        additions = data.get(PROJECT_KEY)
        if additions is not None and not isinstance(additions, dict):
            return {**data, "metrics": metrics}  # a malformed file: validation says what is wrong
        if additions is not None and "metrics" in additions:
            raise ValueError(
                f"metrics are both a top-level key (an earlier version's place) and under "
                f"{PROJECT_KEY}; keep {PROJECT_KEY}.metrics"
            )
        if metrics is not None:
            data[PROJECT_KEY] = {**(additions or {}), "metrics": metrics}
        return data

    @property
    def metrics(self) -> list[MetricValue]:
        """The job's metrics (`rollout.metrics`; none in a seed file)."""
        return (self.rollout.metrics if self.rollout else None) or []

    @model_validator(mode="after")
    def _counts_add_up(self) -> Self:
        _check_counts(self.total_trials, self.completed_trials, self.failed_trials, "")
        failures = self.rollout.failures if self.rollout else None
        if failures is not None and failures.total != self.failed_trials:
            raise ValueError(
                f"{PROJECT_KEY}.failures count {failures.total} failed trials, "
                f"failed_trials {self.failed_trials}"
            )
        return self


# --- counting ----------------------------------------------------------------------------------


def is_completed(reward: float | None) -> TypeGuard[float]:
    """The seed's `completed_trials`: the verifier ran and produced a reward, whatever its value."""
    return reward is not None


def is_failed(reward: float | None, error_type: ErrorType | None) -> bool:
    """The seed's `failed_trials`: an error (other than a teardown error) left no reward."""
    return (
        reward is None
        and error_type is not None
        and error_type is not ErrorType.ENVIRONMENT_TEARDOWN_FAILED
    )


def is_passed(reward: float | None) -> bool:
    """A completed trial that counts towards `pass_rate`: reward exactly 1.0."""
    return reward == 1.0
