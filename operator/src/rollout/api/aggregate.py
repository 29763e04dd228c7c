"""Counting a job's trials once: the job's and each agent's figures, its metrics, its failed
trials per failure class, and the job's result.json built from its trials.

The definitions of completed, failed and passed are `rollout.api.results`' (`is_completed`,
`is_failed`, `is_passed`), the failure classes `rollout.api.failures`'; this module applies them
to many trials in one pass, small enough for 100,000 trials in memory. The operator aggregates
from its index, the CLI from trial result files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from rollout.api.additions import AgentAdditions, FailureCounts, JobAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass, failure_class
from rollout.api.metrics import MetricType, MetricValue, compute_metric
from rollout.api.results import (
    AgentSummary,
    JobResult,
    TrialResult,
    TrialSummary,
    is_completed,
    is_failed,
    is_passed,
)


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What aggregation needs of one trial, small enough to keep 100,000 of them in memory.

    The operator builds these from its index (a pending trial has neither reward nor error); the
    CLI gets them from trial result.json files with `from_result`. `failure_class` is the class
    the trial's record gives its error; without one, the table's (`error_class`).
    """

    task_name: str
    dataset_name: str
    agent_name: str
    attempt: int
    reward: float | None = None
    error_type: ErrorType | None = None
    cost: float | None = None
    failure_class: FailureClass | None = None

    @classmethod
    def from_result(cls, result: TrialResult) -> TrialOutcome:
        return cls(
            task_name=result.task_name,
            dataset_name=result.dataset_name,
            agent_name=result.agent_name,
            attempt=result.attempt,
            reward=result.reward,
            error_type=result.error.type if result.error else None,
            cost=result.cost,
            failure_class=result.failure_class,
        )

    @property
    def error_class(self) -> FailureClass | None:
        """Whose failure the trial's error is; None without an error."""
        if self.error_type is None:
            return None
        return self.failure_class or failure_class(self.error_type, agent_name=self.agent_name)

    @property
    def completed(self) -> bool:
        return is_completed(self.reward)

    @property
    def failed(self) -> bool:
        return is_failed(self.reward, self.error_type)

    @property
    def passed(self) -> bool:
        return is_passed(self.reward)


@dataclass(slots=True)
class _Tally:
    """Running counts for the job or one agent."""

    total: int = 0
    passed: int = 0
    rewards: list[float] = field(default_factory=list)
    costs: list[float] = field(default_factory=list)
    failures: dict[FailureClass, int] = field(
        default_factory=lambda: dict.fromkeys(FailureClass, 0)
    )
    """Failed trials by class; they add up to the failed trials."""

    def add(self, outcome: TrialOutcome) -> None:
        self.total += 1
        if is_completed(outcome.reward):
            self.rewards.append(outcome.reward)
            self.passed += is_passed(outcome.reward)
        elif is_failed(outcome.reward, outcome.error_type) and (cls := outcome.error_class):
            self.failures[cls] += 1
        if outcome.cost is not None:
            self.costs.append(outcome.cost)

    @property
    def completed(self) -> int:
        return len(self.rewards)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def failure_counts(self) -> FailureCounts:
        return FailureCounts(**{c.value: n for c, n in self.failures.items()})

    @property
    def pass_rate(self) -> float | None:
        return self.passed / len(self.rewards) if self.rewards else None

    @property
    def mean_reward(self) -> float | None:
        return compute_metric(MetricType.MEAN, self.rewards)

    @property
    def total_cost(self) -> float | None:
        return math.fsum(self.costs) if self.costs else None

    def agent_summary(self) -> AgentSummary:
        return AgentSummary(
            total_trials=self.total,
            completed_trials=self.completed,
            failed_trials=self.failed,
            pass_rate=self.pass_rate,
            mean_reward=self.mean_reward,
            total_cost=self.total_cost,
        )


