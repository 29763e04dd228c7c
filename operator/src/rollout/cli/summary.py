"""The summary table printed when a job ends: per agent, trials, completed, failed, pass rate and
mean reward, then the job's metrics, its cost (when the operator has unit prices) and whose
failures the failed trials were (the agent's, the task's, the infrastructure's).

The figures come from the job's downloaded result.json when there is one (the operator's final
word), else from the RolloutJob's status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from rollout.api.errors import InvalidInput
from rollout.api.layout import RESULT_JSON
from rollout.api.results import JobResult
from rollout.api.rowresults import Summary as RowSummary
from rollout.cli.progress import JobView, number, percent


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    agent: str
    trials: int
    completed: int
    failed: int
    pass_rate: float | None
    mean_reward: float | None


@dataclass(frozen=True)
class Summary:
    job_name: str
    rows: list[Row]
    total: Row
    metrics: list[tuple[str, float | None]]
    failures: dict[str, int] | None = None
    """Failed trials by class (agent, task, infrastructure); None when the source has none."""
    total_cost: float | None = None
    """The job's cost (the sum of its trials' known costs); None without one."""


def from_result(result: JobResult) -> Summary:
    rows = [
        Row(
            name,
            agent.total_trials,
            agent.completed_trials,
            agent.failed_trials,
            agent.pass_rate,
            agent.mean_reward,
        )
        for name, agent in result.agents.items()
    ]
    total = Row(
        "all",
        result.total_trials,
        result.completed_trials,
        result.failed_trials,
        result.pass_rate,
        result.mean_reward,
    )
    metrics = [(m.type.value, m.value) for m in result.metrics]
    counts = result.rollout.failures if result.rollout else None
    failures = counts.model_dump() if counts is not None else None
    return Summary(result.job_name, rows, total, metrics, failures, result.total_cost)


def from_status(body: Mapping[str, Any]) -> Summary:
    view = JobView.from_body(body)
    agents = ((body.get("status") or {}).get("agents")) or {}
    rows = [
        Row(
            str(name),
            int(a.get("total") or 0),
            int(a.get("completed") or 0),
            int(a.get("failed") or 0),
            a.get("passRate"),
            a.get("meanReward"),
        )
        for name, a in agents.items()
        if isinstance(a, Mapping)
    ]
    total = Row("all", view.total, view.completed, view.failed, view.pass_rate, view.mean_reward)
    counts = (body.get("status") or {}).get("failures")
    failures = (
        {str(k): v for k, v in counts.items() if isinstance(v, int)}
        if isinstance(counts, Mapping)
        else None
    )
    cost = (body.get("status") or {}).get("totalCost")
    total_cost = (
        float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    )
    return Summary(view.job_name, rows, total, view.metrics, failures, total_cost)


def load_summary(job_dir: Path, body: Mapping[str, Any] | None) -> Summary | None:
    """From `job_dir/result.json` if it is there and valid, else from the RolloutJob."""
    path = job_dir / RESULT_JSON
    if path.is_file():
        try:
            return from_result(JobResult.from_json(path.read_bytes(), str(path)))
        except InvalidInput:
            pass  # fall back to the status, which the operator wrote from the same trials
    return from_status(body) if body is not None else None


def print_summary(console: Console, summary: Summary) -> None:
    table = Table(title=f"Job {summary.job_name}", title_justify="left")
    for column in ("Agent", "Trials", "Completed", "Failed", "Pass rate", "Mean reward"):
        table.add_column(column, justify="left" if column == "Agent" else "right")
    # A total line only when there is more than one agent to add up.
    rows = [*summary.rows, summary.total] if len(summary.rows) > 1 else summary.rows
    for row in rows or [summary.total]:
        table.add_row(
            row.agent,
            str(row.trials),
            str(row.completed),
            str(row.failed),
            percent(row.pass_rate),
            number(row.mean_reward),
        )
    console.print(table)
    if summary.metrics:
        metrics = ", ".join(f"{name} {number(value)}" for name, value in summary.metrics)
        console.print(f"Metrics: {metrics}", markup=False)
    if summary.total_cost is not None:
        console.print(
            f"Cost: {number(summary.total_cost)} (at the operator's unit prices)", markup=False
        )
    if summary.failures and any(summary.failures.values()):
        classes = ", ".join(f"{name} {count}" for name, count in summary.failures.items())
        console.print(f"Failed trials by class: {classes}", markup=False)


def print_row_summary(console: Console, job_dir: Path) -> None:
    """Seed 002's summary of a job with data rows (`summary_<benchmark>_<timestamp>.json` in
    `job_dir`), when it has one: its figures and where its files are."""
    found = sorted(job_dir.glob("summary_*.json"))
    if not found:
        return
    try:
        summary = RowSummary.model_validate_json(found[-1].read_bytes())
    except ValidationError:
        return
    console.print(
        f"Benchmark {summary.benchmark_name}: {summary.total_tasks} rows, "
        f"{summary.successful_tasks} answered, {summary.failed_tasks} failed, average score "
        f"{number(summary.average_score)} ({summary.metric or 'no metric'})",
        markup=False,
    )
    console.print(f"Summary: {found[-1]}", markup=False)
