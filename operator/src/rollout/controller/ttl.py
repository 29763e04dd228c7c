"""ttlSecondsAfterFinished: when a finished RolloutJob is deleted (like a Kubernetes Job). Pure.

The field is read from the raw spec, tolerantly: a job whose spec is invalid (so never parsed
into the model) ends Failed and is deleted when its time comes too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

TTL_FIELD = "ttlSecondsAfterFinished"


def ttl_after_finished(spec: Mapping[str, Any] | None) -> int | None:
    """The job's ttlSecondsAfterFinished, None when unset or not a whole number of 0 or more."""
    ttl = (spec or {}).get(TTL_FIELD)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        return None
    return ttl


def seconds_until_expiry(ttl: int | None, ended_at: datetime | None, now: datetime) -> float | None:
    """How long until a job that ended at `ended_at` is deleted (0 or less: now); None: never
    (no TTL, or the job has not ended)."""
    if ttl is None or ended_at is None:
        return None
    return (ended_at + timedelta(seconds=ttl) - now).total_seconds()
