"""What a job's reconciler decides (`jobdecide.decide_job`), from a view of the job and the time:
which trials to create and in what order, each trial's step, the job's status and its files,
its TTL, and when to look again. No API, no storage: every decision from a plain view."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.plan import ResolvedDataset, ResolvedTask, plan_job
from rollout.api.resources import (
    ImagePhase,
    JobConditionReason,
    JobConditionType,
    JobPhase,
    RolloutImage,
    RolloutJob,
    RolloutJobStatus,
    StorageSpec,
    TrialPhase,
    find_condition,
)
from rollout.api.results import TrialError
from rollout.api.task import parse_task_config
from rollout.controller.config import OperatorConfig
from rollout.controller.index import ImageEntry, PodEntry, TrialEntry
from rollout.controller.jobdecide import (
    MAX_CREATIONS,
    STORAGE_RETRY_SEC,
    CreateNetworkPolicies,
    CreateTrial,
    DeleteJob,
    EnsureImage,
    JobAction,
    JobDecision,
    JobView,
    PatchJobStatus,
    ReportGauges,
    ResolveDatasets,
    TrialLook,
    TrialStep,
    Warn,
    WriteJobConfig,
    WriteJobFiles,
    cancelled_records,
    decide_job,
)
from rollout.controller.jobspec import Invalid, Planned, StorageUnavailable, Unplanned
from rollout.controller.netpolicy import policy_plan
from rollout.controller.records import TrialPlace
from rollout.controller.status import job_status
from rollout.controller.trials import CreatePod, DeletePod, PatchStatus, RetryPod

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
CONFIG = OperatorConfig(runner_image="runner:1")
STORAGE = StorageSpec(bucket="b", prefix="p")
IMAGE = {"environment": {"docker_image": "img:1"}}


def rollout_job(**spec: Any) -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": "job", "namespace": "ns", "generation": 1},
            "spec": {
                "agents": [{"name": "oracle"}, {"name": "claude", "execute": "run"}],
                "datasets": [{"name": "d", "digest": "a" * 64}],
                "nAttempts": 2,
                "nConcurrentTrials": 3,
                **spec,
            },
        }
    )


def planned(toml: dict[str, Any] | None = None, **spec: Any) -> Planned:
    """The job of 2 agents x tasks t1, t2 x 2 attempts: 8 trials."""
    config = parse_task_config(toml or IMAGE)
    tasks = tuple(ResolvedTask(name, name[-1] * 64, config) for name in ("t1", "t2"))
    plan = plan_job("job", ["oracle", "claude"], [ResolvedDataset("d", "a" * 64, tasks)], 2)
    job = rollout_job(**spec)
    return Planned(job, plan, STORAGE, policy_plan(job, STORAGE, plan))


JOB = planned()
NAMES = [t.name for t in JOB.plan.trials]


def entry(name: str, phase: TrialPhase | None = None, **fields: Any) -> TrialEntry:
    return TrialEntry("ns", name, f"uid-{name}", "1", "oracle", "d", "t1", 1, phase=phase, **fields)


def trials(*phases: TrialPhase | None) -> dict[str, TrialEntry]:
    """The plan's first trials, in order, with these phases."""
    return {name: entry(name, phase) for name, phase in zip(NAMES, phases, strict=False)}


def running_status(generation: int | None = 1) -> RolloutJobStatus:
    return RolloutJobStatus(phase=JobPhase.RUNNING, observed_generation=generation)


def view(spec: Any = JOB, **fields: Any) -> JobView:
    values: dict[str, Any] = {
        "namespace": "ns",
        "uid": "job-uid",
        "generation": 1,
        "spec": spec,
        "status": running_status(),
        "now": NOW,
        "status_due_in": 1.0,  # not due: only urgent statuses are worked out
        "config_written": True,  # the job has started: its config.json is in storage
    }
    values.update(fields)
    return JobView(**values)


def decide(**fields: Any) -> JobDecision:
    return decide_job(view(**fields), config=CONFIG)


def of_type(decision: JobDecision, kind: type[JobAction]) -> list[Any]:
    return [a for a in decision.actions if isinstance(a, kind)]


def created(decision: JobDecision) -> list[str]:
    return [a.name for a in of_type(decision, CreateTrial)]


def patched(decision: JobDecision) -> RolloutJobStatus:
    (patch,) = of_type(decision, PatchJobStatus)
    status: RolloutJobStatus = patch.status
    return status


# --- before any trial ----------------------------------------------------------------------------


def test_a_job_being_deleted_gets_nothing() -> None:
    assert decide(deleting=True, trials={}) == JobDecision()


