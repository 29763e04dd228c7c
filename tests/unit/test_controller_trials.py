"""A new trial's manifest (effective timeouts, resources, image, users) and the step `decide` takes
for a trial given its Pod."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.plan import PlannedTrial, ResolvedTask
from rollout.api.resources import (
    ImagePhase,
    ImageReason,
    RolloutJob,
    RolloutTrial,
    StorageSpec,
    TrialPhase,
)
from rollout.api.task import parse_task_config
from rollout.api.trials import TrialKey
from rollout.api.wire.termination import TerminationMessage
from rollout.controller.config import OperatorConfig
from rollout.controller.index import ImageEntry, PodEntry, TrialEntry
from rollout.controller.podstatus import Failed, Finished, Lost, Running, Waiting
from rollout.controller.records import TrialPlace
from rollout.controller.trials import (
    OLD_RUNNER_MARGIN_SEC,
    CopyBuildLog,
    CreatePod,
    DeletePod,
    Nothing,
    PatchStatus,
    RetryPod,
    TryCheck,
    act,
    decide,
    trial_manifest,
)

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
CONFIG = OperatorConfig(runner_image="runner:1")
STORAGE = StorageSpec(bucket="b", prefix="p")
PLACE = TrialPlace(STORAGE, "My Job")
ACT: dict[str, Any] = {"now": NOW, "place": PLACE, "prices": None, "max_infra_retries": 2}
"""How the tests call `act`: no prices (costs are `test_controller_records`'s)."""


def job(**spec: Any) -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": "my-job", "namespace": "ns"},
            "spec": {
                "jobName": "My Job",
                "agents": [{"name": "oracle"}, {"name": "claude", "execute": "run"}],
                "datasets": [{"name": "d", "digest": "a" * 64}],
                **spec,
            },
        }
    )


def planned(toml: dict[str, Any] | None = None, agent: str = "claude") -> PlannedTrial:
    config = parse_task_config(
        toml
        or {
            "agent": {"timeout_sec": 100, "install_timeout_sec": 50, "user": "agent"},
            "verifier": {"timeout_sec": 300, "user": 0},
            "environment": {"docker_image": "img:1", "cpus": 2, "memory": "4G", "workdir": "/app"},
        }
    )
    return PlannedTrial(
        TrialKey(agent, "d", "t", 1), "my-job-claude-d-t-1-x", ResolvedTask("t", "c" * 64, config)
    )


def test_a_trial_manifest_carries_everything_its_pod_needs() -> None:
    rj = job(
        timeoutMultiplier=2.0, verifier={"maxTimeoutSec": 250}, pod={"nodeSelector": {"a": "b"}}
    )
    manifest = trial_manifest(
        rj, planned(), namespace="ns", job_uid="uid-1", storage=STORAGE, runner_image="runner:2"
    )
    trial = RolloutTrial.model_validate(manifest)  # a valid RolloutTrial
    spec = trial.spec
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": "rollout.dev/v1alpha1", "kind": "RolloutJob", "name": "my-job",
         "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert manifest["metadata"]["labels"]["rollout.dev/job"] == "my-job"
    assert manifest["metadata"]["labels"]["rollout.dev/agent"] == "claude"
    assert spec.job_name == "My Job"  # the job's own name names its results
    assert spec.agent.name == "claude"
    assert spec.agent.execute == "run"
    assert (spec.timeouts.agent_sec, spec.timeouts.agent_install_sec) == (200, 100)
    assert spec.timeouts.verifier_sec == 500  # the task's 300 capped at 250, times 2
    assert spec.image == "img:1"
    assert (spec.resources.cpus, spec.resources.memory) == ("2", "4G")
    assert (spec.agent_user, spec.verifier_user, spec.workdir) == ("agent", 0, "/app")
    assert spec.storage == STORAGE
    assert spec.runner_image == "runner:2"
    assert spec.pod.node_selector == {"a": "b"}
    assert spec.task_content_hash == "c" * 64


def test_the_jobs_isolate_agents_reaches_every_trial() -> None:
    def isolated(rj: RolloutJob) -> object:
        manifest = trial_manifest(
            rj, planned(), namespace="ns", job_uid="u", storage=STORAGE, runner_image="r"
        )
        return RolloutTrial.model_validate(manifest).spec.isolate_agent

    assert isolated(job(isolateAgents=True)) is True
    assert isolated(job()) is False  # off by default


