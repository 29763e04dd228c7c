"""The job-level metrics of job.yaml (`metrics: [{type: mean}]`), computed over rewards.

A metric is computed over the rewards of completed trials only (the trials whose verifier produced
a reward), the same set that `mean_reward` uses. With no completed trial there is nothing to
measure, so every metric is null then, never 0 or NaN.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from enum import StrEnum

from pydantic import Field, FiniteFloat

from rollout.api.base import ApiModel


class MetricType(StrEnum):
    """The metrics a job can ask for, as job.yaml spells them."""

    SUM = "sum"
    MIN = "min"
    MAX = "max"
    MEAN = "mean"


def compute_metric(metric_type: MetricType, rewards: Collection[float]) -> float | None:
    """The metric over `rewards` (the rewards of completed trials); None when there are none.

    Sums use `math.fsum` so that a mean over 100,000 rewards does not drift with the order in
    which trials finished.
    """
    if not rewards:
        return None
    match metric_type:
        case MetricType.SUM:
            return math.fsum(rewards)
        case MetricType.MIN:
            return min(rewards)
        case MetricType.MAX:
            return max(rewards)
        case MetricType.MEAN:
            return math.fsum(rewards) / len(rewards)
    raise ValueError(f"unknown metric type {metric_type!r}")  # pragma: no cover


class Metric(ApiModel):
    """A job-level metric over trial rewards."""

    type: MetricType = Field(description="One of sum, min, max, mean.")


class MetricValue(ApiModel):
    """A configured metric and its current value."""

    type: MetricType = Field(description="The metric.")
    value: FiniteFloat | None = Field(
        None, description="Over the rewards of completed trials; null when none completed."
    )
