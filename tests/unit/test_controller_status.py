"""The RolloutJob status computed from the plan and the index: counts, figures, conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rollout.api.additions import FailureCounts
from rollout.api.errors import ErrorType
from rollout.api.metrics import MetricType
from rollout.api.plan import JobPlan, ResolvedDataset, ResolvedTask, plan_job
from rollout.api.resources import JobConditionReason, JobPhase, RolloutJobStatus, TrialPhase
from rollout.api.task import TaskConfig
from rollout.controller.index import TrialEntry
from rollout.controller.status import (
    invalid_status,
    job_status,
    status_patch,
    storage_unavailable_status,
)

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


@pytest.fixture
def plan() -> JobPlan:
    tasks = tuple(ResolvedTask(t, "0" * 64, TaskConfig()) for t in ("t1", "t2", "t3"))
    return plan_job("job", ["oracle", "claude"], [ResolvedDataset("d", "1" * 64, tasks)], 1)


def entries(
    plan: JobPlan, *states: tuple[TrialPhase | None, float | None, ErrorType | None]
) -> dict[str, TrialEntry]:
    found: dict[str, TrialEntry] = {}
    for planned, (phase, reward, error) in zip(plan.trials, states, strict=False):
        key = planned.key
        found[planned.name] = TrialEntry(
            "ns", planned.name, "u", "1", key.agent, key.dataset, key.task, key.attempt,
            phase=phase, reward=reward, error_type=error, cost=0.5,
        )  # fmt: skip
    return found


def conditions(status: RolloutJobStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status.value, c.reason) for c in status.conditions}


def test_a_running_job_counts_its_trials_by_the_seeds_definitions(plan: JobPlan) -> None:
    trials = entries(
        plan,
        (TrialPhase.SUCCEEDED, 1.0, None),
        (TrialPhase.SUCCEEDED, 0.0, ErrorType.ENVIRONMENT_TEARDOWN_FAILED),  # completed
        (TrialPhase.FAILED, None, ErrorType.AGENT_EXECUTION_TIMEOUT),
        (TrialPhase.RUNNING, None, None),
        (None, None, None),  # created, waiting for its Pod
    )  # the sixth trial is not created yet
    status = job_status(
        plan=plan, trials=trials, previous=RolloutJobStatus(), generation=3, suspended=False,
        metrics=[MetricType.MAX], now=NOW,
    )  # fmt: skip
    assert status.phase is JobPhase.RUNNING
    counts = status.counts
    assert (counts.total, counts.pending, counts.running, counts.finished) == (6, 2, 1, 3)
    assert (counts.completed, counts.failed) == (2, 1)
    assert status.pass_rate == 0.5
    assert status.mean_reward == 0.5
    assert status.total_cost == 2.5  # every trial's cost counts, finished or not
    assert [(m.type, m.value) for m in status.metrics] == [(MetricType.MAX, 1.0)]
    assert status.agents["oracle"].completed_trials == 2
    assert status.agents["oracle"].failed_trials == 1
    assert status.agents["claude"].total_trials == 3
    assert status.failures == FailureCounts(agent=0, task=1, infrastructure=0)  # the oracle's
    assert status.observed_generation == 3
    assert status.started_at == NOW
    assert status.ended_at is None
    assert conditions(status) == {
        "Valid": ("True", JobConditionReason.SPEC_VALID),
        "Running": ("True", JobConditionReason.TRIALS_RUNNING),
    }


def test_the_same_situation_computes_the_same_status(plan: JobPlan) -> None:
    trials = entries(plan, (TrialPhase.RUNNING, None, None))
    first = job_status(
        plan=plan, trials=trials, previous=RolloutJobStatus(), generation=1, suspended=False,
        metrics=[], now=NOW,
    )  # fmt: skip
    again = job_status(
        plan=plan, trials=trials, previous=first, generation=1, suspended=False, metrics=[],
        now=NOW + timedelta(minutes=5),
    )  # fmt: skip
    assert status_patch(again) == status_patch(first)  # nothing to patch


def test_a_job_completes_only_with_its_result_written(plan: JobPlan) -> None:
    done = entries(plan, *[(TrialPhase.SUCCEEDED, 1.0, None)] * 6)
    started = NOW - timedelta(hours=1)
    previous = RolloutJobStatus(started_at=started)
    unwritten = job_status(
        plan=plan, trials=done, previous=previous, generation=1, suspended=False, metrics=[],
        now=NOW,
    )  # fmt: skip
    assert unwritten.phase is JobPhase.RUNNING
    written = job_status(
        plan=plan, trials=done, previous=previous, generation=1, suspended=False, metrics=[],
        now=NOW, result_uri="s3://b/jobs/j/result.json",
    )  # fmt: skip
    assert written.phase is JobPhase.COMPLETED
    assert (written.started_at, written.ended_at) == (started, NOW)
    assert written.result_uri == "s3://b/jobs/j/result.json"
    assert conditions(written)["Complete"] == ("True", JobConditionReason.ALL_TRIALS_FINISHED)
    assert conditions(written)["Running"] == ("False", JobConditionReason.ALL_TRIALS_FINISHED)


def test_a_finished_job_says_whose_failures_its_failed_trials_were(plan: JobPlan) -> None:
    pulled = (TrialPhase.FAILED, None, ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED)
    done = entries(plan, *[(TrialPhase.SUCCEEDED, 1.0, None)] * 5, pulled)
    status = job_status(
        plan=plan, trials=done, previous=RolloutJobStatus(), generation=1, suspended=False,
        metrics=[], now=NOW, result_uri="s3://b/jobs/j/result.json",
    )  # fmt: skip
    assert status.failures == FailureCounts(infrastructure=1)
    assert status_patch(status)["status"]["failures"] == {
        "agent": 0, "task": 0, "infrastructure": 1
    }  # fmt: skip
    complete = next(c for c in status.conditions if c.type == "Complete")
    assert complete.message == (
        "All 6 trials finished: 5 completed, 1 failed "
        "(0 the agent's, 0 the task's, 1 the infrastructure's)."
    )


def test_suspend_and_resume_show_in_phase_and_conditions(plan: JobPlan) -> None:
    trials = entries(plan, (TrialPhase.RUNNING, None, None))
    suspended = job_status(
        plan=plan, trials=trials, previous=RolloutJobStatus(), generation=2, suspended=True,
        metrics=[], now=NOW,
    )  # fmt: skip
    assert suspended.phase is JobPhase.SUSPENDED
    assert conditions(suspended)["Suspended"] == ("True", JobConditionReason.SUSPENDED_BY_SPEC)
    resumed = job_status(
        plan=plan, trials=trials, previous=suspended, generation=3, suspended=False, metrics=[],
        now=NOW,
    )  # fmt: skip
    assert resumed.phase is JobPhase.RUNNING
    assert conditions(resumed)["Suspended"] == ("False", JobConditionReason.RESUMED)


def test_an_invalid_job_fails_with_the_reason_and_recovers_when_fixed(plan: JobPlan) -> None:
    invalid = invalid_status(
        RolloutJobStatus(),
        reason=JobConditionReason.DATASET_NOT_FOUND,
        message="spec.datasets[0] (d): manifest s3://b/datasets/x.json does not exist",
        generation=1,
        now=NOW,
    )
    assert invalid.phase is JobPhase.FAILED
    assert conditions(invalid) == {
        "Valid": ("False", JobConditionReason.DATASET_NOT_FOUND),
        "Failed": ("True", JobConditionReason.DATASET_NOT_FOUND),
    }
    assert invalid.ended_at == NOW
    fixed = job_status(
        plan=plan, trials={}, previous=invalid, generation=2, suspended=False, metrics=[], now=NOW
    )
    assert fixed.phase is JobPhase.RUNNING
    assert conditions(fixed)["Failed"][0] == "False"
    assert conditions(fixed)["Valid"][0] == "True"


def test_unreachable_storage_leaves_the_job_waiting() -> None:
    status = storage_unavailable_status(
        RolloutJobStatus(), message="connection refused", generation=1, now=NOW
    )
    assert status.phase is JobPhase.PENDING
    assert conditions(status) == {"Valid": ("Unknown", JobConditionReason.STORAGE_UNAVAILABLE)}


def test_the_status_patch_removes_what_no_longer_applies(plan: JobPlan) -> None:
    status = job_status(
        plan=plan, trials={}, previous=RolloutJobStatus(), generation=1, suspended=False,
        metrics=[], now=NOW,
    )  # fmt: skip
    patch = status_patch(status)["status"]
    assert isinstance(patch, dict)
    assert patch["passRate"] is None  # removed by the merge patch
    assert patch["endedAt"] is None
    assert patch["counts"]["total"] == 6
    assert all("observedGeneration" in c for c in patch["conditions"])
