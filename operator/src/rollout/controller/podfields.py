"""Small readers of a Pod as the API returns it (or as the index keeps it, `index.slim_pod`).

Shared by the modules that read trial Pods (`podstatus` for the trial's fate, `cost` for what it
cost, `records` and `trials` for when it started and whether its runner still runs), so that a
Pod is read one way. Each is lenient: a part the Pod does not show is
None or empty, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from rollout.controller.pod import RUNNER_CONTAINER


def container_statuses(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """`status.containerStatuses` by container name."""
    statuses = [*(status.get("containerStatuses") or [])]
    return {s["name"]: s for s in statuses if isinstance(s, Mapping) and "name" in s}


def runner_state(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The runner container's `state` (`{"running": ...}`, `{"terminated": ...}`, ...); empty
    while the Pod shows none."""
    runner = container_statuses((pod or {}).get("status") or {}).get(RUNNER_CONTAINER) or {}
    state = runner.get("state")
    return state if isinstance(state, Mapping) else {}


def runner_started(pod: Mapping[str, Any] | None) -> bool:
    """Whether the Pod shows its runner container started (running, or ended after running)."""
    state = runner_state(pod)
    terminated = state.get("terminated")
    return "running" in state or (
        isinstance(terminated, Mapping) and terminated.get("startedAt") is not None
    )


def created_at(pod: Mapping[str, Any] | None) -> datetime | None:
    """When the Pod was created, as the API server recorded it."""
    return timestamp(((pod or {}).get("metadata") or {}).get("creationTimestamp"))


def deleted_at(pod: Mapping[str, Any]) -> datetime | None:
    """The Pod's deletion time (the end of its grace period), once its deletion was asked."""
    return timestamp((pod.get("metadata") or {}).get("deletionTimestamp"))


def terminated_state(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A container status's `state.terminated`, when it has ended."""
    terminated = (container.get("state") or {}).get("terminated")
    return terminated if isinstance(terminated, Mapping) else None


def timestamp(value: Any) -> datetime | None:
    """An API timestamp (RFC 3339, `2024-05-01T12:00:00Z`) as a timezone-aware datetime; None when
    absent or unreadable (the API always gives the zone: a time without one is not its)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        return None
    return value


def said(reason: Any, message: Any) -> str:
    """` (Reason: message)`, the kubelet's (or the scheduler's) words as they are; empty when
    it said nothing."""
    parts = [str(p).strip() for p in (reason, message) if p and str(p).strip()]
    return f" ({': '.join(parts)})" if parts else ""


def pod_condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The Pod status's condition of type `kind` (PodScheduled, DisruptionTarget, ...)."""
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def seconds_since(since: datetime | None, now: datetime) -> float:
    """Seconds from `since` to `now`; 0 when the Pod does not say when (it then keeps waiting)."""
    if since is None or since.tzinfo is None:
        return 0.0
    return (now - since).total_seconds()


def pull_start(pod: Mapping[str, Any]) -> datetime | None:
    """When pulling images could begin: when the Pod was scheduled, else when it was made."""
    scheduled = pod_condition(pod.get("status") or {}, "PodScheduled")
    if (
        scheduled is not None
        and scheduled.get("status") == "True"
        and (at := timestamp(scheduled.get("lastTransitionTime"))) is not None
    ):
        return at
    return created_at(pod)
