"""What lets the operator start trials fast: consecutive trial work at once (`jobexec`), the
trials still asked for in the plan's order, one lane per job for their creation (`kubeapi`), and
kopf's per-event diff base left empty for kinds no daemon serves (`settings`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kopf
import pytest

from rollout.controller import handlers
from rollout.controller.jobdecide import EnsureImage, PatchJobStatus, WriteJobConfig
from rollout.controller.jobexec import (
    CreateTrial,
    TrialStep,
    TrialWork,
    Turns,
    _trial_work_grouped,
    at_most,
)
from rollout.controller.kubeapi import TRIAL_LANES, namespaced_path, trial_lane

# --- at most so many at once -------------------------------------------------------------------


async def test_at_most_runs_that_many_at_once_and_all_of_them() -> None:
    running, most, done = 0, 0, []

    def call(index: int) -> Callable[[], Any]:
        async def go() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            running -= 1
            done.append(index)

        return go

    await at_most([call(i) for i in range(20)], 4)
    assert most == 4
    assert sorted(done) == list(range(20))


async def test_after_a_failure_at_most_starts_nothing_more_and_raises_it() -> None:
    started: list[int] = []
    finished: list[int] = []
    release = asyncio.Event()

    def call(index: int) -> Callable[[], Any]:
        async def go() -> None:
            started.append(index)
            if index == 1:
                raise RuntimeError("the API said no")
            await release.wait()  # those under way finish
            finished.append(index)

        return go

    async def let_go() -> None:
        await asyncio.sleep(0)
        release.set()

    with pytest.raises(RuntimeError, match="the API said no"):
        await asyncio.gather(at_most([call(i) for i in range(10)], 3), let_go())
    assert started == [0, 1]  # the third worker found the failure before starting the third
    assert finished == [0]


# --- grouping a decision's actions ----------------------------------------------------------


def test_consecutive_trial_steps_and_creations_are_grouped_in_order() -> None:
    step_a, step_b = object.__new__(TrialStep), object.__new__(TrialStep)
    make_a, make_b = object.__new__(CreateTrial), object.__new__(CreateTrial)
    config, image, status = (
        object.__new__(WriteJobConfig),
        object.__new__(EnsureImage),
        object.__new__(PatchJobStatus),
    )
    grouped = list(
        _trial_work_grouped([config, step_a, step_b, image, make_a, make_b, status, step_a])
    )
    assert grouped == [
        config,
        TrialWork((step_a, step_b)),
        image,
        TrialWork((make_a, make_b)),
        status,
        TrialWork((step_a,)),
    ]
    assert list(_trial_work_grouped([step_a, make_a])) == [
        TrialWork((step_a,)),
        TrialWork((make_a,)),
    ]


# --- the plan's order ---------------------------------------------------------------------------


async def test_turns_let_each_trial_be_asked_for_only_after_the_one_before() -> None:
    names = [f"t{i}" for i in range(8)]
    turns = Turns(names)
    asked: list[str] = []

    async def create(name: str, pause: int) -> None:
        for _ in range(pause):  # the later ones get there first
            await asyncio.sleep(0)
        async with turns.take(name):
            asked.append(name)

    await asyncio.gather(*(create(name, 8 - i) for i, name in enumerate(names)))
    assert asked == names


async def test_a_trial_not_made_holds_up_none_after_it() -> None:
    turns = Turns(["a", "b", "c"])
    asked: list[str] = []

    async def skipped() -> None:
        turns.done("b")  # its job is going: never asked for

    async def create(name: str) -> None:
        async with turns.take(name):
            asked.append(name)

    await asyncio.wait_for(asyncio.gather(create("c"), create("a"), skipped()), 5)
    assert asked == ["a", "c"]


async def test_a_window_lets_that_many_be_asked_for_at_once() -> None:
    turns = Turns(["a", "b", "c"], window=2)
    async with turns.take("a"), turns.take("b"):
        pass  # b did not wait for a
    async with turns.take("c"):
        pass


# --- the API client's lanes ---------------------------------------------------------------------


def trial_of(job: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"rollout.dev/job": job}}}


def test_one_jobs_trials_always_go_down_one_lane() -> None:
    lanes = {trial_lane("ns", trial_of("eval")) for _ in range(5)}
    assert len(lanes) == 1
    spread = {trial_lane("ns", trial_of(f"job-{i}")) for i in range(40)}
    assert spread == set(range(TRIAL_LANES))  # other jobs' mostly go beside it
    assert 0 <= trial_lane("ns", {}) < TRIAL_LANES


def test_request_paths() -> None:
    assert namespaced_path("/api/v1", "ns", "pods") == "/api/v1/namespaces/ns/pods"
    assert (
        namespaced_path("/apis/rollout.dev/v1alpha1", "ns", "rollouttrials", "t-1", "status")
        == "/apis/rollout.dev/v1alpha1/namespaces/ns/rollouttrials/t-1/status"
    )
    assert namespaced_path("/api/v1", "a/b", "pods", "x y") == "/api/v1/namespaces/a%2Fb/pods/x%20y"


# --- kopf's diff base ---------------------------------------------------------------------------


def test_kopf_watches_jobs_and_images_only() -> None:
    """Trials and their Pods are the operator's own watches (`watches`): kopf would keep a
    memory of its own for each of 100,000 of them."""
    assert handlers.reconcile_job is not None
    registry = kopf.get_default_registry()
    every = [
        *registry._indexing.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
        *registry._changing.get_all_handlers(),
    ]
    plurals = {h.selector.any_name or h.selector.plural for h in every}
    assert plurals == {"rolloutjobs", "rolloutimages"}
