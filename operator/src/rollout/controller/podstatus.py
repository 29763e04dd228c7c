"""What a trial Pod's status says about the trial: still waiting, running, finished, failed, lost.

`classify_pod` is pure: the Pod as the API returns it and the current time in, a `PodVerdict`
out. It reads only what the Pod shows (container states, conditions, reasons, the runner's
termination message), in this order of precedence:

1. `Finished`: the runner terminated with a termination message that parses. The trial's outcome
   is in it, whatever happened to the Pod afterwards; but for a shard of data rows whose runner
   stopped before its last row, and for a runner stopped by its Pod's deletion (SIGTERM: it
   reports internal_error) while the Pod is still there, Terminating: then the Pod's loss (or
   its deadline) decides, and a lost trial runs again (a lost shard for the rows it left).
2. `Lost`: the Pod was evicted, preempted, lost with its node, shut down with it, refused by the
   kubelet at admission, or is being deleted, before the runner finished. Not the trial's doing:
   the operator retries it in a new Pod (up to the job's retry limit).
3. `Failed`: the runner terminated without a message, an image cannot be pulled (at once for a
   name that can never work, after `image_pull_grace_sec` for pull errors, which may be
   transient), a container cannot be created or started, or the Pod has been Unschedulable for
   `unschedulable_grace_sec`. The error types are the seed's; a failure of our own runner
   container is `internal_error`, never the task's fault.
4. `Running` when the runner runs, else `Waiting`.

Messages say what happened in the user's words and quote the kubelet's (or the scheduler's)
reason and message.

Why one module of about 400 lines: the cases above and the helpers that read each one
from the Pod are one decision in that order of precedence; split, the order would no longer
read in one place. Readers of a Pod that are not part of that decision live in `podfields`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from rollout.api.errors import ErrorType
from rollout.api.resources import TrialPhase
from rollout.api.wire.termination import TerminationMessage
from rollout.controller.config import OperatorConfig
from rollout.controller.pod import ENVIRONMENT_CONTAINER, RUNNER_CONTAINER
from rollout.controller.podfields import (
    container_statuses,
    pod_condition,
    pull_start,
    said,
    seconds_since,
    terminated_state,
    timestamp,
)

# --- verdicts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """The Pod is not running the trial yet (scheduling, pulling, starting); nothing is wrong."""

    reason: str | None = None
    """What it waits for, when the Pod says (e.g. "ContainerCreating", "ImagePullBackOff")."""


@dataclass(frozen=True)
class Running:
    """The runner is running: the trial is under way."""

    since: datetime | None = None
    """When the runner's container started, as the kubelet says (None: it does not say)."""


@dataclass(frozen=True)
class Finished:
    """The runner terminated and left its summary: the trial's outcome (which may be an error)."""

    message: TerminationMessage | None
    raw: str | None
    """The termination message as the kubelet reported it."""


@dataclass(frozen=True)
class Failed:
    """The trial failed in a way only the Pod shows; the runner produced no outcome."""

    error_type: ErrorType
    message: str


@dataclass(frozen=True)
class Lost:
    """The Pod went away for reasons of the infrastructure: retry the trial in a new Pod."""

    reason: str


PodVerdict = Waiting | Running | Finished | Failed | Lost

# --- kubelet and scheduler vocabulary -------------------------------------------------------------

IMAGE_PULL_RETRYING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"})
"""Pull errors that may pass (a registry hiccup, a rate limit): failed after the grace period."""

IMAGE_PULL_HOPELESS = frozenset({"InvalidImageName", "ErrImageNeverPull", "ImageInspectError"})
"""Image errors that no retry fixes: failed at once."""

CONTAINER_START_ERRORS = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "StartError",
        "ContainerCannotRun",
    }
)
"""A container that cannot be created or started (a missing Secret or key, no /bin/sh, ...)."""

LOST_POD_REASONS: Mapping[str, str] = {
    "Evicted": "was evicted from its node",
    "Preempting": "was preempted to make room for a Pod of higher priority",
    "NodeLost": "lost its node",
    "Shutdown": "was stopped because its node shut down",
    "NodeShutdown": "was stopped because its node shut down",
    "Terminated": "was stopped because its node shut down",
    "UnexpectedAdmissionError": "was refused by its node",
    "NodeAffinity": "was refused by its node",
}
"""status.reason of a Pod that the node or the cluster took away, and what that means. A reason
`OutOf<resource>` too: the kubelet refused the Pod at admission for lack of a resource that the
scheduler thought free."""

LOST_CONTAINER_REASONS = frozenset({"ContainerStatusUnknown"})
"""A runner that ended this way was not seen to end: its node or runtime lost track of it."""


def classify_missing_pod() -> Lost:
    """The verdict when the trial's Pod is gone altogether (deleted, garbage-collected)."""
    return Lost("The trial's Pod no longer exists: it was deleted before the trial finished.")


