"""Time, as the runner reads it: wall-clock timestamps for result.json, monotonic durations."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    """What the runner asks of time; tests and benchmarks may pass their own."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for durations."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


def process_started_at(stat_file: Path = Path("/proc/self/stat")) -> datetime | None:
    """When this process started, to the kernel's clock tick (10 ms), from Linux's /proc; None
    where there is none. Python itself has begun by the time any of its code runs; this is the
    moment the container's command was started."""
    try:
        stat = stat_file.read_text(encoding="ascii", errors="replace")
        # The command's name (field 2) may hold spaces and parentheses: count after the last ')'.
        # starttime is field 22, in clock ticks since boot (CLOCK_BOOTTIME).
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return datetime.now(UTC) - timedelta(seconds=max(age, 0.0))
