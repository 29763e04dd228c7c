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