def classify_pod(pod: Mapping[str, Any], *, now: datetime, config: OperatorConfig) -> PodVerdict:
    """The trial's fate as far as `pod` (a Pod object as the API returns it) shows it.

    `now` must be timezone-aware (the API's timestamps are UTC): grace periods are measured
    against it.
    """
    if now.tzinfo is None:
        raise ValueError("classify_pod needs a timezone-aware `now`, e.g. datetime.now(UTC)")
    status: Mapping[str, Any] = pod.get("status") or {}
    containers = container_statuses(status)
    runner = containers.get(RUNNER_CONTAINER, {})
    environment = containers.get(ENVIRONMENT_CONTAINER, {})
    runner_end = terminated_state(runner)

    if runner_end is not None and (finished := _finished(runner_end)) is not None:
        if not _unfinished_shard(finished) and not _stopped_by_deletion(pod, finished):
            return finished
        # A shard's runner that stopped before its last row (SIGTERM: its Pod went, or ran
        # out of time) leaves rows for the next try: the Pod's fate decides, as without one.
        if (lost := _lost(pod, status)) is not None:
            return lost
        if status.get("reason") == "DeadlineExceeded":
            return _deadline_exceeded(pod, status, runner)
        return finished
    if (lost := _lost(pod, status)) is not None:
        return lost
    if status.get("reason") == "DeadlineExceeded":
        return _deadline_exceeded(pod, status, runner)
    if runner_end is not None:
        return _runner_ended_without_message(runner_end, environment)
    if (
        failed := _image_or_start_failure(pod, status, environment, runner, now, config)
    ) is not None:
        return failed
    if (unschedulable := _unschedulable(pod, status, now, config)) is not None:
        return unschedulable
    if isinstance(running := (runner.get("state") or {}).get("running"), Mapping):
        return Running(timestamp(running.get("startedAt")))
    return Waiting(_waiting_reason(status, runner, environment))


def pod_phase_for_status(verdict: PodVerdict) -> TrialPhase:
    """The RolloutTrial's phase for a verdict.

    A finished trial Succeeded unless its error kept the reward (a teardown error alone does not);
    a lost Pod leaves the trial Pending, as its retry will start over.
    """
    if isinstance(verdict, Running):
        return TrialPhase.RUNNING
    if isinstance(verdict, Failed):
        return TrialPhase.FAILED
    if isinstance(verdict, Finished):
        error = verdict.message.error if verdict.message is not None else None
        if verdict.message is None or (
            error is not None and error.type != ErrorType.ENVIRONMENT_TEARDOWN_FAILED
        ):
            return TrialPhase.FAILED
        return TrialPhase.SUCCEEDED
    return TrialPhase.PENDING


# --- the steps ------------------------------------------------------------------------------------


def _unfinished_shard(finished: Finished) -> bool:
    """A shard's runner reported fewer rows recorded than its shard has."""
    rows = finished.message.rows if finished.message is not None else None
    return rows is not None and rows.get("recorded", 0) < rows.get("total", 0)


def _stopped_by_deletion(pod: Mapping[str, Any], finished: Finished) -> bool:
    """The runner of a Pod being deleted ended with internal_error: what a runner stopped by
    SIGTERM reports (the trial's own outcome would have come without the deletion). Seen when
    the operator looks only after the runner reported (it was down, or the Pod stays
    Terminating while the kubelet unmounts its volumes)."""
    error = finished.message.error if finished.message is not None else None
    return (
        bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        and error is not None
        and error.type == ErrorType.INTERNAL_ERROR
    )


def _finished(terminated: Mapping[str, Any]) -> Finished | None:
    """The runner's outcome, when its termination message parses."""
    raw = terminated.get("message")
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        return Finished(TerminationMessage.model_validate_json(raw), raw)
    except ValidationError:
        return None


def _lost(pod: Mapping[str, Any], status: Mapping[str, Any]) -> Lost | None:
    reason = str(status.get("reason") or "")
    told = said(reason, status.get("message"))
    if reason in LOST_POD_REASONS or (
        reason.startswith("OutOf") and status.get("phase") == "Failed"
    ):
        what = LOST_POD_REASONS.get(reason, "was refused by its node")
        return Lost(f"The trial's Pod {what}{told}.")
    disruption = pod_condition(status, "DisruptionTarget")
    if disruption is not None and disruption.get("status") == "True":
        return Lost(
            "The trial's Pod is being taken away by the cluster"
            f"{said(disruption.get('reason'), disruption.get('message'))}."
        )
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return Lost("The trial's Pod is being deleted before the trial finished.")
    runner_end = terminated_state(container_statuses(status).get(RUNNER_CONTAINER, {})) or {}
    if runner_end.get("reason") in LOST_CONTAINER_REASONS:
        return Lost(
            "The runner container of the trial's Pod was lost"
            f"{said(runner_end.get('reason'), runner_end.get('message'))}."
        )
    return None