def test_a_valid_job_has_its_datasets_read_first() -> None:
    job = rollout_job()
    assert decide(spec=Unplanned(job)) == JobDecision((ResolveDatasets(job),))


def test_an_invalid_job_fails_once_with_a_warning() -> None:
    invalid = Invalid(JobConditionReason.DATASET_NOT_FOUND, "spec.datasets[0] does not exist")
    first = decide(spec=invalid, status=RolloutJobStatus())
    warn, patch = first.actions
    assert warn == Warn("DatasetNotFound", "spec.datasets[0] does not exist")
    assert isinstance(patch, PatchJobStatus)
    status = patch.status
    assert status.phase == JobPhase.FAILED
    valid = find_condition(status.conditions, JobConditionType.VALID)
    failed = find_condition(status.conditions, JobConditionType.FAILED)
    assert valid is not None
    assert failed is not None
    assert (valid.status, failed.status) == ("False", "True")
    assert failed.reason == "DatasetNotFound"
    assert status.ended_at == NOW
    # Once the status says so, nothing more: no second event (a restarted operator posts none).
    assert decide(spec=invalid, status=status) == JobDecision()


def test_an_invalid_job_is_deleted_after_its_ttl() -> None:
    invalid = Invalid(JobConditionReason.INVALID_SPEC, "bad")
    failed = patched(decide(spec=invalid, status=RolloutJobStatus()))
    later = decide(spec=invalid, status=failed, ttl_seconds=60, now=NOW + timedelta(seconds=20))
    assert later == JobDecision(requeue_after=40.0)
    due = decide(spec=invalid, status=failed, ttl_seconds=60, now=NOW + timedelta(seconds=60))
    assert due.actions == (DeleteJob(60),)


def test_unreachable_storage_is_said_and_tried_again() -> None:
    unavailable = StorageUnavailable("Object storage cannot be reached; retrying: timeout")
    first = decide(spec=unavailable, status=RolloutJobStatus())
    assert first.requeue_after == STORAGE_RETRY_SEC
    status = patched(first)
    assert status.phase == JobPhase.PENDING  # waiting, not failed
    valid = find_condition(status.conditions, JobConditionType.VALID)
    assert valid is not None
    assert (valid.status, valid.reason) == ("Unknown", "StorageUnavailable")
    assert decide(spec=unavailable, status=status) == JobDecision(requeue_after=STORAGE_RETRY_SEC)


# --- config.json ---------------------------------------------------------------------------------


def test_a_job_that_starts_has_its_config_json_written_before_its_first_trial() -> None:
    decision = decide(trials={}, status=RolloutJobStatus(), config_written=False)
    assert decision.actions[0] == WriteJobConfig(STORAGE, JOB.job)
    assert created(decision) == NAMES[:3]  # after it, in the same decision
    # Once written (or found in storage), never again: not for a new generation either.
    assert of_type(decide(trials={}, status=RolloutJobStatus()), WriteJobConfig) == []
    edited = decide(trials=trials(TrialPhase.RUNNING), generation=2)
    assert of_type(edited, WriteJobConfig) == []


def test_config_json_is_written_whatever_else_a_started_job_does() -> None:
    # A restarted operator does not know whether it wrote config.json: it asks again (the
    # executor writes only when storage has none), whatever the job is doing.
    for fields in (
        {"trials": trials(TrialPhase.RUNNING, TrialPhase.RUNNING, TrialPhase.RUNNING)},
        {"spec": planned(suspend=True), "trials": {}},
        {"trials": finished_trials()},  # every trial finished while no operator ran
    ):
        decision = decide(config_written=False, **fields)
        assert decision.actions[0] == WriteJobConfig(STORAGE, fields.get("spec", JOB).job)
        assert of_type(decision, WriteJobConfig) == [decision.actions[0]]


def test_a_job_that_does_not_start_has_no_config_json_written() -> None:
    invalid = Invalid(JobConditionReason.INVALID_SPEC, "bad")
    unavailable = StorageUnavailable("Object storage cannot be reached; retrying: timeout")
    completed = RolloutJobStatus(phase=JobPhase.COMPLETED)
    for fields in (
        {"spec": Unplanned(rollout_job())},  # its datasets not read yet
        {"spec": invalid, "status": RolloutJobStatus()},
        {"spec": unavailable, "status": RolloutJobStatus()},
        {"deleting": True},
        {"status": completed},  # done before this operator (or this version of it) saw it
    ):
        assert of_type(decide(config_written=False, **fields), WriteJobConfig) == [], fields


