"""Which of a job's trials to create next. Pure: no kopf, no API, no storage.

The plan (`rollout.api.plan`) is the seed's enumeration (agent, dataset, task, attempt) with each
trial's deterministic resource name. Creation follows the plan's order and never lets more than
nConcurrentTrials of the job's trials be unfinished at once. Which trials exist comes from the
index (and the reconciler's own recent creations), so a restarted operator resumes at the first
trial that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rollout.api.plan import JobPlan, PlannedTrial
from rollout.controller.index import TrialEntry


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
    at_most: int | None = None,
) -> list[PlannedTrial]:
    """The next trials to create, in order: as many missing trials as free slots allow (and no
    more than `at_most`).

    `unfinished` counts the job's trials that exist and have not finished; a suspended job creates
    none (its running trials finish on their own).
    """
    slots = concurrency - unfinished
    if at_most is not None:
        slots = min(slots, at_most)
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