def test_the_jobs_resource_overrides_win() -> None:
    rj = job(environment={"overrideCpus": 1, "overrideMemory": "2048", "overrideStorage": "30G"})
    spec = trial_manifest(
        rj, planned(), namespace="ns", job_uid="u", storage=STORAGE, runner_image="r"
    )["spec"]
    assert spec["resources"] == {"cpus": "1", "memory": "2048Mi", "storage": "30G", "gpus": 0}


# --- decide ---------------------------------------------------------------------------------------


TRIAL = TrialEntry("ns", "t1", "uid", "7", "oracle", "d", "t", 1)


def pod(
    status: dict[str, Any] | None = None, *, deleting: bool = False, name: str = "t1"
) -> PodEntry:
    metadata: dict[str, Any] = {"name": name, "creationTimestamp": "2025-01-15T10:29:59Z"}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-15T10:30:00Z"
    return PodEntry("ns", name, "pod-uid", "t1", {"metadata": metadata, "status": status or {}})


def finished_pod(message: dict[str, Any]) -> PodEntry:
    terminated = {"exitCode": 0, "message": json.dumps(message)}
    return pod({"containerStatuses": [{"name": "runner", "state": {"terminated": terminated}}]})


def test_a_trial_without_a_pod_gets_one() -> None:
    first = decide(TRIAL, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(first, CreatePod)
    assert replace(first, check=None) == CreatePod("t1", 0)
    retried = replace(TRIAL, infra_retries=1, pod_name="t1-r1")
    again = decide(retried, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(again, CreatePod)
    assert (again.pod_name, again.retry) == ("t1-r1", 1)  # its lost try's files kept first
    # Just created: its watch event is on its way.
    assert decide(
        TRIAL, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2, pod_requested=True
    ) == (Nothing())


def test_a_pod_made_outside_the_trials_creation_first_checks_whether_its_try_ran() -> None:
    """Nothing in the API tells a Pod never made from one made and deleted unseen before the
    trial said Running: the Pod is made only once storage says the try did not run; if it did,
    the check's action is the lost Pod's retry (or the trial's failure past its budget)."""
    made = replace(TRIAL, created_at=NOW - timedelta(seconds=3))
    first = decide(made, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(first, CreatePod)
    check = first.check
    assert isinstance(check, TryCheck)
    assert (check.prefix, check.try_number, check.since) == (
        PLACE.prefix(TRIAL.key),
        1,
        made.created_at,
    )
    assert isinstance(check.if_ran, RetryPod)
    assert (check.if_ran.retry, check.if_ran.old_pod) == (1, None)
    assert check.if_ran.status["infraRetries"] == 1
    (condition,) = check.if_ran.status["conditions"]
    assert "deleted while the operator was not watching" in condition["message"]

    # A retry's Pod: its own result.json would say so (`since` unset), try 1 + 1 retry.
    retried = replace(made, infra_retries=1, pod_name="t1-r1")
    again = decide(retried, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(again, CreatePod)
    assert again.check is not None
    assert (again.check.try_number, again.check.since) == (2, None)
    assert isinstance(again.check.if_ran, RetryPod)
    assert again.check.if_ran.retry == 2

    # Past the budget, the lost try fails the trial (its record written first).
    spent = replace(made, infra_retries=2, pod_name="t1-r2")
    last = decide(spent, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(last, CreatePod)
    assert last.check is not None
    failed = last.check.if_ran
    assert isinstance(failed, PatchStatus)
    assert failed.final
    assert failed.status["phase"] == "Failed"
    assert failed.record is not None
    assert failed.delete_pod is None

    # A shard's rows are kept or run again row by row: no check.
    shard = decide(
        replace(made, shard=True), None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2
    )
    assert isinstance(shard, CreatePod)
    assert shard.check is None


def test_a_retry_waits_for_the_runner_of_a_pod_that_went_with_it_running() -> None:
    """Force-deleted (or lost with its node), the try before's Pod is gone from the API at once,
    its runner perhaps still uploading: the retry's Pod (and the keeping of the lost try's files
    before it) waits OLD_RUNNER_MARGIN_SEC from the Pod's going."""
    retried = replace(TRIAL, infra_retries=1, pod_name="t1-r1")

    def after(gone: float | None) -> object:
        return decide(
            retried,
            None,
            now=NOW,
            config=CONFIG,
            place=PLACE,
            max_infra_retries=2,
            previous_gone_running_sec=gone,
        )

    assert after(3.0) == Nothing(waiting=True, due_in=OLD_RUNNER_MARGIN_SEC - 3.0)
    made = after(OLD_RUNNER_MARGIN_SEC + 1)
    assert isinstance(made, CreatePod)
    assert made.keep is not None
    assert isinstance(after(None), CreatePod)  # gone once its runner ended: at once


def test_a_missing_pod_of_a_running_trial_was_lost() -> None:
    running = replace(TRIAL, phase=TrialPhase.RUNNING)
    action = decide(running, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
    assert isinstance(action, RetryPod)
    assert (action.old_pod, action.retry) == (None, 1)
    assert action.status["podName"] == "t1-r1"
    assert action.status["phase"] == "Pending"
    assert action.status["infraRetries"] == 1
    # A deleted Pod of a trial that never ran is lost too (not silently made again).
    deleted = decide(
        TRIAL, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2, pod_deleted=True
    )
    assert isinstance(deleted, RetryPod)


def test_lost_pods_are_retried_up_to_the_limit_then_internal_error() -> None:
    tired = replace(TRIAL, infra_retries=2, pod_name="t1-r2", phase=TrialPhase.RUNNING)
    action = act(
        tired,
        pod(name="t1-r2"),
        Lost("Evicted."),
        now=NOW,
        place=PLACE,
        prices=None,
        max_infra_retries=2,
    )
    assert isinstance(action, PatchStatus)
    assert action.final
    assert action.delete_pod == "t1-r2"
    assert action.status["error"]["type"] == "internal_error"
    assert "lost 3 times" in action.status["error"]["message"]
    assert action.status["conditions"][0]["reason"] == "InfraRetriesExhausted"
    assert action.status["failureClass"] == "infrastructure"


def test_a_running_pod_marks_the_trial_running_once() -> None:
    action = act(TRIAL, pod(), Running(), **ACT)
    assert isinstance(action, PatchStatus)
    assert action.status["phase"] == "Running"
    assert action.status["podName"] == "t1"
    assert not action.final
    running = replace(TRIAL, phase=TrialPhase.RUNNING)
    assert act(running, pod(), Running(), **ACT) == Nothing()
    assert act(
        TRIAL,
        pod(),
        Waiting("ContainerCreating"),
        now=NOW,
        place=PLACE,
        prices=None,
        max_infra_retries=2,
    ) == Nothing(waiting=True)


def test_the_running_status_waits_until_the_runner_has_run_a_while() -> None:
    """A trial that ends within `running_status_after_sec` of its runner's start is written
    once, with its outcome: one API write fewer per short trial."""
    after = CONFIG.running_status_after_sec
    assert after == 10.0  # the default
    started = NOW - timedelta(seconds=4)
    early = act(TRIAL, pod(), Running(since=started), **ACT, running_status_after=after)
    assert early == Nothing(waiting=True, due_in=6.0)
    later = {**ACT, "now": started + timedelta(seconds=after)}
    action = act(TRIAL, pod(), Running(since=started), **later, running_status_after=after)
    assert isinstance(action, PatchStatus)
    assert action.status["phase"] == "Running"
    # Without the runner's start time, the status is written at once (as before).
    assert isinstance(act(TRIAL, pod(), Running(), **ACT, running_status_after=after), PatchStatus)
    # decide() takes the delay from the operator's settings.
    since = {"running": {"startedAt": "2025-01-15T10:29:58Z"}}
    runs = pod({"containerStatuses": [
        {"name": "runner", "state": since}, {"name": "environment", "state": since}
    ]})  # fmt: skip
    how = {"now": NOW, "place": PLACE, "max_infra_retries": 2}
    assert decide(TRIAL, runs, config=CONFIG, **how) == Nothing(waiting=True, due_in=8.0)
    at_once = CONFIG.model_copy(update={"running_status_after_sec": 0.0})
    decided = decide(TRIAL, runs, config=at_once, **how)
    assert isinstance(decided, PatchStatus)
    assert decided.status["phase"] == "Running"


def test_the_runners_message_becomes_the_trials_status() -> None:
    message = {
        "reward": 0.75,
        "error": {"type": "environment_teardown_failed", "message": "stuck"},
        "durations": {"total_sec": 10.0, "verifier_sec": 2.0},
        "timestamps": {"started_at": "2025-01-15T10:30:00Z"},
        "result_uri": "s3://b/jobs/j/oracle/d/t__1/result.json",
        "upload_error": None,
        "runner": {
            "started_at": "2025-01-15T10:30:01Z",
            "trial_started_at": "2025-01-15T10:30:01.4Z",
            "environment_ready_at": "2025-01-15T10:30:01.3Z",
            "ended_at": "2025-01-15T10:30:10Z",
        },
    }
    action = decide(
        TRIAL, finished_pod(message), now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2
    )
    assert isinstance(action, PatchStatus)
    status = action.status
    assert status["phase"] == "Succeeded"  # a teardown error alone keeps the reward
    assert status["reward"] == 0.75
    assert status["error"]["type"] == "environment_teardown_failed"
    assert status["durations"] == {"totalSec": 10.0, "verifierSec": 2.0}
    assert status["timestamps"] == {"startedAt": "2025-01-15T10:30:00Z"}
    assert status["resultUri"] == message["result_uri"]
    assert action.delete_pod == "t1"
    assert action.durations["total_sec"] == 10.0
    assert action.runner is not None  # for the metrics, not the status
    assert action.runner.environment_ready_at == datetime(2025, 1, 15, 10, 30, 1, 300_000, UTC)
    assert "runner" not in status
    assert "infraRetries" not in status  # a merge patch keeps the count
    assert status["failureClass"] == "infrastructure"


@pytest.mark.parametrize(
    ("agent", "error_type", "expected"),
    [
        ("claude", "agent_execution_timeout", "agent"),
        ("oracle", "agent_execution_timeout", "task"),  # the oracle runs the task's solution
        ("claude", "verifier_reward_missing", "task"),
        ("claude", None, None),
    ],
)
def test_the_trials_status_says_whose_failure_its_error_is(
    agent: str, error_type: str | None, expected: str | None
) -> None:
    error = {"type": error_type, "message": "it happened"} if error_type else None
    message = {"reward": None if error else 1.0, "error": error}
    trial = replace(TRIAL, agent=agent)
    action = decide(
        trial, finished_pod(message), now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2
    )
    assert isinstance(action, PatchStatus)
    assert action.status.get("failureClass") == expected


def test_an_error_that_kept_the_reward_fails_the_trial() -> None:
    message = TerminationMessage.model_validate(
        {"reward": None, "error": {"type": "verifier_timeout", "message": "too slow"}}
    )
    action = act(
        TRIAL,
        pod(),
        Finished(message, "{}"),
        now=NOW,
        place=PLACE,
        prices=None,
        max_infra_retries=2,
    )
    assert isinstance(action, PatchStatus)
    assert action.status["phase"] == "Failed"
    assert action.status["conditions"][0]["message"] == "verifier_timeout: too slow"


def test_a_pod_failure_is_the_trials_error_and_preserve_env_keeps_the_pod() -> None:
    failure = Failed(ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED, "no such image")
    action = act(TRIAL, pod(), failure, **ACT)
    assert isinstance(action, PatchStatus)
    assert action.status["error"] == {
        "type": "environment_image_pull_failed",
        "message": "no such image",
    }
    assert action.status["conditions"][0]["reason"] == "ImagePullFailed"
    assert action.status["failureClass"] == "infrastructure"
    assert action.delete_pod == "t1"
    kept = act(
        replace(TRIAL, preserve_env=True),
        pod(),
        failure,
        now=NOW,
        place=PLACE,
        prices=None,
        max_infra_retries=2,
    )
    assert isinstance(kept, PatchStatus)
    assert kept.delete_pod is None


def test_a_finished_trials_pod_is_removed_unless_preserved_or_going() -> None:
    done = replace(TRIAL, phase=TrialPhase.SUCCEEDED)
    assert decide(
        done, pod(), now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2
    ) == DeletePod("t1")
    assert (
        decide(done, pod(deleting=True), now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2)
        == Nothing()
    )
    kept = replace(done, preserve_env=True)
    assert (
        decide(kept, pod(), now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2) == Nothing()
    )
    assert decide(done, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2) == Nothing()


@pytest.mark.parametrize("environment_type", ["modal", "docker"])
def test_trials_of_the_bridge_are_left_to_it(environment_type: str) -> None:
    bridged = replace(TRIAL, environment_type=environment_type)
    assert (
        decide(bridged, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2) == Nothing()
    )


# --- a trial whose image is built in the cluster --------------------------------------------------

CREATED = datetime(2025, 1, 15, 10, 20, tzinfo=UTC)
WAITER = replace(TRIAL, image_build="env-abc", created_at=CREATED)
DIGEST = "sha256:" + "d" * 64


def image(**fields: Any) -> ImageEntry:
    values: dict[str, Any] = {
        "pull_image": "localhost:5001/rollout-env:" + "f" * 64,
        "image_hash": "f" * 64,
    }
    values.update(fields)
    return ImageEntry("ns", "env-abc", "image-uid", **values)


def decide_waiter(trial: TrialEntry, found: ImageEntry | None, **more: Any) -> Any:
    return decide(
        trial, None, now=NOW, config=CONFIG, place=PLACE, max_infra_retries=2, image=found, **more
    )


def test_a_trial_waits_for_its_image_and_says_so_once() -> None:
    building = image(phase=ImagePhase.BUILDING)
    action = decide_waiter(WAITER, building)
    assert isinstance(action, PatchStatus)
    assert not action.final
    assert action.status["phase"] == "Pending"
    (condition,) = action.status["conditions"]
    assert (condition["type"], condition["status"]) == ("PodReady", "False")
    assert condition["reason"] == "WaitingForImage"
    assert "env-abc" in condition["message"]
    assert decide_waiter(replace(WAITER, waiting_for_image=True), building) == Nothing()
    # No RolloutImage yet (the job makes it): nothing, its event wakes the job.
    assert decide_waiter(WAITER, None) == Nothing()


def test_a_ready_image_gives_the_trial_its_pod_pinned_with_setup_from_the_trials_creation() -> None:
    action = decide_waiter(WAITER, image(phase=ImagePhase.READY, digest=DIGEST))
    assert isinstance(action, CreatePod)
    assert replace(action, check=None) == CreatePod(
        "t1", 0, image="localhost:5001/rollout-env@" + DIGEST, setup_since=CREATED
    )
    assert action.check is not None
    assert action.check.since == CREATED  # its first Pod: any file since the trial was made


@pytest.mark.parametrize(
    ("reason", "error", "whose"),
    [
        (ImageReason.BUILD_FAILED, "environment_build_failed", "task"),
        (ImageReason.BUILD_TIMEOUT, "environment_build_timeout", "task"),
        (ImageReason.BUILD_NOT_RUN, "environment_build_failed", "infrastructure"),
        (ImageReason.REGISTRY_UNAVAILABLE, "environment_build_failed", "infrastructure"),
    ],
)
def test_a_failed_build_fails_the_waiting_trial_with_its_error_and_class(
    reason: ImageReason, error: str, whose: str
) -> None:
    failed = image(
        phase=ImagePhase.FAILED,
        reason=reason,
        message="The image build failed. The end of its log:\nE: no-such-package",
        completed_at=NOW,
        log_uri="s3://b/p/jobs/Other Job/builds/" + "f" * 64 + ".log",
    )
    action = decide_waiter(WAITER, failed, stale_before=CREATED)
    assert isinstance(action, PatchStatus)
    assert action.final
    assert action.status["error"]["type"] == error
    assert "no-such-package" in action.status["error"]["message"]
    assert action.status["failureClass"] == whose
    assert action.record is not None
    result = action.record.result
    # It was in environment setup from its creation: the build was part of it.
    assert result.timestamps.environment_setup_started_at == CREATED
    assert result.durations.environment_setup_sec == 600.0
    # The build log goes beside this job too (another job asked for the build).
    assert action.build_log == CopyBuildLog(
        STORAGE, failed.log_uri, f"p/jobs/My Job/builds/{'f' * 64}.log"
    )
    own = replace(failed, log_uri=f"s3://b/p/jobs/My Job/builds/{'f' * 64}.log")
    assert decide_waiter(WAITER, own, stale_before=CREATED).build_log is None


def test_an_image_that_failed_before_the_job_began_is_not_this_trials_failure() -> None:
    stale = image(phase=ImagePhase.FAILED, reason=ImageReason.BUILD_FAILED, completed_at=CREATED)
    later_job = CREATED + (NOW - CREATED) / 2
    assert decide_waiter(WAITER, stale, stale_before=later_job) == Nothing()
