"""When a job's reconciler looks again, and at which of its trials.

The reconciler sleeps until woken (`runtime.Waker`, which says which trials changed) or until a
time it asked for. A pass then takes a step only for the trials that changed, and for the trials
whose Pods wait on a grace period once it is time to look at them again; every trial on a full
pass (the first, after a new spec or an error, and every `RESYNC_SEC`). The job's status, an
O(trials) computation, is worked out at most once per status interval unless it is urgent
(`jobdecide`). A failed pass is tried again after a pause that grows while failures repeat.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from rollout.api.plan import JobPlan
from rollout.controller.config import OperatorConfig

RESYNC_SEC = 60.0
"""Longest sleep between two passes, and between two looks at every trial."""
ERROR_BACKOFF_SEC = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses after a failed pass (API or storage errors), growing while failures repeat."""


def recheck_delay(config: OperatorConfig) -> float:
    """How soon to look again at Pods that wait: a fraction of the shortest grace period."""
    grace = min(config.unschedulable_grace_sec, config.image_pull_grace_sec)
    return min(max(grace / 4, 0.05), 15.0)


class Pacer:
    """The timing of one job's reconciler: which trials are due a look, and when it looks again."""

    def __init__(
        self,
        *,
        status_interval_sec: float,
        recheck_sec: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._status_interval = status_interval_sec
        self._recheck_sec = recheck_sec
        self._clock = clock
        self._dirty: set[str] | None = None  # trials to look at next; None: every one
        self._full_pass_at = -math.inf
        self._waiting: set[str] = set()  # trials whose Pod waits on a grace period
        self._recheck_at = math.inf
        self._status_checked = -math.inf
        self._failures = 0

    # --- which trials

    def poked(self, dirty: set[str] | None) -> None:
        """Trials that changed (from the waker); None: look at every trial."""
        if dirty is None or self._dirty is None:
            self._dirty = None
        else:
            self._dirty |= dirty

    def everything(self) -> None:
        """Look at every trial next (a new spec)."""
        self._dirty = None

    def to_look_at(self, plan: JobPlan) -> list[str]:
        """The trials this pass looks at: the dirty ones and, when their time has come, those
        whose Pods wait on a grace period; every trial on a full pass."""
        clock = self._clock()
        if self._dirty is None or clock - self._full_pass_at >= RESYNC_SEC:
            self._full_pass_at = clock
            return [t.name for t in plan.trials]
        names = set(self._dirty)
        if clock >= self._recheck_at:
            names |= self._waiting
        return [name for name in names if name in plan.names]

    def looked(
        self, names: Iterable[str], waiting: Iterable[str], due_in: float | None = None
    ) -> float | None:
        """Note the trials looked at and those of them that wait, one of which may be due a
        look in `due_in` seconds; returns how soon to look again at the waiting ones (None: no
        trial waits)."""
        self._waiting.difference_update(names)
        self._waiting.update(waiting)
        clock = self._clock()
        if not self._waiting:
            self._recheck_at = math.inf
            return None
        if self._recheck_at == math.inf or clock >= self._recheck_at:
            self._recheck_at = clock + self._recheck_sec
        if due_in is not None:
            self._recheck_at = min(self._recheck_at, clock + due_in)
        return max(self._recheck_at - clock, 0.0)

    # --- the job's status

    def status_due_in(self) -> float:
        """Seconds until the status is due (0 or less: due now)."""
        return self._status_checked + self._status_interval - self._clock()

    def status_checked(self) -> None:
        self._status_checked = self._clock()

    # --- the pass's end

    def succeeded(self) -> None:
        """A pass went through: what was dirty has been looked at."""
        self._failures = 0
        self._dirty = set()

    def failed(self) -> float:
        """A pass failed: how long to pause (what was dirty stays dirty for the next pass)."""
        self._failures += 1
        return ERROR_BACKOFF_SEC[min(self._failures, len(ERROR_BACKOFF_SEC)) - 1]
