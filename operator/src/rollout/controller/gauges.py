"""A job's share of the trial gauges (`metrics.JobGauges`): its trials by phase, and how many are
active. Pure; the reconciler reports the figures whenever it works out the job's status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rollout.api.plan import JobPlan
from rollout.api.resources import TrialPhase
from rollout.controller.index import RunnerStarted, TrialEntry, no_runner_started
from rollout.controller.planner import unfinished_count
from rollout.controller.status import trial_counts


@dataclass(frozen=True)
class TrialGauges:
    """The job's trials by phase (Pending includes those not created yet) and the active ones
    (created and not finished)."""

    by_phase: Mapping[str, int]
    active: int


def trial_gauges(
    plan: JobPlan,
    trials: Mapping[str, TrialEntry],
    runner_started: RunnerStarted = no_runner_started,
) -> TrialGauges:
    running, finished = trial_counts(plan, trials, rows=False, runner_started=runner_started)
    succeeded = sum(
        1 for t in plan.trials if (e := trials.get(t.name)) and e.phase == TrialPhase.SUCCEEDED
    )
    return TrialGauges(
        {
            TrialPhase.PENDING.value: len(plan) - running - finished,
            TrialPhase.RUNNING.value: running,
            TrialPhase.SUCCEEDED.value: succeeded,
            TrialPhase.FAILED.value: finished - succeeded,
        },
        active=unfinished_count(plan, trials),
    )
