"""What a build Pod's status means for its RolloutImage, from status bodies as a kubelet writes
them: built, failed, timed out, not run, lost, or still going, and which wins when several hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import container_statuses
from container_statuses import ts, waiting
from rollout.api.resources import ImageReason, RolloutImageSpec
from rollout.api.wire.build import BuildReport, render_report
from rollout.controller.build_pod import DEADLINE_MARGIN_SEC, render_build_pod
from rollout.controller.buildstatus import (
    BuildFailed,
    BuildLost,
    BuildSucceeded,
    BuildVerdict,
    BuildWaiting,
    classify_build_pod,
)
from rollout.controller.config import OperatorConfig

CREATED = datetime(2025, 1, 15, 10, 0, 0, tzinfo=UTC)
SCHEDULED = CREATED + timedelta(seconds=5)
BUILT = SCHEDULED + timedelta(seconds=90)
RUNNER_IMAGE = "registry.example.com/rollout-runner:0.3.0"
BUILDER_IMAGE = "moby/buildkit:v0.23.2-rootless"
CONFIG = OperatorConfig(
    runner_image=RUNNER_IMAGE, image_pull_grace_sec=120, unschedulable_grace_sec=600
)
IMAGE_HASH = "0123456789abcdef" * 4
DIGEST = "sha256:" + "fedcba9876543210" * 4
TIMEOUT = 900
LOG_URI = f"s3://evals/jobs/nightly/builds/{IMAGE_HASH}.log"
FAILED_TAIL = (
    "#7 [2/3] RUN pip install -r requirements.txt\n"
    "#7 4.213 ERROR: No matching distribution found for torch==9.9.9\n"
    "ERROR: failed to solve: process did not complete successfully: exit code: 1"
)

IMAGE: dict[str, Any] = {
    "metadata": {"name": "env-0123456789", "namespace": "evals", "uid": "img-uid"},
    "spec": {
        "environmentHash": "e" * 64,
        "imageHash": IMAGE_HASH,
        "image": f"registry.local:5000/rollout-env:{IMAGE_HASH}",
        "pullImage": f"localhost:5001/rollout-env:{IMAGE_HASH}",
        "context": {
            "storage": {"bucket": "evals"},
            "key": f"environments/{'e' * 64}.tar.gz",
        },
        "builder": {"type": "buildkit", "image": BUILDER_IMAGE},
        "platform": "linux/amd64",
        "timeoutSeconds": TIMEOUT,
        "logKey": f"jobs/nightly/builds/{IMAGE_HASH}.log",
    },
}
SPEC = RolloutImageSpec.model_validate(IMAGE["spec"])


def running(name: str, image: str, since: datetime = SCHEDULED) -> dict[str, Any]:
    return container_statuses.running(name, image, since)


def terminated(
    name: str,
    image: str,
    *,
    code: int,
    reason: str = "Completed",
    message: str | None = None,
    finished: datetime = BUILT,
) -> dict[str, Any]:
    return container_statuses.terminated(
        name, image, code=code, reason=reason, started=SCHEDULED, finished=finished,
        message=message,
    )  # fmt: skip


def pod_with(status: dict[str, Any], *, deleting: datetime | None = None) -> dict[str, Any]:
    """The rendered build Pod as the API returns it: with its creation time and a status."""
    pod = render_build_pod(IMAGE, config=CONFIG, attempt=1)
    pod["metadata"]["creationTimestamp"] = ts(CREATED)
    pod["metadata"]["uid"] = "pod-uid"
    if deleting is not None:
        pod["metadata"]["deletionTimestamp"] = ts(deleting)
        pod["metadata"]["deletionGracePeriodSeconds"] = 10
    pod["status"] = status
    return pod


def classify(pod: dict[str, Any], now: datetime = BUILT, **config: Any) -> BuildVerdict:
    settings = CONFIG.model_copy(update=config) if config else CONFIG
    return classify_build_pod(pod, spec=SPEC, now=now, config=settings)


def conditions(
    *, scheduled: datetime = SCHEDULED, initialized: bool = True
) -> list[dict[str, Any]]:
    return [
        {
            "type": "PodReadyToStartContainers",
            "status": "True",
            "lastTransitionTime": ts(scheduled),
        },
        {
            "type": "Initialized",
            "status": "True" if initialized else "False",
            "lastTransitionTime": ts(scheduled),
        },
        {"type": "Ready", "status": "False", "lastTransitionTime": ts(scheduled)},
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": ts(scheduled)},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(scheduled)},
    ]


def context_done() -> dict[str, Any]:
    return terminated("context", RUNNER_IMAGE, code=0)


def status(
    *containers: dict[str, Any],
    init: dict[str, Any] | None = None,
    phase: str = "Running",
    **extra: Any,
) -> dict[str, Any]:
    """A Pod status as the kubelet writes it."""
    return {
        "phase": phase,
        "conditions": conditions(),
        "hostIP": "10.0.0.7",
        "podIP": "10.244.1.17",
        "startTime": ts(SCHEDULED),
        "initContainerStatuses": [init or context_done()],
        "containerStatuses": list(containers),
        **extra,
    }


def reported(
    report: BuildReport, *, build_code: int = 0, phase: str = "Succeeded"
) -> dict[str, Any]:
    """Both containers ended, the report container with `report` as its termination message."""
    message = render_report(report).decode()
    return status(
        terminated(
            "build",
            BUILDER_IMAGE,
            code=build_code,
            reason="Completed" if build_code == 0 else "Error",
        ),
        terminated("report", RUNNER_IMAGE, code=0, message=message),
        phase=phase,
    )


def building() -> dict[str, Any]:
    return status(running("build", BUILDER_IMAGE), running("report", RUNNER_IMAGE))


# --- the report says ------------------------------------------------------------------------------


def test_a_successful_report_is_the_images_digest() -> None:
    report = BuildReport(
        exit_code=0, digest=DIGEST, log_tail="#9 DONE 0.4s", log_uri=LOG_URI, build_sec=88.5
    )
    verdict = classify(pod_with(reported(report)))
    assert verdict == BuildSucceeded(DIGEST, report)


def test_a_failed_report_gives_the_exit_code_and_the_end_of_the_log() -> None:
    report = BuildReport(exit_code=1, log_tail=FAILED_TAIL, log_uri=LOG_URI, build_sec=30)
    verdict = classify(pod_with(reported(report, build_code=1)))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_FAILED
    assert "exited with code 1" in verdict.message
    assert verdict.message.endswith(FAILED_TAIL)
    assert verdict.report == report


def test_a_builder_that_exited_0_without_a_digest_failed() -> None:
    report = BuildReport(exit_code=0, digest=None, log_tail="pushed?")
    verdict = classify(pod_with(reported(report)))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_FAILED
    assert "named no pushed image" in verdict.message


def test_a_timed_out_report_is_the_builds_timeout() -> None:
    report = BuildReport(exit_code=None, timed_out=True, log_tail="#5 RUN make -j1 world")
    verdict = classify(pod_with(reported(report)))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_TIMEOUT
    assert f"{TIMEOUT} s" in verdict.message
    assert verdict.message.endswith("#5 RUN make -j1 world")
    assert verdict.report == report


def test_timed_out_wins_over_a_digest() -> None:
    # The builder finished after the deadline: too late is too late.
    report = BuildReport(exit_code=0, digest=DIGEST, timed_out=True)
    verdict = classify(pod_with(reported(report)))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_TIMEOUT


@pytest.mark.parametrize(
    "message", [None, "", "Traceback (most recent call last):", '{"exit_code": "x"}']
)
def test_a_report_container_that_ended_without_a_report_did_not_run_the_build(
    message: str | None,
) -> None:
    pod = pod_with(
        status(
            terminated("build", BUILDER_IMAGE, code=0),
            terminated("report", RUNNER_IMAGE, code=2, reason="Error", message=message),
            phase="Failed",
        )
    )
    verdict = classify(pod)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert "exit 2" in verdict.message
    assert verdict.report is None


def test_a_report_wins_over_the_pod_going_away() -> None:
    report = BuildReport(exit_code=0, digest=DIGEST)
    deleting = pod_with(reported(report), deleting=BUILT)
    assert classify(deleting) == BuildSucceeded(DIGEST, report)
    evicted = pod_with({**reported(report), "phase": "Failed", "reason": "Evicted"})
    assert classify(evicted) == BuildSucceeded(DIGEST, report)
    failed = BuildReport(exit_code=1, log_tail="boom")
    late = pod_with({**reported(failed), "phase": "Failed", "reason": "DeadlineExceeded"})
    verdict = classify(late)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_FAILED  # what the report says, not the deadline


# --- the Pod was taken away -----------------------------------------------------------------------


EVICTION = (
    "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 512Mi."
)


@pytest.mark.parametrize(
    ("reason", "message", "words"),
    [
        ("Evicted", EVICTION, "evicted"),
        ("Preempting", "Preempted in order to admit critical pod", "preempted"),
        ("NodeLost", None, "lost its node"),
        ("OutOfmemory", "Node didn't have enough resource: memory", "refused by its node"),
    ],
)
def test_a_pod_taken_away_while_building_is_lost(
    reason: str, message: str | None, words: str
) -> None:
    extra: dict[str, Any] = {"reason": reason}
    if message is not None:
        extra["message"] = message
    pod = pod_with(
        status(
            running("build", BUILDER_IMAGE),
            running("report", RUNNER_IMAGE),
            phase="Failed",
            **extra,
        )
    )
    verdict = classify(pod)
    assert isinstance(verdict, BuildLost)
    assert words in verdict.message
    if message is not None:
        assert message in verdict.message


def test_an_evicted_pod_whose_containers_the_kubelet_killed_is_lost() -> None:
    # What the kubelet leaves of an evicted Pod: every container killed (137), no report written.
    pod = pod_with(
        status(
            terminated("build", BUILDER_IMAGE, code=137, reason="Error"),
            terminated("report", RUNNER_IMAGE, code=137, reason="Error"),
            phase="Failed",
            reason="Evicted",
            message=EVICTION,
        )
    )
    verdict = classify(pod)
    assert isinstance(verdict, BuildLost), verdict


def test_a_pod_being_deleted_is_lost() -> None:
    pod = pod_with(building(), deleting=BUILT)
    verdict = classify(pod)
    assert isinstance(verdict, BuildLost)
    assert "deleted" in verdict.message


def test_an_out_of_resource_reason_of_a_pod_still_pending_is_not_lost() -> None:
    # OutOf<resource> means the kubelet refused the Pod only once the Pod has failed.
    pod = pod_with(building() | {"reason": "OutOfcpu"})
    assert isinstance(classify(pod), BuildWaiting)


# --- the deadline ---------------------------------------------------------------------------------


def deadline_exceeded(
    *containers: dict[str, Any], init: dict[str, Any] | None = None
) -> dict[str, Any]:
    return status(
        *containers,
        init=init,
        phase="Failed",
        reason="DeadlineExceeded",
        message="Pod was active on the node longer than the specified deadline",
    )


def test_a_pod_past_its_deadline_while_fetching_the_context_timed_out() -> None:
    pod = pod_with(
        deadline_exceeded(
            waiting("build", BUILDER_IMAGE, "PodInitializing"),
            waiting("report", RUNNER_IMAGE, "PodInitializing"),
            init=running("context", RUNNER_IMAGE),
        )
    )
    verdict = classify(pod, now=CREATED + timedelta(hours=1))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_TIMEOUT
    assert f"{TIMEOUT + DEADLINE_MARGIN_SEC} s" in verdict.message
    assert f"{TIMEOUT} s" in verdict.message


def test_a_pod_whose_containers_the_kubelet_killed_at_the_deadline_timed_out() -> None:
    # What the kubelet leaves at activeDeadlineSeconds: every running container killed, the
    # report container before it could write a report.
    pod = pod_with(
        deadline_exceeded(
            terminated("build", BUILDER_IMAGE, code=137, reason="Error"),
            terminated("report", RUNNER_IMAGE, code=137, reason="Error"),
        )
    )
    verdict = classify(pod, now=CREATED + timedelta(hours=1))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_TIMEOUT, verdict.message


# --- the build could not run ----------------------------------------------------------------------


def test_a_failed_context_quotes_its_message() -> None:
    said = (
        "the build context s3://evals/environments/eee.tar.gz cannot be fetched: there is no "
        "such object at http://minio:9000 (was the environment published to this storage?)"
    )
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "PodInitializing"),
            waiting("report", RUNNER_IMAGE, "PodInitializing"),
            init=terminated("context", RUNNER_IMAGE, code=1, reason="Error", message=said + "\n"),
            phase="Failed",
        )
    )
    verdict = classify(pod)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert said in verdict.message
    assert "context" in verdict.message


def test_a_failed_context_without_a_message_gives_its_exit_code() -> None:
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "PodInitializing"),
            waiting("report", RUNNER_IMAGE, "PodInitializing"),
            init=terminated("context", RUNNER_IMAGE, code=2, reason="Error"),
            phase="Failed",
        )
    )
    verdict = classify(pod)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert "exit 2" in verdict.message


PULL_MESSAGE = (
    'failed to pull and unpack image "docker.io/moby/buildkit:v0.23.2-rootless": '
    "429 Too Many Requests"
)


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_a_builder_image_that_fails_to_pull_fails_after_the_grace(reason: str) -> None:
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, reason, PULL_MESSAGE), running("report", RUNNER_IMAGE)
        )
    )
    # The grace counts from when the Pod was scheduled (when pulling could begin).
    early = classify(pod, now=SCHEDULED + timedelta(seconds=119))
    assert early == BuildWaiting(reason)
    late = classify(pod, now=SCHEDULED + timedelta(seconds=120))
    assert isinstance(late, BuildFailed)
    assert late.reason is ImageReason.BUILD_NOT_RUN
    assert "builder's image" in late.message
    assert BUILDER_IMAGE in late.message
    assert PULL_MESSAGE in late.message
    # The operator's setting decides the grace.
    assert isinstance(
        classify(pod, now=SCHEDULED + timedelta(seconds=11), image_pull_grace_sec=10), BuildFailed
    )


def test_the_pull_grace_starts_when_the_pod_was_scheduled_not_made() -> None:
    # The Pod waited 20 minutes for a node, then its pull failed 30 s ago.
    scheduled = CREATED + timedelta(minutes=20)
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "ErrImagePull", PULL_MESSAGE),
            running("report", RUNNER_IMAGE),
        )
        | {"conditions": conditions(scheduled=scheduled)}
    )
    assert classify(pod, now=scheduled + timedelta(seconds=30)) == BuildWaiting("ErrImagePull")


def test_an_invalid_image_name_fails_at_once() -> None:
    pod = pod_with(
        status(
            waiting(
                "build",
                "moby/BuildKit:bad tag",
                "InvalidImageName",
                'couldn\'t parse image reference "moby/BuildKit:bad tag"',
            ),
            running("report", RUNNER_IMAGE),
        )
    )
    verdict = classify(pod, now=SCHEDULED)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert "moby/BuildKit:bad tag" in verdict.message


def test_a_runner_image_that_fails_to_pull_is_named_as_the_runners() -> None:
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "PodInitializing"),
            waiting("report", RUNNER_IMAGE, "PodInitializing"),
            init=waiting("context", RUNNER_IMAGE, "ImagePullBackOff", "Back-off pulling image"),
            phase="Pending",
        )
    )
    verdict = classify(pod, now=SCHEDULED + timedelta(minutes=5))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert "context" in verdict.message
    assert "runner's image" in verdict.message
    assert RUNNER_IMAGE in verdict.message


def test_a_container_that_cannot_be_created_fails_at_once() -> None:
    said = 'secret "registry-push" not found'
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "CreateContainerConfigError", said),
            running("report", RUNNER_IMAGE),
        )
    )
    verdict = classify(pod, now=SCHEDULED)
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert "build container could not be started" in verdict.message
    assert said in verdict.message


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": ts(CREATED),
            }
        ],
    }


NO_NODE = "0/3 nodes are available: 3 Insufficient ephemeral-storage."


def test_an_unschedulable_pod_fails_after_the_grace() -> None:
    pod = pod_with(unschedulable(NO_NODE))
    assert classify(pod, now=CREATED + timedelta(seconds=599)) == BuildWaiting("Unschedulable")
    verdict = classify(pod, now=CREATED + timedelta(seconds=601))
    assert isinstance(verdict, BuildFailed)
    assert verdict.reason is ImageReason.BUILD_NOT_RUN
    assert NO_NODE in verdict.message
    assert "601 s" in verdict.message
    shorter = classify(pod, now=CREATED + timedelta(seconds=31), unschedulable_grace_sec=30)
    assert isinstance(shorter, BuildFailed)


def test_a_pod_not_yet_scheduled_for_another_reason_waits() -> None:
    pod = pod_with(
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "lastTransitionTime": ts(CREATED),
                }
            ],
        }
    )
    assert classify(pod, now=CREATED + timedelta(hours=2)) == BuildWaiting("SchedulingGated")


# --- still going ----------------------------------------------------------------------------------


def test_a_running_build_waits() -> None:
    assert classify(pod_with(building())) == BuildWaiting(None)


def test_a_build_finished_before_its_report_waits_for_the_report() -> None:
    pod = pod_with(
        status(
            terminated("build", BUILDER_IMAGE, code=1, reason="Error"),
            running("report", RUNNER_IMAGE),
        )
    )
    assert classify(pod) == BuildWaiting(None)


def test_a_pod_just_made_waits() -> None:
    assert classify(pod_with({}), now=CREATED) == BuildWaiting(None)
    assert classify(pod_with({"phase": "Pending"}), now=CREATED) == BuildWaiting(None)


def test_a_pod_starting_its_containers_waits_with_the_kubelets_reason() -> None:
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "ContainerCreating"),
            waiting("report", RUNNER_IMAGE, "ContainerCreating"),
            phase="Pending",
        )
    )
    assert classify(pod, now=SCHEDULED + timedelta(hours=1)) == BuildWaiting("ContainerCreating")


def test_a_pod_fetching_its_context_waits() -> None:
    pod = pod_with(
        status(
            waiting("build", BUILDER_IMAGE, "PodInitializing"),
            waiting("report", RUNNER_IMAGE, "PodInitializing"),
            init=running("context", RUNNER_IMAGE),
            phase="Pending",
        )
    )
    assert classify(pod) == BuildWaiting("PodInitializing")
