"""When the runner's process started (`rollout_runner.clock.process_started_at`), from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rollout_runner.clock import process_started_at

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc here")


@linux_only
def test_a_new_process_knows_when_it_started() -> None:
    before = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; from rollout_runner.clock import process_started_at; "
            "time.sleep(0.3); print(process_started_at().timestamp())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    after = time.time()
    started = float(done.stdout)
    # Before Python's start-up and its 0.3 s sleep, to the kernel's tick (10 ms) and rounding.
    assert before - 0.03 <= started <= after - 0.3


def _stat_line(command: str, start_ticks: int) -> str:
    # pid (comm) state, then fields 4 to 21, starttime (22), and more.
    middle = " ".join(str(n) for n in range(4, 22))
    return f"4242 ({command}) S {middle} {start_ticks} 1000 2000\n"


@linux_only
@pytest.mark.parametrize("command", ["python3", "a b) (c", ") S 1 2"])
def test_the_start_time_is_read_after_the_commands_name_whatever_it_holds(
    tmp_path: Path, command: str
) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    age_sec = 5.0
    ticks = int((time.clock_gettime(time.CLOCK_BOOTTIME) - age_sec) * tick)
    stat = tmp_path / "stat"
    stat.write_text(_stat_line(command, ticks))
    started = process_started_at(stat)
    assert started is not None
    assert started.tzinfo is UTC
    age = (datetime.now(UTC) - started).total_seconds()
    assert age_sec - 0.05 <= age <= age_sec + 2 / tick + 0.05


@pytest.mark.parametrize("text", [None, "", "4242 (python3) S 1 2\n", "no parenthesis at all"])
def test_no_readable_start_time_is_none(tmp_path: Path, text: str | None) -> None:
    stat = tmp_path / "stat"
    if text is not None:
        stat.write_text(text)
    assert process_started_at(stat) is None