@dataclass(frozen=True)
class JobSummary:
    """A job's figures without the per-trial list: what the RolloutJob status shows.

    The job's own figures are defined exactly as each agent's, so they are one `AgentSummary`;
    `failures` and `agent_failures` count the failed trials per class.
    """

    job: AgentSummary
    agents: dict[str, AgentSummary]
    metrics: list[MetricValue]
    failures: FailureCounts
    agent_failures: dict[str, FailureCounts]


def _outcome(trial: TrialResult | TrialOutcome) -> TrialOutcome:
    return trial if isinstance(trial, TrialOutcome) else TrialOutcome.from_result(trial)


def summarize(
    trials: Iterable[TrialResult | TrialOutcome], *, metrics: Sequence[MetricType] = ()
) -> JobSummary:
    """Count the trials once, O(n): the job's figures, each agent's, and the configured metrics.

    Agents appear in the order their first trial appears (the enumeration order puts agents
    first, so this is job.yaml's order). Pass every trial of the job, finished or not, so that
    `total_trials` counts them all.
    """
    job = _Tally()
    agents: dict[str, _Tally] = {}
    for trial in trials:
        outcome = _outcome(trial)
        job.add(outcome)
        tally = agents.get(outcome.agent_name)
        if tally is None:
            tally = agents[outcome.agent_name] = _Tally()
        tally.add(outcome)
    return JobSummary(
        job=job.agent_summary(),
        agents={name: tally.agent_summary() for name, tally in agents.items()},
        metrics=[MetricValue(type=m, value=compute_metric(m, job.rewards)) for m in metrics],
        failures=job.failure_counts(),
        agent_failures={name: tally.failure_counts() for name, tally in agents.items()},
    )


def aggregate(
    job_name: str,
    trials: Iterable[TrialResult | TrialOutcome],
    *,
    metrics: Sequence[MetricType] = (),
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
) -> JobResult:
    """The job's result.json from its trials, listed in trial order.

    `started_at`/`ended_at` are the job's own (the operator and the CLI know them); nothing is
    guessed from the trials, because a running job has no end yet. Use `trial_span` to get them
    from trial result files when rebuilding a finished job's result. `total_duration_sec` is
    `ended_at - started_at` when both are known and null otherwise: a sum of trial durations would
    measure compute time, not the job's duration, once trials run concurrently.
    What the project adds (the metrics, the failed trials per class, for the job and per agent)
    goes under the file's `rollout` key; `metrics` are the job.yaml metrics (`[]` for none).
    """
    listed: list[TrialOutcome] = [_outcome(t) for t in trials]
    summary = summarize(listed, metrics=metrics)
    duration: float | None = None
    if started_at is not None and ended_at is not None:
        duration = (ended_at - started_at).total_seconds()
        if duration < 0:
            raise ValueError(f"job {job_name!r} ends ({ended_at}) before it starts ({started_at})")
    return JobResult(
        job_name=job_name,
        **dict(summary.job),
        total_duration_sec=duration,
        started_at=started_at,
        ended_at=ended_at,
        agents=summary.agents,
        results=[
            TrialSummary(
                task_name=o.task_name,
                dataset_name=o.dataset_name,
                agent_name=o.agent_name,
                attempt=o.attempt,
                reward=o.reward,
            )
            for o in listed
        ],
        rollout=JobAdditions(
            metrics=summary.metrics,
            failures=summary.failures,
            agents={
                name: AgentAdditions(failures=counts)
                for name, counts in summary.agent_failures.items()
            },
        ),
    )


def trial_span(trials: Iterable[TrialResult]) -> tuple[datetime | None, datetime | None]:
    """The earliest trial start and the latest trial end, for a job rebuilt from its trial files."""
    first: datetime | None = None
    last: datetime | None = None
    for trial in trials:
        started, ended = trial.timestamps.started_at, trial.timestamps.ended_at
        if started is not None and (first is None or started < first):
            first = started
        if ended is not None and (last is None or ended > last):
            last = ended
    return first, last