NO_INTERNET = planned({"environment": {"docker_image": "img:1", "allow_internet": False}})


def test_a_job_of_no_internet_tasks_has_its_network_policies_made_before_any_trial() -> None:
    decision = decide(spec=NO_INTERNET, trials={}, status=RolloutJobStatus(), config_written=False)
    assert NO_INTERNET.policies is not None
    assert decision.actions[:2] == (
        WriteJobConfig(STORAGE, NO_INTERNET.job),
        CreateNetworkPolicies(NO_INTERNET.policies),
    )
    assert created(decision) == NAMES[:3]  # after them, in the same decision
    started = decide(spec=NO_INTERNET, trials={}, status=RolloutJobStatus())
    assert started.actions[0] == CreateNetworkPolicies(NO_INTERNET.policies)


def test_network_policies_once_made_are_not_made_again_and_public_jobs_get_none() -> None:
    made = decide(spec=NO_INTERNET, trials=trials(TrialPhase.RUNNING), policies_made=True)
    assert of_type(made, CreateNetworkPolicies) == []
    for fields in ({"trials": {}}, {"trials": finished_trials()}):
        assert of_type(decide(**fields), CreateNetworkPolicies) == [], fields
    # A restarted operator asks again, whatever the job does (an existing policy is kept).
    restarted = decide(spec=NO_INTERNET, trials=trials(TrialPhase.RUNNING, TrialPhase.RUNNING))
    assert of_type(restarted, CreateNetworkPolicies) == [
        CreateNetworkPolicies(NO_INTERNET.policies)
    ]


# --- creating trials -----------------------------------------------------------------------------


def test_the_first_trials_are_created_in_order_up_to_the_concurrency_limit() -> None:
    decision = decide(trials={}, status=RolloutJobStatus())
    assert created(decision) == NAMES[:3]  # nConcurrentTrials 3, in the seed's order
    first = of_type(decision, CreateTrial)[0]
    assert first.pod_name == NAMES[0]  # the first Pod is named after its trial
    assert first.failed is None
    manifest = first.manifest()
    assert manifest["metadata"]["name"] == NAMES[0]
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert manifest["spec"]["runnerImage"] == "runner:1"  # the operator's default
    # Trials were written: the status waits for the next look, which sees them.
    assert not decision.status_checked
    assert of_type(decision, PatchJobStatus) == []


def test_finished_trials_free_their_slots_for_the_next_in_order() -> None:
    # Two finished, one running: two slots, for the next two trials that do not exist.
    existing = trials(TrialPhase.SUCCEEDED, TrialPhase.FAILED, TrialPhase.RUNNING)
    assert created(decide(trials=existing)) == NAMES[3:5]
    # A gap in the order (a trial deleted by hand) is filled first.
    gap = {n: e for n, e in existing.items() if n != NAMES[1]}
    assert created(decide(trials=gap)) == [NAMES[1], NAMES[3]]


def test_a_wide_job_is_created_max_creations_at_a_time() -> None:
    """A job of 100,000 trials at once does not hold 100,000 creations at once: each look
    makes the next MAX_CREATIONS, and the next look (at once: it wrote) the rest."""
    config = parse_task_config(IMAGE)
    tasks = tuple(ResolvedTask(f"t{i}", "b" * 64, config) for i in range(MAX_CREATIONS + 3))
    plan = plan_job("job", ["oracle"], [ResolvedDataset("d", "a" * 64, tasks)], 1)
    job = rollout_job(agents=[{"name": "oracle"}], nAttempts=1, nConcurrentTrials=len(plan))
    wide = Planned(job, plan, STORAGE, policy_plan(job, STORAGE, plan))
    first = created(decide(spec=wide))
    assert first == [t.name for t in plan.trials[:MAX_CREATIONS]]
    made = {name: entry(name) for name in first}
    assert created(decide(spec=wide, trials=made)) == [t.name for t in plan.trials[MAX_CREATIONS:]]


def test_a_full_job_creates_nothing() -> None:
    existing = trials(TrialPhase.RUNNING, None, TrialPhase.PENDING)
    assert created(decide(trials=existing)) == []


def test_a_restarted_operator_creates_nothing_that_exists() -> None:
    # The index lists every trial (kopf fills it before the reconciler starts): all exist, so
    # nothing is created again whatever the free slots.
    every = {name: entry(name, TrialPhase.SUCCEEDED) for name in NAMES[:-1]}
    every[NAMES[-1]] = entry(NAMES[-1], TrialPhase.RUNNING)
    assert created(decide(trials=every)) == []


