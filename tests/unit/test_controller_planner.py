"""The job's plan (the seed's order, deterministic names) and which trials to create next."""

from __future__ import annotations

import pytest

from rollout.api.plan import JobPlan, ResolvedDataset, ResolvedTask, plan_job
from rollout.api.resources import TrialPhase
from rollout.api.task import TaskConfig
from rollout.api.trials import trial_resource_name
from rollout.controller.index import TrialEntry
from rollout.controller.planner import all_finished, next_to_create, unfinished_count


def dataset(name: str, *tasks: str) -> ResolvedDataset:
    return ResolvedDataset(
        name, "0" * 64, tuple(ResolvedTask(t, t[0] * 64, TaskConfig()) for t in tasks)
    )


def entry(name: str, phase: TrialPhase | None = None) -> TrialEntry:
    return TrialEntry("ns", name, f"uid-{name}", "1", "a", "d", "t", 1, phase=phase)


@pytest.fixture
def plan() -> JobPlan:
    return plan_job(
        "job", ["oracle", "claude"], [dataset("d1", "t1", "t2"), dataset("d2", "t1")], 2
    )


def test_the_plan_follows_the_seeds_order_with_deterministic_names(plan: JobPlan) -> None:
    keys = [(t.key.agent, t.key.dataset, t.key.task, t.key.attempt) for t in plan.trials]
    assert keys == [
        (agent, ds, task, attempt)
        for agent in ("oracle", "claude")
        for ds, tasks in (("d1", ("t1", "t2")), ("d2", ("t1",)))
        for task in tasks
        for attempt in (1, 2)
    ]
    assert [t.name for t in plan.trials] == [trial_resource_name("job", *k) for k in keys]
    assert [t.key.index for t in plan.trials] == list(range(12))
    # The same task name in two datasets keeps each dataset's own task.
    d2 = next(t for t in plan.trials if t.key.dataset == "d2")
    assert d2.task.name == "t1"
    assert len(plan.names) == 12


def test_duplicate_agents_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="agent 'a' appears twice"):
        plan_job("job", ["a", "a"], [dataset("d", "t")], 1)


def test_the_next_trials_fill_the_free_slots_in_order(plan: JobPlan) -> None:
    names = [t.name for t in plan.trials]
    existing = {names[0]: entry(names[0], TrialPhase.SUCCEEDED), names[2]: entry(names[2])}
    chosen = next_to_create(
        plan,
        existing.__contains__,
        unfinished=unfinished_count(plan, existing),
        concurrency=3,
        suspended=False,
    )
    # One trial runs (names[2]), so two slots: the first two missing trials, in order.
    assert [t.name for t in chosen] == [names[1], names[3]]


def test_a_look_creates_at_most_so_many_however_many_slots_are_free(plan: JobPlan) -> None:
    names = [t.name for t in plan.trials]
    some = next_to_create(
        plan, {}.__contains__, unfinished=0, concurrency=100, suspended=False, at_most=2
    )
    assert [t.name for t in some] == names[:2]  # the first two; the next look the next ones


def test_no_trial_starts_when_the_job_is_full_or_suspended(plan: JobPlan) -> None:
    names = [t.name for t in plan.trials]
    running = {n: entry(n, TrialPhase.RUNNING) for n in names[:3]}
    assert unfinished_count(plan, running) == 3
    full = next_to_create(plan, running.__contains__, unfinished=3, concurrency=3, suspended=False)
    assert full == []
    idle = next_to_create(plan, {}.__contains__, unfinished=0, concurrency=3, suspended=True)
    assert idle == []


def test_a_job_is_finished_only_when_every_planned_trial_has_ended(plan: JobPlan) -> None:
    names = [t.name for t in plan.trials]
    ended = {n: entry(n, TrialPhase.FAILED) for n in names}
    assert all_finished(plan, ended)
    ended[names[5]] = entry(names[5], TrialPhase.RUNNING)
    assert not all_finished(plan, ended)
    del ended[names[5]]
    assert not all_finished(plan, ended)  # a trial not created yet is not finished
