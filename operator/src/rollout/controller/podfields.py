"""Small readers of a Pod as the API returns it (or as the index keeps it, `index.slim_pod`).

Shared by the modules that read trial Pods (`podstatus` for the trial's fate, `cost` for what it
cost), so that a Pod's status is read one way. Each is lenient: a part the Pod does not show is
None or empty, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any


def container_statuses(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """`status.containerStatuses` by container name."""
    statuses = [*(status.get("containerStatuses") or [])]
    return {s["name"]: s for s in statuses if isinstance(s, Mapping) and "name" in s}


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