def test_a_suspended_job_creates_nothing_and_says_so() -> None:
    suspended = planned(suspend=True)
    decision = decide(spec=suspended, trials=trials(TrialPhase.RUNNING))
    assert created(decision) == []
    # Suspension is urgent: the status says so now, not at the next interval.
    assert patched(decision).phase == JobPhase.SUSPENDED
    resumed = decide(trials=trials(TrialPhase.RUNNING), status=patched(decision))
    assert created(resumed) == NAMES[1:3]


def test_an_image_that_needs_a_build_fails_its_trial_at_creation_without_a_registry() -> None:
    decision = decide(spec=planned({"environment": {}}), trials={})
    builds = [a.failed for a in of_type(decision, CreateTrial)]
    assert len(builds) == 3
    assert all(f is not None and f.final for f in builds)
    first = builds[0]
    assert first is not None
    assert first.record is not None
    failure = first.status
    assert failure["phase"] == "Failed"
    assert failure["error"]["type"] == "environment_build_failed"
    assert "no image registry" in failure["error"]["message"]
    assert "ROLLOUT_IMAGE_REGISTRY" in failure["error"]["message"]
    # The build never ran: not the task's Dockerfile, the platform's missing builder.
    assert failure["failureClass"] == "infrastructure"
    # Its record says the same, where the status says it is.
    record = first.record.result
    assert failure["resultUri"] == first.record.result_uri
    assert first.record.result_uri.endswith("/result.json")
    assert record.error is not None
    assert record.error.type == "environment_build_failed"
    assert record.rollout is not None
    assert record.rollout.failure_class == "infrastructure"
    assert record.rollout.tries == 1


def test_trials_of_a_broken_task_and_the_oracle_without_a_solution_fail_at_creation() -> None:
    # Seed 000: "For task_invalid and task_not_found errors, no container is started".
    broken = TrialError(type=ErrorType.TASK_INVALID, message="Task 't1' is invalid: task.toml: x")
    config = parse_task_config(IMAGE)
    tasks = (
        ResolvedTask("t1", None, parse_task_config({}), has_solution=False, error=broken),
        ResolvedTask("t2", "2" * 64, config, has_solution=False),
    )
    plan = plan_job("job", ["oracle", "claude"], [ResolvedDataset("d", "a" * 64, tasks)], 1)
    job = Planned(rollout_job(nAttempts=1, nConcurrentTrials=4), plan, STORAGE)
    decision = decide(spec=job, trials={})
    outcome = {
        (a.trial.key.agent, a.trial.key.task): a.failed.status["error"] if a.failed else None
        for a in of_type(decision, CreateTrial)
    }
    assert outcome == {
        ("oracle", "t1"): {"type": "task_invalid", "message": broken.message},
        ("oracle", "t2"): {
            "type": "task_invalid",
            "message": "Task 't2' is invalid: the oracle agent needs solution/solve.sh (or, as "
            "in seed 004, solve.sh at the task root), and the task has neither",
        },
        ("claude", "t1"): {"type": "task_invalid", "message": broken.message},
        ("claude", "t2"): None,  # another agent runs the task that has no solution
    }
    for create in of_type(decision, CreateTrial):
        if create.failed is not None:
            assert create.failed.status["failureClass"] == "task"
            assert create.failed.record is not None
            assert create.failed.record.result.rollout.failure_class == "task"
            # The broken task's RolloutTrial names no archive (it has none).
            if create.trial.key.task == "t1":
                assert "taskContentHash" not in create.manifest()["spec"]


# --- trial steps ---------------------------------------------------------------------------------


def pod(name: str, status: dict[str, Any] | None = None) -> PodEntry:
    metadata = {"name": name, "creationTimestamp": "2025-01-15T10:29:59Z"}
    return PodEntry("ns", name, "pod-uid", name, {"metadata": metadata, "status": status or {}})


RUNNING_POD = {"containerStatuses": [{"name": "runner", "state": {"running": {}}}]}


def steps(decision: JobDecision) -> dict[str, Any]:
    return {s.trial.name: s.action for s in of_type(decision, TrialStep)}


def test_each_looked_at_trial_takes_its_step() -> None:
    full = trials(None, None, TrialPhase.SUCCEEDED, TrialPhase.RUNNING)
    looks = [
        TrialLook(full[NAMES[0]]),  # no Pod yet
        TrialLook(full[NAMES[1]], pod(NAMES[1], RUNNING_POD)),
        TrialLook(full[NAMES[2]], pod(NAMES[2])),  # finished: its Pod goes
        TrialLook(full[NAMES[3]]),  # running, and its Pod is gone: lost
    ]
    taken = steps(decide(trials=full, looks=looks))
    assert replace(taken[NAMES[0]], check=None) == CreatePod(NAMES[0], 0)
    assert isinstance(taken[NAMES[1]], PatchStatus)
    assert taken[NAMES[1]].status["phase"] == "Running"
    assert taken[NAMES[2]] == DeletePod(NAMES[2])
    retry = taken[NAMES[3]]
    assert isinstance(retry, RetryPod)  # an infrastructure retry, in a new Pod
    assert retry.retry == 1
    assert retry.status["podName"] == f"{NAMES[3]}-r1"


