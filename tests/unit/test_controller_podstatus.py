"""What a trial Pod's status means for the trial, from status bodies as a kubelet writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import container_statuses
from container_statuses import ts, waiting
from rollout.api.errors import ErrorType
from rollout.api.resources import TrialPhase
from rollout.api.wire import termination
from rollout.api.wire.termination import TerminationMessage
from rollout.controller.config import OperatorConfig
from rollout.controller.pod import render_trial_pod
from rollout.controller.podstatus import (
    Failed,
    Finished,
    Lost,
    Running,
    Waiting,
    classify_missing_pod,
    classify_pod,
    pod_phase_for_status,
)

CREATED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
SCHEDULED = CREATED + timedelta(seconds=5)
CONFIG = OperatorConfig(
    runner_image="registry.example.com/rollout-runner:0.1.0",
    unschedulable_grace_sec=600,
    image_pull_grace_sec=120,
)
TASK_IMAGE = "ghcr.io/laude-institute/t-bench/hello-world:latest"
RUNNER_IMAGE = "registry.example.com/rollout-runner:0.1.0"

TRIAL = {
    "metadata": {"name": "t", "namespace": "evals", "uid": "u-1"},
    "spec": {
        "jobName": "job",
        "agent": {"name": "oracle"},
        "datasetName": "terminal-bench",
        "taskName": "hello-world",
        "attempt": 1,
        "taskContentHash": "a" * 64,
        "image": TASK_IMAGE,
        "resources": {"cpus": "64", "memory": "512Gi", "storage": "10G"},
        "timeouts": {"agentInstallSec": 300, "agentSec": 600, "verifierSec": 600, "buildSec": 600},
        "storage": {"bucket": "results"},
        "runnerImage": RUNNER_IMAGE,
    },
}


def running(name: str, image: str, since: datetime = SCHEDULED) -> dict[str, Any]:
    return container_statuses.running(name, image, since)


def terminated(
    name: str,
    image: str,
    *,
    code: int,
    reason: str,
    finished: datetime,
    message: str | None = None,
) -> dict[str, Any]:
    return container_statuses.terminated(
        name, image, code=code, reason=reason, started=SCHEDULED, finished=finished,
        message=message,
    )  # fmt: skip


def pod_with(status: dict[str, Any], *, deleting: datetime | None = None) -> dict[str, Any]:
    """The rendered Pod as the API returns it: with its creation time and a status."""
    pod = render_trial_pod(TRIAL, config=CONFIG, pod_name="t", created_at=CREATED)
    pod["metadata"]["creationTimestamp"] = ts(CREATED)
    pod["metadata"]["uid"] = "pod-uid"
    if deleting is not None:
        pod["metadata"]["deletionTimestamp"] = ts(deleting)
        pod["metadata"]["deletionGracePeriodSeconds"] = 10
    pod["status"] = status
    return pod


def scheduled_conditions(ready: bool = False) -> list[dict[str, Any]]:
    state = "True" if ready else "False"
    return [
        {
            "type": "PodReadyToStartContainers",
            "status": "True",
            "lastTransitionTime": ts(SCHEDULED),
        },
        {"type": "Initialized", "status": "True", "lastTransitionTime": ts(SCHEDULED)},
        {"type": "Ready", "status": state, "lastTransitionTime": ts(SCHEDULED)},
        {"type": "ContainersReady", "status": state, "lastTransitionTime": ts(SCHEDULED)},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(SCHEDULED)},
    ]


def pending(*containers: dict[str, Any], scheduled: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Pending",
        "conditions": scheduled_conditions(),
        "hostIP": "10.0.0.7",
        "podIP": "10.244.1.9",
        "qosClass": "Burstable",
        "startTime": ts(SCHEDULED),
        "containerStatuses": list(containers),
    }
    return status


def running_status(*containers: dict[str, Any]) -> dict[str, Any]:
    return {**pending(*containers), "phase": "Running", "conditions": scheduled_conditions(True)}


def outcome(reward: float | None = 1.0, error: dict[str, str] | None = None) -> str:
    """A termination message as the runner writes it."""
    fields = termination.from_result(
        None, result_uri="s3://results/jobs/job/r.json", upload_error=None
    )
    fields.update(
        reward=reward,
        error=error,
        durations={"total_sec": 42.5, "agent_execution_sec": 30.0},
        timestamps={"started_at": "2024-05-01T12:00:10Z", "ended_at": "2024-05-01T12:00:52Z"},
    )
    return termination.render(fields).decode()


def finished_pod(
    message: str | None, *, code: int = 0, reason: str = "Completed"
) -> dict[str, Any]:
    end = SCHEDULED + timedelta(seconds=60)
    return pod_with(
        {
            **running_status(),
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                terminated("environment", TASK_IMAGE, code=0, reason="Completed", finished=end),
                terminated(
                    "runner", RUNNER_IMAGE, code=code, reason=reason, finished=end, message=message
                ),
            ],
        }
    )


# --- waiting and running --------------------------------------------------------------------------


def test_a_pod_without_status_is_waiting() -> None:
    pod = pod_with({})
    del pod["status"]
    assert classify_pod(pod, now=CREATED, config=CONFIG) == Waiting()
    assert classify_pod(pod_with({"phase": "Pending"}), now=CREATED, config=CONFIG) == Waiting()


def test_containers_being_created_are_waiting() -> None:
    pod = pod_with(
        pending(
            waiting("environment", TASK_IMAGE, "ContainerCreating"),
            waiting("runner", RUNNER_IMAGE, "ContainerCreating"),
        )
    )
    later = CREATED + timedelta(hours=1)
    assert classify_pod(pod, now=later, config=CONFIG) == Waiting("ContainerCreating")


def test_a_running_runner_is_running_even_while_the_environment_image_is_pulled() -> None:
    both = pod_with(
        running_status(running("environment", TASK_IMAGE), running("runner", RUNNER_IMAGE))
    )
    assert classify_pod(both, now=CREATED, config=CONFIG) == Running(since=SCHEDULED)
    pulling = pod_with(
        running_status(
            waiting("environment", TASK_IMAGE, "ContainerCreating"), running("runner", RUNNER_IMAGE)
        )
    )
    assert classify_pod(pulling, now=CREATED, config=CONFIG) == Running(since=SCHEDULED)


def test_a_running_runner_without_a_start_time_is_running_since_an_unknown_time() -> None:
    runner = running("runner", RUNNER_IMAGE)
    del runner["state"]["running"]["startedAt"]
    pod = pod_with(running_status(running("environment", TASK_IMAGE), runner))
    assert classify_pod(pod, now=CREATED, config=CONFIG) == Running(since=None)


# --- the runner's outcome -------------------------------------------------------------------------


def test_a_runner_with_a_termination_message_finished_the_trial() -> None:
    raw = outcome(reward=1.0)
    verdict = classify_pod(finished_pod(raw), now=CREATED, config=CONFIG)
    assert isinstance(verdict, Finished)
    assert verdict.raw == raw
    assert verdict.message == TerminationMessage.model_validate_json(raw)
    assert verdict.message is not None
    assert verdict.message.reward == 1.0
    assert verdict.message.result_uri == "s3://results/jobs/job/r.json"
    assert pod_phase_for_status(verdict) == TrialPhase.SUCCEEDED


def test_a_trial_error_in_the_message_is_still_a_finished_trial() -> None:
    error = {"type": "agent_execution_timeout", "message": "The agent ran for more than 600 s."}
    verdict = classify_pod(finished_pod(outcome(None, error)), now=CREATED, config=CONFIG)
    assert isinstance(verdict, Finished)
    assert verdict.message is not None
    assert verdict.message.error is not None
    assert verdict.message.error.type == ErrorType.AGENT_EXECUTION_TIMEOUT
    assert pod_phase_for_status(verdict) == TrialPhase.FAILED


def test_a_4_kib_termination_message_is_read_whole() -> None:
    long_error = {"type": "verifier_failed", "message": "pytest output: " + "E" * 10_000}
    raw = outcome(None, long_error)
    assert 4000 < len(raw.encode()) <= 4096
    verdict = classify_pod(finished_pod(raw), now=CREATED, config=CONFIG)
    assert isinstance(verdict, Finished)
    assert verdict.message is not None
    assert verdict.message.error is not None
    assert verdict.message.error.type == ErrorType.VERIFIER_FAILED
    assert verdict.message.error.message.endswith(termination.TRUNCATED)
    assert verdict.message.durations is not None
    assert verdict.message.durations.total_sec == 42.5


def test_a_runner_that_ended_without_a_message_is_an_internal_error() -> None:
    verdict = classify_pod(finished_pod(None, code=1, reason="Error"), now=CREATED, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.INTERNAL_ERROR
    assert "code 1" in verdict.message
    assert "(Error)" in verdict.message
    assert "not of the task" in verdict.message
    assert pod_phase_for_status(verdict) == TrialPhase.FAILED


def test_an_out_of_memory_runner_says_so() -> None:
    pod = finished_pod(None, code=137, reason="OOMKilled")
    verdict = classify_pod(pod, now=CREATED, config=CONFIG)
    assert verdict == Failed(
        ErrorType.INTERNAL_ERROR,
        "The runner container ended with code 137 (OOMKilled) without a readable termination "
        "message, so the trial has no outcome. This is a failure of the runner, not of the task "
        "or the agent.",
    )


def test_an_unreadable_message_is_an_internal_error() -> None:
    for raw in ("Traceback (most recent call last): ...", '{"reward": "high"}', "   "):
        verdict = classify_pod(
            finished_pod(raw, code=1, reason="Error"), now=CREATED, config=CONFIG
        )
        assert isinstance(verdict, Failed), raw
        assert verdict.error_type == ErrorType.INTERNAL_ERROR


def test_an_environment_that_died_first_is_a_start_failure() -> None:
    died = SCHEDULED + timedelta(seconds=2)
    gave_up = SCHEDULED + timedelta(seconds=600)
    pod = pod_with(
        {
            **running_status(),
            "phase": "Failed",
            "containerStatuses": [
                terminated("environment", TASK_IMAGE, code=127, reason="Error", finished=died),
                terminated("runner", RUNNER_IMAGE, code=1, reason="Error", finished=gave_up),
            ],
        }
    )
    verdict = classify_pod(pod, now=gave_up, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_START_FAILED
    assert "exited with code 127 (Error)" in verdict.message
    # The same environment exit after the runner's is not the cause.
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = ts(
        gave_up + timedelta(seconds=1)
    )
    verdict = classify_pod(pod, now=gave_up, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.INTERNAL_ERROR


# --- images ---------------------------------------------------------------------------------------

PULL_MESSAGE = (
    f'Back-off pulling image "{TASK_IMAGE}": ErrImagePull: failed to pull and unpack image '
    f'"{TASK_IMAGE}": failed to resolve reference "{TASK_IMAGE}": '
    f"{TASK_IMAGE.split(':')[0]}: not found"
)


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_an_environment_image_that_does_not_pull_fails_after_the_grace_period(reason: str) -> None:
    pod = pod_with(
        pending(
            waiting("environment", TASK_IMAGE, reason, PULL_MESSAGE),
            running("runner", RUNNER_IMAGE),
        )
    )
    grace = timedelta(seconds=CONFIG.image_pull_grace_sec)
    before = classify_pod(pod, now=SCHEDULED + grace - timedelta(seconds=1), config=CONFIG)
    assert before == Running(
        since=SCHEDULED
    )  # the runner waits for the environment; nothing to do yet
    verdict = classify_pod(pod, now=SCHEDULED + grace, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
    assert verdict.message == (
        f"The environment image {TASK_IMAGE} could not be pulled ({reason}: {PULL_MESSAGE})."
    )


def test_the_pull_grace_period_counts_from_scheduling_else_from_creation() -> None:
    status = pending(
        waiting("environment", TASK_IMAGE, "ImagePullBackOff", PULL_MESSAGE),
        waiting("runner", RUNNER_IMAGE, "ContainerCreating"),
    )
    pod = pod_with(status)
    just_before = SCHEDULED + timedelta(seconds=119)
    assert classify_pod(pod, now=just_before, config=CONFIG) == Waiting("ImagePullBackOff")
    # Without a PodScheduled time, the creation time counts: 5 s earlier.
    status["conditions"] = [c for c in status["conditions"] if c["type"] != "PodScheduled"]
    assert isinstance(classify_pod(pod, now=just_before, config=CONFIG), Failed)


def test_an_invalid_image_name_fails_at_once() -> None:
    message = 'Failed to apply default image tag "Ubuntu:Latest": couldn\'t parse image name'
    pod = pod_with(
        pending(
            waiting("environment", "Ubuntu:Latest", "InvalidImageName", message),
            waiting("runner", RUNNER_IMAGE, "ContainerCreating"),
        )
    )
    verdict = classify_pod(pod, now=SCHEDULED, config=CONFIG)
    assert verdict == Failed(
        ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
        f"The environment image Ubuntu:Latest could not be pulled (InvalidImageName: {message}).",
    )


def test_an_image_that_must_not_be_pulled_fails_at_once() -> None:
    message = f'Container image "{TASK_IMAGE}" is not present with pull policy of Never'
    pod = pod_with(
        pending(
            waiting("environment", TASK_IMAGE, "ErrImageNeverPull", message),
            running("runner", RUNNER_IMAGE),
        )
    )
    verdict = classify_pod(pod, now=SCHEDULED, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED


def test_the_runner_image_failing_to_pull_is_not_the_tasks_fault() -> None:
    message = f'Back-off pulling image "{RUNNER_IMAGE}"'
    pod = pod_with(
        pending(
            running("environment", TASK_IMAGE),
            waiting("runner", RUNNER_IMAGE, "ImagePullBackOff", message),
        )
    )
    grace = timedelta(seconds=CONFIG.image_pull_grace_sec)
    early = classify_pod(pod, now=SCHEDULED + grace - timedelta(seconds=1), config=CONFIG)
    assert early == Waiting("ImagePullBackOff")
    verdict = classify_pod(pod, now=SCHEDULED + grace, config=CONFIG)
    assert verdict == Failed(
        ErrorType.INTERNAL_ERROR,
        f"The runner image {RUNNER_IMAGE} could not be pulled (ImagePullBackOff: {message}). "
        "This is a problem of the operator's installation (its runner image or pull secrets), "
        "not of the task.",
    )


# --- starting containers --------------------------------------------------------------------------


def test_a_missing_secret_fails_the_start() -> None:
    message = 'secret "nightly-evals-agent-env" not found'
    pod = pod_with(
        pending(
            running("environment", TASK_IMAGE),
            waiting("runner", RUNNER_IMAGE, "CreateContainerConfigError", message),
        )
    )
    verdict = classify_pod(pod, now=SCHEDULED, config=CONFIG)
    assert verdict == Failed(
        ErrorType.ENVIRONMENT_START_FAILED,
        "The runner container of the trial's Pod could not be started "
        f"(CreateContainerConfigError: {message}).",
    )


def test_an_image_without_a_shell_fails_the_start() -> None:
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        'failed: runc create failed: unable to start container process: exec: "/bin/sh": '
        "stat /bin/sh: no such file or directory: unknown"
    )
    status = running_status(
        terminated(
            "environment",
            "gcr.io/distroless/static:nonroot",
            code=128,
            reason="StartError",
            finished=SCHEDULED,
            message=message,
        ),
        running("runner", RUNNER_IMAGE),
    )
    verdict = classify_pod(pod_with(status), now=SCHEDULED, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_START_FAILED
    assert f"(StartError: {message})" in verdict.message


@pytest.mark.parametrize("reason", ["CreateContainerError", "RunContainerError"])
def test_environment_container_errors_fail_the_start(reason: str) -> None:
    pod = pod_with(
        pending(
            waiting("environment", TASK_IMAGE, reason, "context deadline exceeded"),
            running("runner", RUNNER_IMAGE),
        )
    )
    verdict = classify_pod(pod, now=SCHEDULED, config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_START_FAILED
    assert "environment container" in verdict.message


# --- scheduling -----------------------------------------------------------------------------------

SCHEDULER_MESSAGE = (
    "0/3 nodes are available: 3 Insufficient cpu, 3 Insufficient memory. preemption: 0/3 nodes "
    "are available: 3 No preemption victims found for incoming pod."
)


def unschedulable_pod() -> dict[str, Any]:
    return pod_with(
        {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": SCHEDULER_MESSAGE,
                    "lastProbeTime": None,
                    "lastTransitionTime": ts(CREATED),
                }
            ],
        }
    )


def test_an_unschedulable_pod_waits_for_the_grace_period_then_fails() -> None:
    pod = unschedulable_pod()
    grace = timedelta(seconds=CONFIG.unschedulable_grace_sec)
    before = classify_pod(pod, now=CREATED + grace - timedelta(seconds=1), config=CONFIG)
    assert before == Waiting("Unschedulable")
    verdict = classify_pod(pod, now=CREATED + grace, config=CONFIG)
    assert verdict == Failed(
        ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        f"No node could take the trial's Pod for 600s (Unschedulable: {SCHEDULER_MESSAGE}). "
        "The environment asks for cpu 64, memory 512Gi, ephemeral-storage 10G.",
    )


def test_a_gated_pod_is_only_waiting() -> None:
    pod = unschedulable_pod()
    pod["status"]["conditions"][0].update(reason="SchedulingGated", message="gated")
    later = CREATED + timedelta(hours=2)
    assert classify_pod(pod, now=later, config=CONFIG) == Waiting("SchedulingGated")


# --- lost pods ------------------------------------------------------------------------------------


def evicted_pod(reason: str, message: str) -> dict[str, Any]:
    end = SCHEDULED + timedelta(seconds=30)
    return pod_with(
        {
            "phase": "Failed",
            "reason": reason,
            "message": message,
            "conditions": [
                *scheduled_conditions(),
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "TerminationByKubelet",
                    "message": message,
                    "lastTransitionTime": ts(end),
                },
            ],
            "containerStatuses": [
                terminated("environment", TASK_IMAGE, code=137, reason="Error", finished=end),
                terminated("runner", RUNNER_IMAGE, code=143, reason="Error", finished=end),
            ],
        }
    )


@pytest.mark.parametrize(
    ("reason", "message", "said"),
    [
        (
            "Evicted",
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi.",
            "was evicted from its node",
        ),
        ("Preempting", "Preempted in order to admit critical pod", "was preempted"),
        ("NodeLost", "Node node-7 which was running pod t is unresponsive", "lost its node"),
        (
            "Terminated",
            "Pod was terminated in response to imminent node shutdown.",
            "its node shut down",
        ),
        ("Shutdown", "Pod was rejected as the node is shutting down.", "its node shut down"),
        (
            "UnexpectedAdmissionError",
            "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
            "nvidia.com/gpu, which is unexpected",
            "was refused by its node",
        ),
        (
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 64000, used: "
            "2000, capacity: 64000",
            "was refused by its node",
        ),
    ],
)
def test_a_pod_taken_away_by_the_infrastructure_is_lost(
    reason: str, message: str, said: str
) -> None:
    verdict = classify_pod(evicted_pod(reason, message), now=CREATED, config=CONFIG)
    assert isinstance(verdict, Lost)
    assert said in verdict.reason
    assert f"({reason}: {message})" in verdict.reason
    assert pod_phase_for_status(verdict) == TrialPhase.PENDING


def test_a_disruption_before_the_pod_fails_is_lost() -> None:
    status = running_status(running("environment", TASK_IMAGE), running("runner", RUNNER_IMAGE))
    status["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": ts(SCHEDULED),
        }
    )
    verdict = classify_pod(pod_with(status), now=SCHEDULED, config=CONFIG)
    assert verdict == Lost(
        "The trial's Pod is being taken away by the cluster (DeletionByTaintManager: Taint "
        "manager: deleting due to NoExecute taint)."
    )


def test_a_pod_being_deleted_before_the_runner_finished_is_lost() -> None:
    status = running_status(running("environment", TASK_IMAGE), running("runner", RUNNER_IMAGE))
    pod = pod_with(status, deleting=SCHEDULED + timedelta(seconds=30))
    assert classify_pod(pod, now=SCHEDULED, config=CONFIG) == Lost(
        "The trial's Pod is being deleted before the trial finished."
    )


def test_a_runner_whose_status_is_unknown_is_lost() -> None:
    end = SCHEDULED + timedelta(seconds=30)
    pod = finished_pod(None, code=137, reason="ContainerStatusUnknown")
    pod["status"]["containerStatuses"][1]["state"]["terminated"]["message"] = (
        "The container could not be located when the pod was terminated"
    )
    verdict = classify_pod(pod, now=end, config=CONFIG)
    assert isinstance(verdict, Lost)
    assert "ContainerStatusUnknown" in verdict.reason


def test_a_finished_runner_wins_over_a_later_loss() -> None:
    raw = outcome(0.5)
    evicted = evicted_pod("Evicted", "The node was low on resource: ephemeral-storage.")
    evicted["status"]["containerStatuses"][1]["state"]["terminated"].update(
        exitCode=0, reason="Completed", message=raw
    )
    verdict = classify_pod(evicted, now=CREATED, config=CONFIG)
    assert isinstance(verdict, Finished)
    assert verdict.message is not None
    assert verdict.message.reward == 0.5
    deleting = finished_pod(raw)
    deleting["metadata"]["deletionTimestamp"] = ts(SCHEDULED)
    assert isinstance(classify_pod(deleting, now=CREATED, config=CONFIG), Finished)


def test_a_loss_wins_over_a_pending_image_error() -> None:
    pod = pod_with(
        pending(
            waiting("environment", TASK_IMAGE, "InvalidImageName", "bad"),
            waiting("runner", RUNNER_IMAGE, "ContainerCreating"),
        ),
        deleting=SCHEDULED,
    )
    assert isinstance(classify_pod(pod, now=SCHEDULED, config=CONFIG), Lost)


def test_time_without_a_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        classify_pod(unschedulable_pod(), now=datetime(2024, 5, 1, 13, 0), config=CONFIG)


def test_a_missing_pod_is_lost() -> None:
    verdict = classify_missing_pod()
    assert isinstance(verdict, Lost)
    assert "no longer exists" in verdict.reason


# --- the trial's phase ----------------------------------------------------------------------------


def test_phases_for_verdicts() -> None:
    teardown = TerminationMessage.model_validate(
        {"reward": 1.0, "error": {"type": "environment_teardown_failed", "message": "x"}}
    )
    assert pod_phase_for_status(Waiting()) == TrialPhase.PENDING
    assert pod_phase_for_status(Running()) == TrialPhase.RUNNING
    assert pod_phase_for_status(Finished(teardown, None)) == TrialPhase.SUCCEEDED
    assert pod_phase_for_status(Finished(None, "garbage")) == TrialPhase.FAILED
    assert pod_phase_for_status(Failed(ErrorType.INTERNAL_ERROR, "x")) == TrialPhase.FAILED
    assert pod_phase_for_status(Lost("gone")) == TrialPhase.PENDING


def deadline_exceeded(*containers: dict[str, Any]) -> dict[str, Any]:
    """What the kubelet writes when a Pod outlives its activeDeadlineSeconds."""
    return {
        **pending(*containers),
        "phase": "Failed",
        "reason": "DeadlineExceeded",
        "message": "Pod was active on the node longer than the specified deadline",
    }


def test_a_pod_that_never_started_within_its_deadline_failed_to_start() -> None:
    # A Secret the runner mounts is missing: both containers stay in ContainerCreating.
    pod = pod_with(
        deadline_exceeded(
            waiting("environment", TASK_IMAGE, "ContainerCreating"),
            waiting("runner", RUNNER_IMAGE, "ContainerCreating"),
        )
    )
    verdict = classify_pod(pod, now=CREATED + timedelta(hours=3), config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.ENVIRONMENT_START_FAILED
    deadline = pod["spec"]["activeDeadlineSeconds"]
    assert f"did not start within its deadline of {deadline}s" in verdict.message
    assert "DeadlineExceeded" in verdict.message


def test_a_runner_still_running_at_the_deadline_is_an_internal_error() -> None:
    pod = pod_with(
        deadline_exceeded(
            running("environment", TASK_IMAGE),
            running("runner", RUNNER_IMAGE),
        )
    )
    verdict = classify_pod(pod, now=CREATED + timedelta(hours=3), config=CONFIG)
    assert isinstance(verdict, Failed)
    assert verdict.error_type == ErrorType.INTERNAL_ERROR
    assert "runner did not finish" in verdict.message


def test_a_runner_that_reported_before_the_deadline_keeps_its_outcome() -> None:
    pod = pod_with(
        deadline_exceeded(
            running("environment", TASK_IMAGE),
            terminated(
                "runner",
                RUNNER_IMAGE,
                code=0,
                reason="Completed",
                finished=SCHEDULED + timedelta(minutes=5),
                message=outcome(reward=1.0),
            ),
        )
    )
    verdict = classify_pod(pod, now=CREATED + timedelta(hours=3), config=CONFIG)
    assert isinstance(verdict, Finished)
    assert verdict.message is not None
    assert verdict.message.reward == 1.0
