"""What a build Pod's status says about its build: still going, built, failed, lost. Pure.

`classify_build_pod` reads a build Pod (`build_pod`) as the API returns it, in this order:

1. the `report` container left its `BuildReport` (`rollout.api.wire.build`): that is the
   outcome: built (the image's digest), failed (the builder's exit status and the end of its
   log) or past its timeout. A report container that ended without one was killed with the Pod
   (2., 3.) or failed itself, the build's failure to run;
2. the Pod was taken away (evicted, preempted, its node lost, deleted): `BuildLost`, and the
   image's reconciler makes a new Pod, a few times at most;
3. the kubelet ended the Pod at its deadline: the build's timeout;
4. the build could not run: the `context` container failed (its termination message says
   why), an image could not be pulled (at once for a name that can never work, after the
   operator's image pull grace for errors that may pass), a container could not start, or no
   node took the Pod within the operator's unschedulable grace;
5. otherwise it runs, or waits.

Failures that are not the Dockerfile's (4., and a lost Pod too often) have the reason
`BuildNotRun`: the trials that waited for the image fail with `environment_build_failed` all the
same, classed as the infrastructure's (`rollout.api.failures.BUILD_NOT_RUN`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.api.resources import ImageReason, RolloutImageSpec
from rollout.api.wire.build import BuildReport, parse_report
from rollout.controller.build_pod import BUILD_CONTAINER, CONTEXT_CONTAINER, REPORT_CONTAINER
from rollout.controller.config import OperatorConfig
from rollout.controller.podfields import (
    container_statuses,
    pod_condition,
    pull_start,
    said,
    seconds_since,
    terminated_state,
    timestamp,
)
from rollout.controller.podstatus import (
    CONTAINER_START_ERRORS,
    IMAGE_PULL_HOPELESS,
    IMAGE_PULL_RETRYING,
    LOST_POD_REASONS,
)


@dataclass(frozen=True)
class BuildWaiting:
    """The build is under way (or its Pod on its way)."""

    reason: str | None = None


@dataclass(frozen=True)
class BuildSucceeded:
    """The image was built and pushed."""

    digest: str
    report: BuildReport


@dataclass(frozen=True)
class BuildFailed:
    """The build failed, timed out or could not run; `message` says how, in the user's words."""

    reason: ImageReason
    message: str
    report: BuildReport | None = None


@dataclass(frozen=True)
class BuildLost:
    """The Pod went away before the build finished: not the build's doing."""

    message: str


BuildVerdict = BuildWaiting | BuildSucceeded | BuildFailed | BuildLost


def classify_build_pod(
    pod: Mapping[str, Any], *, spec: RolloutImageSpec, now: datetime, config: OperatorConfig
) -> BuildVerdict:
    """The build's fate as far as `pod` shows it (see the module docstring)."""
    status: Mapping[str, Any] = pod.get("status") or {}
    containers = container_statuses(status)
    init = {
        s["name"]: s
        for s in status.get("initContainerStatuses") or []
        if isinstance(s, Mapping) and "name" in s
    }
    report_end = terminated_state(containers.get(REPORT_CONTAINER, {}))
    report = parse_report(report_end.get("message")) if report_end is not None else None
    if report is not None:
        return _reported(report, spec)
    # A report container ended without a report was killed, or failed itself: the Pod's fate
    # says which (an eviction and the deadline kill every container).
    if (lost := _lost(pod, status)) is not None:
        return lost
    if status.get("reason") == "DeadlineExceeded":
        return BuildFailed(
            ImageReason.BUILD_TIMEOUT,
            f"The build Pod ran past its deadline of "
            f"{(pod.get('spec') or {}).get('activeDeadlineSeconds')} s (the build's timeout of "
            f"{spec.timeout_seconds} s, and time to fetch its context and pull the builder) "
            "before it reported.",
        )
    if report_end is not None:
        return BuildFailed(
            ImageReason.BUILD_NOT_RUN,
            f"The build Pod's {REPORT_CONTAINER} container ended (exit "
            f"{report_end.get('exitCode')}) without a report of the build.",
        )
    context_end = terminated_state(init.get(CONTEXT_CONTAINER, {}))
    if context_end is not None and context_end.get("exitCode") not in (0, None):
        said = str(context_end.get("message") or "").strip() or f"exit {context_end['exitCode']}"
        return BuildFailed(
            ImageReason.BUILD_NOT_RUN, f"The build's context could not be fetched: {said}"
        )
    if failed := _cannot_start(pod, status, [*init.items(), *containers.items()], now, config):
        return failed
    if (unschedulable := _unschedulable(pod, status, now, config)) is not None:
        return unschedulable
    return BuildWaiting(_waiting_reason(status, containers))


