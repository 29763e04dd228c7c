"""Running part of a dataset: task_ids in dataset order, then max_tasks, deterministically."""

from __future__ import annotations

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.subset import select_names

NAMES = ["gamma", "alpha", "beta", "delta", "epsilon", "zeta", "eta"]
WHERE = "job.yaml: datasets[0]"


def test_neither_keeps_every_name_in_order() -> None:
    assert select_names(NAMES, max_tasks=None, task_ids=None, where=WHERE) == NAMES


def test_max_tasks_keeps_the_first_n() -> None:
    assert select_names(NAMES, max_tasks=3, task_ids=None, where=WHERE) == NAMES[:3]
    assert select_names(NAMES, max_tasks=100, task_ids=None, where=WHERE) == NAMES


def test_task_ids_keep_the_dataset_order_not_the_listed_one() -> None:
    chosen = select_names(NAMES, max_tasks=None, task_ids=["eta", "alpha", "eta"], where=WHERE)
    assert chosen == ["alpha", "eta"]


def test_task_ids_then_max_tasks() -> None:
    ids = ["zeta", "beta", "gamma"]
    assert select_names(NAMES, max_tasks=2, task_ids=ids, where=WHERE) == ["gamma", "beta"]


def test_the_same_selection_every_time() -> None:
    runs = {
        tuple(select_names(NAMES, max_tasks=2, task_ids=["eta", "beta", "zeta"], where=WHERE))
        for _ in range(5)
    }
    assert runs == {("beta", "zeta")}


def test_an_unknown_id_is_named_with_a_hint() -> None:
    with pytest.raises(InvalidInput) as caught:
        select_names(NAMES, max_tasks=None, task_ids=["alpha", "bta", "nope"], where=WHERE)
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == (WHERE, "task_ids")
    assert problem.message == (
        "'bta' (did you mean 'beta'?), 'nope' are not in the dataset (it has 7 tasks: 'gamma', "
        "'alpha', 'beta', 'delta', 'epsilon', ...)"
    )


def test_many_unknown_ids_are_listed_up_to_five() -> None:
    unknown = [f"x{i}" for i in range(8)]
    with pytest.raises(InvalidInput) as caught:
        select_names(["a"], max_tasks=None, task_ids=unknown, where=WHERE, field="task_names")
    (problem,) = caught.value.problems
    assert problem.field == "task_names"
    assert problem.message == (
        "'x0', 'x1', 'x2', 'x3', 'x4' and 3 more are not in the dataset (it has 1 task: 'a')"
    )


def test_empty_task_ids_would_select_nothing() -> None:
    with pytest.raises(InvalidInput, match="is empty, so no task would run"):
        select_names(NAMES, max_tasks=None, task_ids=[], where=WHERE)


@pytest.mark.parametrize("max_tasks", [0, -1])
def test_max_tasks_below_one_is_a_value_error(max_tasks: int) -> None:
    with pytest.raises(ValueError, match="max_tasks must be at least 1") as caught:
        select_names(NAMES, max_tasks=max_tasks, task_ids=None, where=WHERE)
    assert not isinstance(caught.value, InvalidInput)