def test_infra_retries_stop_at_the_jobs_limit() -> None:
    tired = entry(NAMES[0], TrialPhase.RUNNING, infra_retries=1, pod_name=f"{NAMES[0]}-r1")
    limited = planned(maxInfraRetries=1)
    decision = decide(spec=limited, trials={NAMES[0]: tired}, looks=[TrialLook(tired)])
    action = steps(decision)[NAMES[0]]
    assert isinstance(action, PatchStatus)
    assert action.final
    assert action.status["error"]["type"] == "internal_error"
    assert action.status["conditions"][0]["reason"] == "InfraRetriesExhausted"


def test_writes_of_a_moment_ago_are_not_repeated() -> None:
    fresh = entry(NAMES[0])
    # Its Pod was just created: its watch event is on its way, not a Pod to create again.
    just_created = decide(trials={NAMES[0]: fresh}, looks=[TrialLook(fresh, pod_created=True)])
    assert steps(just_created) == {}
    # Its Pod's deletion was just asked for: not asked again.
    done = entry(NAMES[0], TrialPhase.SUCCEEDED)
    deleting = TrialLook(done, pod(NAMES[0]), pod_deleting=True)
    assert steps(decide(trials={NAMES[0]: done}, looks=[deleting])) == {}
    lost = entry(NAMES[0], TrialPhase.RUNNING)
    failed_pod = pod(NAMES[0], {"phase": "Failed", "reason": "Evicted", "message": "disk"})
    retry = steps(
        decide(trials={NAMES[0]: lost}, looks=[TrialLook(lost, failed_pod, pod_deleting=True)])
    )[NAMES[0]]
    assert isinstance(retry, RetryPod)
    assert retry.old_pod is None


def test_pods_that_wait_are_named_for_a_later_look() -> None:
    waiting = entry(NAMES[0])
    decision = decide(trials={NAMES[0]: waiting}, looks=[TrialLook(waiting, pod(NAMES[0]))])
    assert decision.waiting == {NAMES[0]}
    assert steps(decision) == {}