def _deadline_exceeded(
    pod: Mapping[str, Any], status: Mapping[str, Any], runner: Mapping[str, Any]
) -> Failed:
    """The kubelet ended the Pod at activeDeadlineSeconds, before the runner reported."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    within = f" within its deadline of {deadline}s" if deadline else " within its deadline"
    told = said("DeadlineExceeded", status.get("message"))
    if terminated_state(runner) is None and "running" not in (runner.get("state") or {}):
        # The runner never ran: the Pod could not start (e.g. a Secret it mounts is missing).
        return Failed(
            ErrorType.ENVIRONMENT_START_FAILED,
            f"The trial's Pod did not start{within}{told}; `kubectl describe pod` and the "
            "namespace's events say what held it (often a missing Secret or volume).",
        )
    return Failed(
        ErrorType.INTERNAL_ERROR,
        f"The trial's runner did not finish{within}{told}.",
    )


def _runner_ended_without_message(
    runner_end: Mapping[str, Any], environment: Mapping[str, Any]
) -> Failed:
    code = runner_end.get("exitCode")
    runner_said = said(runner_end.get("reason"), None)
    environment_end = terminated_state(environment)
    if (
        environment_end is not None
        and environment_end.get("exitCode", 0) != 0
        and _ended_first(environment_end, runner_end)
    ):
        return Failed(
            ErrorType.ENVIRONMENT_START_FAILED,
            f"The environment container exited with code {environment_end.get('exitCode')}"
            f"{said(environment_end.get('reason'), environment_end.get('message'))} before "
            f"the trial could run, and the runner then ended with code {code} without a "
            "result.",
        )
    return Failed(
        ErrorType.INTERNAL_ERROR,
        f"The runner container ended with code {code}{runner_said} without a readable "
        "termination message, so the trial has no outcome. This is a failure of the runner, "
        "not of the task or the agent.",
    )


def _image_or_start_failure(
    pod: Mapping[str, Any],
    status: Mapping[str, Any],
    environment: Mapping[str, Any],
    runner: Mapping[str, Any],
    now: datetime,
    config: OperatorConfig,
) -> Failed | None:
    for name, container in ((ENVIRONMENT_CONTAINER, environment), (RUNNER_CONTAINER, runner)):
        state = container.get("state") or {}
        problem = state.get("waiting") or state.get("terminated") or {}
        reason = problem.get("reason") or ""
        told = said(reason, problem.get("message"))
        image = container.get("image") or _spec_image(pod, name) or "its image"
        if reason in IMAGE_PULL_HOPELESS or (
            reason in IMAGE_PULL_RETRYING
            and seconds_since(pull_start(pod), now) >= config.image_pull_grace_sec
        ):
            if name == ENVIRONMENT_CONTAINER:
                return Failed(
                    ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
                    f"The environment image {image} could not be pulled{told}.",
                )
            return Failed(
                ErrorType.INTERNAL_ERROR,
                f"The runner image {image} could not be pulled{told}. This is a problem of the "
                "operator's installation (its runner image or pull secrets), not of the task.",
            )
        if reason in CONTAINER_START_ERRORS:
            if name == ENVIRONMENT_CONTAINER or reason == "CreateContainerConfigError":
                # A missing Secret or key is the job's configuration, wherever it is referenced.
                return Failed(
                    ErrorType.ENVIRONMENT_START_FAILED,
                    f"The {name} container of the trial's Pod could not be started{told}.",
                )
            return Failed(
                ErrorType.INTERNAL_ERROR,
                f"The runner container could not be started{told}. This is a problem of the "
                "runner image, not of the task.",
            )
    return None


def _unschedulable(
    pod: Mapping[str, Any], status: Mapping[str, Any], now: datetime, config: OperatorConfig
) -> Failed | None:
    scheduled = pod_condition(status, "PodScheduled")
    if scheduled is None or scheduled.get("status") != "False":
        return None
    if scheduled.get("reason") != "Unschedulable":
        return None
    since = timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    waited = seconds_since(since, now)
    if waited < config.unschedulable_grace_sec:
        return None
    asked = _environment_request(pod)
    return Failed(
        ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        f"No node could take the trial's Pod for {waited:.0f}s"
        f"{said('Unschedulable', scheduled.get('message'))}"
        + (f". The environment asks for {asked}." if asked else "."),
    )


def _waiting_reason(
    status: Mapping[str, Any], runner: Mapping[str, Any], environment: Mapping[str, Any]
) -> str | None:
    for container in (environment, runner):
        waiting = (container.get("state") or {}).get("waiting")
        if isinstance(waiting, Mapping) and waiting.get("reason"):
            return str(waiting["reason"])
    scheduled = pod_condition(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return str(scheduled.get("reason") or "Unscheduled")
    return None


# --- small readers --------------------------------------------------------------------------------


def _ended_first(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether container end `first` came no later than `second` (True when either is unknown)."""
    a, b = timestamp(first.get("finishedAt")), timestamp(second.get("finishedAt"))
    return a is None or b is None or a <= b


def _spec_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(container, Mapping) and container.get("name") == name:
            return container
    return {}


def _spec_image(pod: Mapping[str, Any], name: str) -> str | None:
    image = _spec_container(pod, name).get("image")
    return str(image) if image else None


def _environment_request(pod: Mapping[str, Any]) -> str:
    """`cpu 2, memory 4G, ...`: what the environment container requests, for messages."""
    resources = _spec_container(pod, ENVIRONMENT_CONTAINER).get("resources") or {}
    requests = resources.get("requests") or {}
    return ", ".join(f"{key} {value}" for key, value in requests.items())
