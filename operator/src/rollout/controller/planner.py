"""Which trials a job has, and which to create next. Pure: no kopf, no API, no storage.

The plan is the seed's enumeration (agent, dataset, task, attempt) with each trial's deterministic
resource name. Creation follows the plan's order and never lets more than nConcurrentTrials of the
job's trials be unfinished at once. Which trials exist comes from the index (and the reconciler's
own recent creations), so a restarted operator resumes at the first trial that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from rollout.api.trials import TrialKey, enumerate_trials, trial_resource_name
from rollout.controller.datasets import ResolvedDataset, ResolvedTask
from rollout.controller.index import TrialEntry


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    """One trial of the plan: its key (with its place in the order), name and task."""

    key: TrialKey
    name: str
    task: ResolvedTask


@dataclass(frozen=True)
class JobPlan:
    """Every trial of a job, in the seed's order."""

    trials: tuple[PlannedTrial, ...]

    def __len__(self) -> int:
        return len(self.trials)

    @cached_property
    def names(self) -> frozenset[str]:
        """Every trial's name (made once: reconcilers ask on every pass)."""
        return frozenset(t.name for t in self.trials)


def plan_job(
    job_resource_name: str,
    agent_names: Sequence[str],
    datasets: Sequence[ResolvedDataset],
    n_attempts: int,
) -> JobPlan:
    """The job's trials in order, named from (job resource name, agent, dataset, task, attempt).

    The RolloutJob's metadata.name (unique in its namespace) names the trials, so two jobs that
    share a spec.jobName cannot collide.
    """
    tasks = {(d.name, t.name): t for d in datasets for t in d.tasks}
    keys = enumerate_trials(
        agent_names, [(d.name, [t.name for t in d.tasks]) for d in datasets], n_attempts
    )
    return JobPlan(
        tuple(
            PlannedTrial(
                key,
                trial_resource_name(
                    job_resource_name, key.agent, key.dataset, key.task, key.attempt
                ),
                tasks[(key.dataset, key.task)],
            )
            for key in keys
        )
    )


def unfinished_count(plan: JobPlan, trials: Mapping[str, TrialEntry]) -> int:
    """How many of the plan's trials exist and have not finished."""
    return sum(1 for t in plan.trials if (e := trials.get(t.name)) is not None and not e.finished)


def next_to_create(
    plan: JobPlan,
    exists: Callable[[str], bool],
    *,
    unfinished: int,
    concurrency: int,
    suspended: bool,
) -> list[PlannedTrial]:
    """The next trials to create, in order: as many missing trials as free slots allow.

    `unfinished` counts the job's trials that exist and have not finished; a suspended job creates
    none (its running trials finish on their own).
    """
    slots = concurrency - unfinished
    if suspended or slots <= 0:
        return []
    chosen: list[PlannedTrial] = []
    for trial in plan.trials:
        if not exists(trial.name):
            chosen.append(trial)
            if len(chosen) == slots:
                break
    return chosen


def all_finished(plan: JobPlan, trials: Mapping[str, TrialEntry]) -> bool:
    """Every trial of the plan exists and has finished."""
    return all((e := trials.get(t.name)) is not None and e.finished for t in plan.trials)