def _reported(report: BuildReport, spec: RolloutImageSpec) -> BuildVerdict:
    tail = f" The end of its log:\n{report.log_tail}" if report.log_tail else ""
    if report.timed_out:
        return BuildFailed(
            ImageReason.BUILD_TIMEOUT,
            f"The image build ran past its timeout of {spec.timeout_seconds} s "
            f"(environment.build_timeout_sec x timeout_multiplier).{tail}",
            report,
        )
    if report.exit_code == 0 and report.digest is not None:
        return BuildSucceeded(report.digest, report)
    if report.exit_code == 0:
        why = "the builder exited 0 but named no pushed image"
    else:
        why = f"the builder exited with code {report.exit_code}"
    return BuildFailed(ImageReason.BUILD_FAILED, f"The image build failed: {why}.{tail}", report)


def _lost(pod: Mapping[str, Any], status: Mapping[str, Any]) -> BuildLost | None:
    reason = str(status.get("reason") or "")
    if reason in LOST_POD_REASONS or (
        reason.startswith("OutOf") and status.get("phase") == "Failed"
    ):
        what = LOST_POD_REASONS.get(reason, "was refused by its node")
        return BuildLost(f"The build Pod {what}{said(reason, status.get('message'))}.")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return BuildLost("The build Pod was deleted before the build finished.")
    return None


def _cannot_start(
    pod: Mapping[str, Any],
    status: Mapping[str, Any],
    containers: list[tuple[str, Mapping[str, Any]]],
    now: datetime,
    config: OperatorConfig,
) -> BuildFailed | None:
    for name, container in containers:
        state = container.get("state") or {}
        problem = state.get("waiting") or state.get("terminated") or {}
        reason = str(problem.get("reason") or "")
        told = said(reason, problem.get("message"))
        image = container.get("image") or "its image"
        whose = "the builder's" if name == BUILD_CONTAINER else "the runner's"
        if reason in IMAGE_PULL_HOPELESS or (
            reason in IMAGE_PULL_RETRYING
            and seconds_since(pull_start(pod), now) >= config.image_pull_grace_sec
        ):
            return BuildFailed(
                ImageReason.BUILD_NOT_RUN,
                f"The build Pod's {name} container could not pull {whose} image {image}{told}.",
            )
        if reason in CONTAINER_START_ERRORS:
            return BuildFailed(
                ImageReason.BUILD_NOT_RUN,
                f"The build Pod's {name} container could not be started{told}.",
            )
    return None


def _unschedulable(
    pod: Mapping[str, Any], status: Mapping[str, Any], now: datetime, config: OperatorConfig
) -> BuildFailed | None:
    scheduled = pod_condition(status, "PodScheduled")
    if scheduled is None or scheduled.get("status") != "False":
        return None
    if scheduled.get("reason") != "Unschedulable":
        return None
    waited = seconds_since(timestamp((pod.get("metadata") or {}).get("creationTimestamp")), now)
    if waited < config.unschedulable_grace_sec:
        return None
    return BuildFailed(
        ImageReason.BUILD_NOT_RUN,
        f"No node could take the build Pod for {waited:.0f} s"
        f"{said('Unschedulable', scheduled.get('message'))}.",
    )


def _waiting_reason(
    status: Mapping[str, Any], containers: Mapping[str, Mapping[str, Any]]
) -> str | None:
    for container in containers.values():
        waiting = (container.get("state") or {}).get("waiting")
        if isinstance(waiting, Mapping) and waiting.get("reason"):
            return str(waiting["reason"])
    scheduled = pod_condition(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return str(scheduled.get("reason") or "Unscheduled")
    return None
