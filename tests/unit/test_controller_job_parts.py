"""The small parts of a job's reconciler: its spec per generation (`jobspec`), its own recent
writes (`ownwrites`), its timing (`pacing`), its TTL (`ttl`) and its gauges (`gauges`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollout.api.plan import JobPlan, ResolvedDataset, ResolvedTask, plan_job
from rollout.api.resources import JobConditionReason, JobPhase, RolloutJob, StorageSpec, TrialPhase
from rollout.api.task import TaskConfig
from rollout.controller.config import OperatorConfig
from rollout.controller.gauges import trial_gauges
from rollout.controller.index import TrialEntry
from rollout.controller.jobspec import (
    Invalid,
    Planned,
    Unplanned,
    check_job,
    parse_job,
    parse_status,
    plan_trials,
)
from rollout.controller.ownwrites import PENDING_WRITE_TTL_SEC, TRIAL_TTL_SEC, OwnWrites
from rollout.controller.pacing import ERROR_BACKOFF_SEC, RESYNC_SEC, Pacer, recheck_delay
from rollout.controller.ttl import seconds_until_expiry, ttl_after_finished

WHERE = "RolloutJob ns/job"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [{"name": "d", "digest": "a" * 64}],
            **spec,
        },
    }


def plan(*tasks: str) -> JobPlan:
    resolved = tuple(ResolvedTask(t, "c" * 64, TaskConfig()) for t in tasks)
    return plan_job("job", ["oracle"], [ResolvedDataset("d", "a" * 64, resolved)], 1)


# --- jobspec --------------------------------------------------------------------------------------


def test_a_job_body_is_parsed_or_said_invalid() -> None:
    parsed = parse_job(body(), WHERE)
    assert isinstance(parsed, Unplanned)
    assert parsed.job.metadata.name == "job"
    invalid = parse_job(body(nAttempts=0), WHERE)
    assert isinstance(invalid, Invalid)
    assert invalid.reason == JobConditionReason.INVALID_SPEC
    assert "nAttempts" in invalid.message


def job(**spec: Any) -> RolloutJob:
    parsed = parse_job(body(**spec), WHERE)
    assert isinstance(parsed, Unplanned)
    return parsed.job


def test_a_job_needs_a_bucket_and_an_environment_type_that_runs_as_pods() -> None:
    default = StorageSpec(bucket="default", prefix="p")
    storage = check_job(job(), default, WHERE)
    assert not isinstance(storage, Invalid)
    assert storage.bucket == "default"
    nowhere = check_job(job(), None, WHERE)
    assert isinstance(nowhere, Invalid)
    assert "spec.storage is not set" in nowhere.message
    elsewhere = check_job(job(environment={"type": "local"}), default, WHERE)
    assert isinstance(elsewhere, Invalid)
    assert elsewhere.reason == JobConditionReason.UNSUPPORTED_ENVIRONMENT
    assert "spec.environment.type is 'local'" in elsewhere.message
    for provider in ("modal", "daytona", "e2b"):  # the bridge's
        assert not isinstance(
            check_job(job(environment={"type": provider}), default, WHERE), Invalid
        )
    docker = check_job(job(environment={"type": "docker"}), default, WHERE)
    assert not isinstance(docker, Invalid)  # the task's containers, as a Pod
    remote = check_job(
        job(environment={"type": "docker", "dockerHost": "tcp://engine:2376"}), default, WHERE
    )
    assert not isinstance(remote, Invalid)  # the bridge runs them on that engine


def test_trials_are_planned_from_the_datasets() -> None:
    storage = check_job(job(), StorageSpec(bucket="b"), WHERE)
    assert not isinstance(storage, Invalid)
    tasks = (ResolvedTask("t", "c" * 64, TaskConfig()),)
    planned = plan_trials(job(), "job", [ResolvedDataset("d", "a" * 64, tasks)], storage, WHERE)
    assert isinstance(planned, Planned)
    assert len(planned.plan) == 1
    # The model refuses an agent named twice; the plan refuses it too, should one get through.
    one = job()
    twice = one.model_copy(
        update={"spec": one.spec.model_copy(update={"agents": one.spec.agents * 2})}
    )
    refused = plan_trials(twice, "job", [], storage, WHERE)
    assert isinstance(refused, Invalid)
    assert "appears twice" in refused.message


def test_an_unreadable_status_counts_as_none() -> None:
    assert parse_status({"phase": "Running"}).phase == JobPhase.RUNNING
    assert parse_status({"phase": "Sideways"}).phase is None
    assert parse_status(None).phase is None


# --- ownwrites ------------------------------------------------------------------------------------


def trial_body(name: str, rv: str, phase: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"agent": {"name": "oracle"}, "datasetName": "d", "taskName": "t", "attempt": 1},
        "status": {"phase": phase} if phase else {},
    }


def indexed(name: str, rv: str, phase: TrialPhase | None = None) -> TrialEntry:
    return TrialEntry("ns", name, f"uid-{name}", rv, "oracle", "d", "t", 1, phase=phase)


def test_own_trial_writes_show_until_the_watch_catches_up() -> None:
    clock = Clock()
    writes = OwnWrites(clock)
    writes.trial_written(trial_body("a", "5", "Running"))
    writes.trial_written(trial_body("b", "6"))  # created: not in the index yet
    seen = writes.trials([indexed("a", "4")])
    assert seen["a"].phase == TrialPhase.RUNNING  # ours is newer than the index's
    assert "b" in seen
    # The watch has caught up with "a" (or gone past it): the index's entry wins from now on.
    caught_up = writes.trials([indexed("a", "7", TrialPhase.SUCCEEDED)])
    assert caught_up["a"].phase == TrialPhase.SUCCEEDED
    assert writes.trials([indexed("a", "4")])["a"].phase is None
    # A write the watch never shows is forgotten after a while.
    clock.now += TRIAL_TTL_SEC + 1
    assert "b" not in writes.trials([])


def test_pod_writes_are_pending_for_a_while() -> None:
    clock = Clock()
    writes = OwnWrites(clock)
    writes.pods_created.add("p")
    assert "p" in writes.pods_created
    assert "q" not in writes.pods_created
    writes.pods_created.discard("p")  # the watch shows it
    assert "p" not in writes.pods_created
    writes.pods_deleted.add("p")
    clock.now += PENDING_WRITE_TTL_SEC + 1
    assert "p" not in writes.pods_deleted


def test_the_jobs_own_status_patch_wins_until_the_body_is_newer() -> None:
    writes = OwnWrites(Clock())
    job_body: dict[str, Any] = {"metadata": {"resourceVersion": "10"}, "status": {}}
    assert writes.job_status(job_body).phase is None
    writes.job_status_written(
        {"metadata": {"resourceVersion": "12"}, "status": {"phase": "Running"}}
    )
    assert writes.job_status(job_body).phase == JobPhase.RUNNING  # the body is older
    job_body = {"metadata": {"resourceVersion": "13"}, "status": {"phase": "Suspended"}}
    assert writes.job_status(job_body).phase == JobPhase.SUSPENDED


# --- pacing ---------------------------------------------------------------------------------------


def pacer(clock: Clock) -> Pacer:
    return Pacer(status_interval_sec=2.0, recheck_sec=0.5, clock=clock)


def test_the_first_pass_looks_at_every_trial_then_only_at_changed_ones() -> None:
    clock = Clock()
    pace, trials = pacer(clock), plan("t1", "t2", "t3")
    names = [t.name for t in trials.trials]
    assert pace.to_look_at(trials) == names
    pace.succeeded()
    pace.poked({names[1], "not-of-this-job"})
    assert pace.to_look_at(trials) == [names[1]]
    pace.succeeded()
    assert pace.to_look_at(trials) == []
    clock.now += RESYNC_SEC  # every trial again, now and then
    assert pace.to_look_at(trials) == names
    pace.succeeded()
    pace.everything()  # a new spec
    assert pace.to_look_at(trials) == names


def test_a_failed_pass_keeps_what_was_dirty_and_backs_off() -> None:
    clock = Clock()
    pace, trials = pacer(clock), plan("t1", "t2")
    pace.to_look_at(trials)
    pace.succeeded()
    name = trials.trials[0].name
    pace.poked({name})
    assert pace.failed() == ERROR_BACKOFF_SEC[0]
    assert pace.failed() == ERROR_BACKOFF_SEC[1]
    assert pace.to_look_at(trials) == [name]
    pace.succeeded()
    assert pace.failed() == ERROR_BACKOFF_SEC[0]


def test_waiting_pods_are_looked_at_again_when_due() -> None:
    clock = Clock()
    pace, trials = pacer(clock), plan("t1", "t2")
    first, second = (t.name for t in trials.trials)
    assert pace.looked(pace.to_look_at(trials), {first}) == 0.5
    pace.succeeded()
    clock.now += 0.2
    assert pace.to_look_at(trials) == []  # not yet
    assert pace.looked([], set()) == pytest.approx(
        0.3
    )  # still waiting: look again in the rest of the time
    clock.now += 0.3
    assert pace.to_look_at(trials) == [first]
    assert pace.looked([first], set()) is None  # no longer waits
    assert second not in pace.to_look_at(trials)


def test_a_trial_due_sooner_than_the_recheck_is_looked_at_when_due() -> None:
    clock = Clock()
    pace, trials = pacer(clock), plan("t1", "t2")
    first = trials.trials[0].name
    assert pace.looked(pace.to_look_at(trials), {first}, due_in=0.1) == pytest.approx(0.1)
    pace.succeeded()
    clock.now += 0.1
    assert pace.to_look_at(trials) == [first]
    # Due later than the recheck: the recheck's pace holds.
    assert pace.looked([first], {first}, due_in=5.0) == 0.5


def test_the_status_is_due_once_per_interval() -> None:
    clock = Clock()
    pace = pacer(clock)
    assert pace.status_due_in() <= 0
    pace.status_checked()
    clock.now += 0.5
    assert pace.status_due_in() == 1.5


def test_waiting_pods_are_rechecked_at_a_fraction_of_the_grace() -> None:
    config = OperatorConfig(runner_image="r", unschedulable_grace_sec=2, image_pull_grace_sec=60)
    assert recheck_delay(config) == 0.5
    slow = OperatorConfig(runner_image="r", unschedulable_grace_sec=600, image_pull_grace_sec=600)
    assert recheck_delay(slow) == 15.0


# --- ttl and gauges -------------------------------------------------------------------------------


def test_the_ttl_is_read_tolerantly_and_counts_from_the_end() -> None:
    assert ttl_after_finished({"ttlSecondsAfterFinished": 30}) == 30
    assert ttl_after_finished({"ttlSecondsAfterFinished": 0}) == 0
    for wrong in (-1, True, "30", 1.5, None):
        assert ttl_after_finished({"ttlSecondsAfterFinished": wrong}) is None
    assert ttl_after_finished(None) is None
    ended = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    assert seconds_until_expiry(30, ended, ended + timedelta(seconds=10)) == 20
    assert seconds_until_expiry(30, ended, ended + timedelta(seconds=40)) == -10
    assert seconds_until_expiry(None, ended, ended) is None
    assert seconds_until_expiry(30, None, ended) is None


def test_gauges_count_the_jobs_trials_by_phase() -> None:
    trials = plan("t1", "t2", "t3", "t4")
    names = [t.name for t in trials.trials]
    entries = {
        names[0]: indexed(names[0], "1", TrialPhase.SUCCEEDED),
        names[1]: indexed(names[1], "1", TrialPhase.FAILED),
        names[2]: indexed(names[2], "1", TrialPhase.RUNNING),
    }
    gauges = trial_gauges(trials, entries)
    assert gauges.by_phase == {"Pending": 1, "Running": 1, "Succeeded": 1, "Failed": 1}
    assert gauges.active == 1
