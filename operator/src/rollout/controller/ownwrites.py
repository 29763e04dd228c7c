"""A job reconciler's own recent writes, laid over what the watch shows until the watch catches up.

The reconciler decides from the index, which is updated only when a write's watch event
arrives; its own writes of a moment ago may not be there yet. Acting on that stale view would
act twice (create a Pod again, mark a trial Running again, start a trial in a slot that is not
free). So it remembers, for a while:

- the trials it wrote (created or patched), until the index has that resourceVersion or newer;
- the Pods it created or deleted, until the index shows them (or for `PENDING_WRITE_TTL_SEC`);
- the job's status it patched, until the job's body has that resourceVersion or newer;
- that it asked for its job's deletion (its TTL): for good, since the job is on its way out.

Each memory ends after a while even if the watch never shows the write (a lost event, or an object
deleted meanwhile), so nothing is remembered forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rollout.api.resources import RolloutJobStatus
from rollout.controller.index import TrialEntry, newer, trial_entry
from rollout.controller.jobspec import parse_status

TRIAL_TTL_SEC = 300.0
"""How long the reconciler trusts its own write of a trial over an index that has not caught up."""
PENDING_WRITE_TTL_SEC = 30.0
"""How long a Pod it created (or deleted) may take to appear in (or leave) the index."""

Clock = Callable[[], float]


class PendingWrites:
    """Names of objects written a moment ago, each forgotten after `ttl` seconds."""

    def __init__(self, ttl: float = PENDING_WRITE_TTL_SEC, clock: Clock = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._at: dict[str, float] = {}

    def add(self, name: str) -> None:
        self._at[name] = self._clock()

    def discard(self, name: str) -> None:
        self._at.pop(name, None)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or (at := self._at.get(name)) is None:
            return False
        if self._clock() - at > self._ttl:
            del self._at[name]
            return False
        return True


class OwnWrites:
    """What one job's reconciler wrote that the watch may not show yet (see the module doc)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._trials: dict[str, tuple[TrialEntry, float]] = {}
        self.pods_created = PendingWrites(clock=clock)
        self.pods_deleted = PendingWrites(clock=clock)
        self._status = RolloutJobStatus()
        self._status_rv: str | None = None
        self.job_deleted = False
        """The job's deletion was asked for: nothing more is done for it, as once the watch
        shows its deletionTimestamp (an event of a moment before must not ask again)."""

    # --- trials

    def trial_written(self, body: Mapping[str, Any]) -> TrialEntry:
        """Remember a trial as the API server answered a write of it."""
        entry = trial_entry(body)
        self._trials[entry.name] = (entry, self._clock())
        return entry

    def trials(self, indexed: Iterable[TrialEntry]) -> dict[str, TrialEntry]:
        """The job's trials by name: the index, with our own newer writes laid over it."""
        trials = {entry.name: entry for entry in indexed}
        clock = self._clock()
        for name, (mine, at) in list(self._trials.items()):
            seen = trials.get(name)
            if seen is not None and (
                seen.resource_version == mine.resource_version
                or newer(seen.resource_version, mine.resource_version)
            ):
                del self._trials[name]  # the watch has caught up
            elif clock - at > TRIAL_TTL_SEC:
                del self._trials[name]
            else:
                trials[name] = mine
        return trials

    # --- the job's status

    def job_status(self, body: Mapping[str, Any]) -> RolloutJobStatus:
        """The job's status: the body's, unless our own last patch is newer."""
        rv = str(body["metadata"].get("resourceVersion") or "")
        if self._status_rv is None or (rv != self._status_rv and newer(rv, self._status_rv)):
            self._status = parse_status(body.get("status"))
            self._status_rv = rv
        return self._status

    def job_status_written(self, patched: Mapping[str, Any]) -> None:
        """Remember the job's status as the API server answered our patch of it."""
        self._status = parse_status(patched.get("status"))
        self._status_rv = str((patched.get("metadata") or {}).get("resourceVersion") or "")