def test_a_runner_of_a_moment_ago_counts_as_running_before_its_trial_says_so() -> None:
    """The trial's Running status waits `running_status_after_sec` (one write fewer for a
    trial that ends sooner); meanwhile the job counts it as running, from its Pod."""
    started = (NOW - timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = {"running": {"startedAt": started}}
    runs = {"containerStatuses": [{"name": "runner", "state": state}]}
    fresh, waits = entry(NAMES[0]), entry(NAMES[1])
    known = {NAMES[0]: fresh, NAMES[1]: waits}
    looks = [TrialLook(fresh, pod(NAMES[0], runs)), TrialLook(waits, pod(NAMES[1]))]

    def started_runner(trial: TrialEntry) -> bool:
        return trial.name == NAMES[0]

    full = planned(nConcurrentTrials=2)  # no slot free: nothing created, the status is due
    assert [t.name for t in full.plan.trials] == NAMES
    decision = decide(
        spec=full, trials=known, looks=looks, status_due_in=0, runner_started=started_runner
    )
    assert steps(decision) == {}
    assert decision.waiting == {NAMES[0], NAMES[1]}
    assert decision.due_in == CONFIG.running_status_after_sec - 3
    counts = patched(decision).counts
    assert (counts.running, counts.pending) == (1, len(NAMES) - 1)
    # Without the Pod's word, it would be pending.
    alone = patched(decide(spec=full, trials=known, looks=looks, status_due_in=0)).counts
    assert (alone.running, alone.pending) == (0, len(NAMES))


def test_a_deleted_jobs_trials_whose_runner_started_write_their_own_records() -> None:
    known = trials(None, None, TrialPhase.RUNNING, TrialPhase.SUCCEEDED)
    records = cancelled_records(
        JOB, known, NOW, None, runner_started=lambda trial: trial.name == NAMES[1]
    )
    # Only the first: the second's Pod runs its runner, the third says Running, the last ended.
    assert [r.prefix if r else None for r in records] == [
        TrialPlace(JOB.storage, JOB.job.job_name).prefix(known[NAMES[0]].key)
    ]


def test_a_finished_trial_without_a_pod_takes_no_step() -> None:
    done = entry(NAMES[0], TrialPhase.FAILED)
    assert steps(decide(trials={NAMES[0]: done}, looks=[TrialLook(done)])) == {}


# --- the job's status ----------------------------------------------------------------------------


def test_the_status_waits_for_its_interval_unless_urgent() -> None:
    busy = trials(TrialPhase.RUNNING, TrialPhase.RUNNING, TrialPhase.RUNNING)
    waiting = decide(trials=busy, status_due_in=1.5)
    assert waiting == JobDecision(requeue_after=1.5)
    due = decide(trials=busy, status_due_in=0.0)
    assert due.status_checked
    assert patched(due).counts.running == 3
    (gauges,) = of_type(due, ReportGauges)
    assert gauges.gauges.active == 3
    assert gauges.gauges.by_phase == {"Pending": 5, "Running": 3, "Succeeded": 0, "Failed": 0}
    # A new generation (an edited spec) is urgent.
    edited = decide(trials=busy, status_due_in=1.5, generation=2)
    assert patched(edited).observed_generation == 2


def test_an_unchanged_status_is_not_patched() -> None:
    busy = trials(TrialPhase.RUNNING, TrialPhase.RUNNING, TrialPhase.RUNNING)
    first = patched(decide(trials=busy, status_due_in=0.0))
    again = decide(trials=busy, status_due_in=0.0, status=first)
    assert of_type(again, PatchJobStatus) == []
    assert again.status_checked


def test_trial_writes_leave_the_status_to_the_next_look() -> None:
    busy = trials(TrialPhase.RUNNING, TrialPhase.RUNNING, None)
    starting = busy[NAMES[2]]
    running = TrialLook(starting, pod(NAMES[2], RUNNING_POD))
    decision = decide(trials=busy, looks=[running], status_due_in=0.0)
    assert steps(decision)[NAMES[2]].status["phase"] == "Running"
    assert not decision.status_checked
    # A step that writes no trial (a Pod's creation) goes with the status.
    created_pod = decide(trials=busy, looks=[TrialLook(starting)], status_due_in=0.0)
    (made,) = steps(created_pod).values()
    assert replace(made, check=None) == CreatePod(NAMES[2], 0)
    assert created_pod.status_checked


def test_a_fixed_spec_is_no_longer_failed() -> None:
    invalid = Invalid(JobConditionReason.INVALID_SPEC, "bad")
    failed = patched(decide(spec=invalid, status=RolloutJobStatus()))
    busy = trials(TrialPhase.RUNNING, TrialPhase.RUNNING, TrialPhase.RUNNING)
    decision = decide(trials=busy, status=failed, generation=2)
    status = patched(decision)
    assert status.phase == JobPhase.RUNNING
    condition = find_condition(status.conditions, JobConditionType.FAILED)
    assert condition is not None
    assert condition.status == "False"


def finished_trials() -> dict[str, TrialEntry]:
    rewards = [1.0, 0.0, 1.0, None, 1.0, 1.0, 0.5, 1.0]
    phases = [TrialPhase.SUCCEEDED if r is not None else TrialPhase.FAILED for r in rewards]
    error = ErrorType.AGENT_EXECUTION_FAILED
    return {
        name: entry(name, phase, reward=reward, error_type=None if reward is not None else error)
        for name, phase, reward in zip(NAMES, phases, rewards, strict=True)
    }


def test_a_finished_job_writes_its_files_then_completes() -> None:
    done = finished_trials()
    started = running_status().model_copy(update={"started_at": NOW - timedelta(hours=1)})
    first = decide(trials=done, status=started)
    (files,) = first.actions
    assert isinstance(files, WriteJobFiles)
    assert files.storage == STORAGE
    assert files.result.total_trials == 8
    assert files.result.started_at == NOW - timedelta(hours=1)
    assert files.result.ended_at == NOW
    # Once written, the next look completes the job with its result.json.
    uri = "s3://b/p/jobs/job/result.json"
    then = decide(trials=done, status=started, result_uri=uri)
    status = patched(then)
    assert status.phase == JobPhase.COMPLETED
    assert status.result_uri == uri
    assert (status.counts.completed, status.counts.failed) == (7, 1)
    assert status.ended_at == NOW
    assert then.requeue_after is None  # no TTL: kept for good


def test_a_completed_job_is_deleted_after_its_ttl() -> None:
    uri = "s3://b/p/jobs/job/result.json"
    finishing = decide(trials=finished_trials(), result_uri=uri, ttl_seconds=0)
    assert isinstance(finishing.actions[-1], DeleteJob)
    completed = patched(finishing)
    # A completed job is done for good: whatever it sees, only its TTL is left.
    later = NOW + timedelta(seconds=10)
    assert decide(status=completed, trials={}, ttl_seconds=30, now=later) == JobDecision(
        requeue_after=20.0
    )
    gone = decide(status=completed, trials={}, ttl_seconds=30, now=NOW + timedelta(seconds=30))
    assert gone.actions == (DeleteJob(30),)
    assert decide(status=completed, trials={}) == JobDecision()


@pytest.mark.parametrize("phase", [None, JobPhase.PENDING, JobPhase.FAILED])
def test_a_job_that_starts_says_so_at_once(phase: JobPhase | None) -> None:
    known = RolloutJobStatus(phase=phase, observed_generation=1)
    existing = trials(TrialPhase.RUNNING, None, None)
    status = patched(decide(trials=existing, status=known, status_due_in=1.5))
    assert status.phase == JobPhase.RUNNING
    expected = job_status(
        plan=JOB.plan,
        trials=existing,
        previous=known,
        generation=1,
        suspended=False,
        metrics=[m.type for m in JOB.job.spec.metrics],
        now=NOW,
    )
    assert status == expected


def test_the_view_is_not_changed() -> None:
    seen = view(trials=trials(TrialPhase.RUNNING), status_due_in=0.0)
    before = replace(seen)
    decide_job(seen, config=CONFIG)
    assert seen == before


# --- trials whose image is built in the cluster ---------------------------------------------------

BUILDS = OperatorConfig(
    runner_image="runner:1",
    image_registry="registry.test:5000",
    image_pull_registry="localhost:5001",
    builder="buildah",
)
BUILT_TASK = {"environment": {}}  # no docker_image: a Dockerfile that needs a build


def built_plan(force: bool = False) -> Planned:
    config = parse_task_config(IMAGE if force else BUILT_TASK)
    tasks = tuple(
        ResolvedTask(name, name[-1] * 64, config, environment_hash="e" * 64)
        for name in ("t1", "t2")
    )
    plan = plan_job("job", ["oracle", "claude"], [ResolvedDataset("d", "a" * 64, tasks)], 2)
    environment = {"forceBuild": True} if force else {}
    job = rollout_job(environment=environment)
    return Planned(job, plan, STORAGE, policy_plan(job, STORAGE, plan))


def waiting_trials(plan: Planned, image: str, count: int, **fields: Any) -> dict[str, TrialEntry]:
    """The plan's first `count` trials, made and waiting for the RolloutImage `image`."""
    return {
        t.name: TrialEntry(
            "ns", t.name, f"uid-{t.name}", "1", t.key.agent, "d", t.key.task, t.key.attempt,
            phase=TrialPhase.PENDING, image_build=image, waiting_for_image=True, **fields,
        )
        for t in plan.plan.trials[:count]
    }  # fmt: skip


def image_entry(name: str, **fields: Any) -> ImageEntry:
    values: dict[str, Any] = {"pull_image": "localhost:5001/rollout-env:h", "image_hash": "f" * 64}
    values.update(fields)
    return ImageEntry("ns", name, f"uid-{name}", **values)


def test_trials_that_share_an_environment_make_one_rolloutimage_before_they_are_made() -> None:
    decision = decide_job(view(built_plan(), trials={}), config=BUILDS)
    ensure = of_type(decision, EnsureImage)
    assert len(ensure) == 1  # two tasks, one environment: one image
    image = RolloutImage.model_validate(ensure[0].manifest)
    assert image.spec.image.startswith("registry.test:5000/rollout-env:")
    assert image.spec.pull_image.startswith("localhost:5001/rollout-env:")
    assert image.spec.context.key == f"p/environments/{'e' * 64}.tar.gz"
    assert "ownerReferences" not in ensure[0].manifest["metadata"]  # the cache's record
    # Made before the trials that need it; the trials wait for it, with no Pod.
    actions = decision.actions
    assert actions.index(ensure[0]) < min(actions.index(c) for c in of_type(decision, CreateTrial))
    creations = of_type(decision, CreateTrial)
    assert len(creations) == 3
    assert all(c.build is not None and c.build.name == ensure[0].name for c in creations)
    assert not any(c.creates_pod for c in creations)
    spec = creations[0].manifest()["spec"]
    assert (spec["imageBuild"], spec["image"]) == (ensure[0].name, image.spec.pull_image)


def test_a_ready_image_gives_new_trials_their_pods_at_once_pinned_to_its_digest() -> None:
    first = decide_job(view(built_plan(), trials={}), config=BUILDS)
    name = of_type(first, EnsureImage)[0].name
    ready = image_entry(name, phase=ImagePhase.READY, digest="sha256:" + "d" * 64)
    decision = decide_job(view(built_plan(), trials={}, images={name: ready}), config=BUILDS)
    assert of_type(decision, EnsureImage) == []  # it exists
    creations = of_type(decision, CreateTrial)
    assert all(c.creates_pod for c in creations)
    assert creations[0].image is not None
    assert creations[0].image.pinned_image == "localhost:5001/rollout-env@sha256:" + "d" * 64


def test_an_image_that_failed_before_the_job_began_is_made_again_one_after_is_not() -> None:
    first = decide_job(view(built_plan(), trials={}), config=BUILDS)
    name = of_type(first, EnsureImage)[0].name
    earlier = image_entry(
        name, phase=ImagePhase.FAILED, completed_at=NOW - timedelta(hours=1), message="boom"
    )
    again = decide_job(
        view(
            built_plan(), trials={}, images={name: earlier}, created_at=NOW - timedelta(minutes=5)
        ),
        config=BUILDS,
    )
    (renew,) = of_type(again, EnsureImage)
    assert renew.renew == f"uid-{name}"  # the failed one goes first, then a new one
    later = replace(earlier, completed_at=NOW - timedelta(minutes=1))
    kept = decide_job(
        view(built_plan(), trials={}, images={name: later}, created_at=NOW - timedelta(minutes=5)),
        config=BUILDS,
    )
    assert of_type(kept, EnsureImage) == []  # this job's own failure: its trials fail with it


def test_force_build_makes_a_rolloutimage_of_the_jobs_own() -> None:
    decision = decide_job(view(built_plan(force=True), trials={}), config=BUILDS)
    (ensure,) = of_type(decision, EnsureImage)
    metadata = ensure.manifest["metadata"]
    assert ensure.manifest["spec"]["forceBuild"] is True
    assert metadata["ownerReferences"][0]["kind"] == "RolloutJob"
    assert metadata["ownerReferences"][0]["uid"] == "job-uid"
    other = decide_job(view(built_plan(force=True), trials={}, uid="other-uid"), config=BUILDS)
    assert of_type(other, EnsureImage)[0].name != ensure.name  # each job builds once


def test_a_waiting_trial_whose_image_is_gone_gets_it_made_again() -> None:
    first = decide_job(view(built_plan(), trials={}), config=BUILDS)
    name = of_type(first, EnsureImage)[0].name
    plan = built_plan()
    waiting = waiting_trials(plan, name, 3)
    looks = [TrialLook(entry) for entry in waiting.values()]
    decision = decide_job(view(plan, trials=waiting, looks=looks), config=BUILDS)
    assert [e.name for e in of_type(decision, EnsureImage)] == [name]
    assert of_type(decision, TrialStep) == []  # they keep waiting: the image's event wakes them


def test_trials_waiting_for_their_image_hold_their_slots() -> None:
    first = decide_job(view(built_plan(), trials={}), config=BUILDS)
    name = of_type(first, EnsureImage)[0].name
    plan = built_plan()
    waiting = waiting_trials(plan, name, 3)
    building = image_entry(name, phase=ImagePhase.BUILDING)
    decision = decide_job(view(plan, trials=waiting, images={name: building}), config=BUILDS)
    assert created(decision) == []  # nConcurrentTrials is 3: the 3 waiting trials are running


def test_a_waiting_trial_whose_image_is_gone_and_named_otherwise_now_fails_not_hangs() -> None:
    plan = built_plan()
    made = NOW - timedelta(minutes=5)
    waiting = waiting_trials(plan, "env-made-under-other-settings", 1, created_at=made)
    looks = [TrialLook(entry) for entry in waiting.values()]
    decision = decide_job(view(plan, trials=waiting, looks=looks), config=BUILDS)
    made = [e.name for e in of_type(decision, EnsureImage)]  # for the trials made now
    assert "env-made-under-other-settings" not in made
    (step,) = of_type(decision, TrialStep)
    failure = step.action.status
    assert failure["error"]["type"] == "environment_build_failed"
    assert "env-made-under-other-settings" in failure["error"]["message"]
    assert failure["failureClass"] == "infrastructure"
    # The same without a registry any more (the operator's settings lost it).
    lost = decide_job(view(plan, trials=waiting, looks=looks), config=CONFIG)
    assert len(of_type(lost, TrialStep)) == 1
