"""A RolloutJob's progress on the terminal, as its status changes.

`JobView` reads what people want from a RolloutJob body: trials done of total, running, errors
(failed trials), pass rate, mean reward and each configured metric. The status is read leniently
(plain dict access), so a newer operator's extra fields, or a status not written yet, never stop
the display.

`follow` watches the RolloutJob (a Kubernetes watch, re-established when the server ends it; see
`Cluster.watch_job`) and updates a `ProgressDisplay` on every change: a rich progress bar when
stdout is a terminal, else one plain line each time the figures change. A job that no operator
answers (no status) within a grace gets a warning that says where to look, instead of a CLI that
waits silently.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from rollout.api.resources import JobConditionType, JobPhase
from rollout.cli.errors import CliError
from rollout.cli.kube import WATCH_TIMEOUT_SEC, Cluster

FINISHED_PHASES = frozenset({JobPhase.COMPLETED.value, JobPhase.FAILED.value})


def make_console(file: TextIO | None = None) -> Console:
    """A console on `file` (stdout): colours and live display only on a terminal."""
    out = file or sys.stdout
    terminal = out.isatty()
    return Console(
        file=out,
        force_terminal=terminal,
        no_color=not terminal,
        highlight=False,
        soft_wrap=not terminal,
    )


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}" if abs(value) >= 1000 else f"{value:.3f}"


@dataclass(frozen=True)
class JobView:
    """What the CLI shows of a RolloutJob."""

    name: str
    job_name: str
    phase: str
    total: int = 0
    finished: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    pass_rate: float | None = None
    mean_reward: float | None = None
    metrics: list[tuple[str, float | None]] = field(default_factory=list)
    message: str | None = None
    result_uri: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobView:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        counts = status.get("counts") or {}
        configured = [str(m.get("type")) for m in spec.get("metrics") or [] if m.get("type")]
        reported = {str(m.get("type")): _float(m.get("value")) for m in status.get("metrics") or []}
        metrics = [(t, reported.get(t)) for t in configured]
        metrics += [(t, v) for t, v in reported.items() if t not in configured]
        name = str(metadata.get("name") or "")
        return cls(
            name=name,
            job_name=str(spec.get("jobName") or name),
            phase=str(status.get("phase") or JobPhase.PENDING.value),
            total=_int(counts.get("total")),
            finished=_int(counts.get("finished")),
            running=_int(counts.get("running")),
            completed=_int(counts.get("completed")),
            failed=_int(counts.get("failed")),
            pass_rate=_float(status.get("passRate")),
            mean_reward=_float(status.get("meanReward")),
            metrics=metrics,
            message=_problem_message(status.get("conditions") or []),
            result_uri=status.get("resultUri"),
        )

    @property
    def done(self) -> bool:
        return self.phase in FINISHED_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == JobPhase.COMPLETED.value

    def stats(self) -> str:
        """`2 running, 1 error, pass rate 50.0%, mean reward 0.500, mean 0.500`."""
        errors = "error" if self.failed == 1 else "errors"
        parts = [
            f"{self.running} running",
            f"{self.failed} {errors}",
            f"pass rate {percent(self.pass_rate)}",
            f"mean reward {number(self.mean_reward)}",
        ]
        parts += [f"{metric} {number(value)}" for metric, value in self.metrics]
        return ", ".join(parts)

    def line(self) -> str:
        """One plain line: `my-eval Running: 3/8 trials done, 2 running, ...`."""
        text = f"{self.job_name} {self.phase}: {self.finished}/{self.total} trials done, "
        text += self.stats()
        if self.message and self.phase == JobPhase.FAILED.value:
            text += f" ({self.message})"
        return text


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _problem_message(conditions: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the job failed or is not valid, from its conditions."""
    by_type = {str(c.get("type")): c for c in conditions if isinstance(c, Mapping)}
    failed = by_type.get(JobConditionType.FAILED.value)
    if failed and failed.get("status") == "True" and failed.get("message"):
        return str(failed["message"])
    valid = by_type.get(JobConditionType.VALID.value)
    if valid and valid.get("status") == "False" and valid.get("message"):
        return str(valid["message"])
    return None


class ProgressDisplay:
    """Shows `JobView`s: a live progress bar on a terminal, else a line per change."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._last_line: str | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.fields[job]}"),
                TextColumn("{task.fields[phase]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("trials"),
                TextColumn("{task.fields[stats]}"),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=None, job="", phase="", stats="")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def warn(self, message: str) -> None:
        """A warning on stderr, between the progress lines (or above the live bar)."""
        if self._progress is not None:
            self._progress.console.print(message, markup=False, style="yellow")
        else:
            print(message, file=sys.stderr, flush=True)

    def update(self, view: JobView) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task,
                total=view.total or None,
                completed=view.finished,
                job=view.job_name,
                phase=view.phase,
                stats=view.stats(),
            )
            return
        line = view.line()
        if line != self._last_line:
            self.console.print(line, markup=False)
            self._last_line = line


OPERATOR_GRACE_SEC = 30.0
"""How long a job may go without a status from an operator before the CLI says so."""
TICK_SEC = 10
"""While no operator has answered, each watch lasts at most this long, so the grace is noticed."""


class NoOperator(CliError):
    """No operator has picked the job up within the grace."""


def follow(
    cluster: Cluster,
    name: str,
    display: ProgressDisplay,
    *,
    timeout_seconds: int = WATCH_TIMEOUT_SEC,
    operator_grace: float = OPERATOR_GRACE_SEC,
    fail_fast: bool = False,
) -> dict[str, Any] | None:
    """Show the job's progress until it is Completed or Failed (then return the RolloutJob as it
    was then), or deleted (None).

    A job that no operator has given a status within `operator_grace` seconds gets a warning
    saying where to look (once; the CLI goes on waiting), or, with `fail_fast`, `NoOperator`.
    """
    started = time.monotonic()
    warned = answered = False
    tick = min(timeout_seconds, max(1, math.ceil(min(operator_grace, TICK_SEC))))

    def watch_timeout() -> int:  # short watches only while the grace may still run out
        return timeout_seconds if warned or answered else tick

    for body in cluster.watch_job(name, timeout_seconds=watch_timeout, ticks=True):
        view = JobView.from_body(body)
        display.update(view)
        if view.done:
            return body
        answered = answered or bool(body.get("status"))
        if not warned and not answered and time.monotonic() - started >= operator_grace:
            message = no_operator_message(name, cluster.namespace, operator_grace)
            if fail_fast:
                raise NoOperator(message)
            display.warn(f"warning: {message}; still waiting (--fail-fast stops here instead)")
            warned = True
    return None


def no_operator_message(name: str, namespace: str, grace: float) -> str:
    return (
        f"no operator has picked up RolloutJob {name} in namespace {namespace} after {grace:g} s: "
        "check that the operator runs (kubectl get deployments --all-namespaces "
        "-l app.kubernetes.io/name=rollout-operator), that it watches this namespace (the "
        "chart's watchNamespaces), and its log (kubectl logs deployment/rollout-operator "
        "--namespace <its namespace>)"
    )


def add_operator_arguments(parser: argparse.ArgumentParser) -> None:
    """--operator-grace and --fail-fast, for the commands that follow a job."""
    parser.add_argument(
        "--operator-grace",
        type=float,
        default=OPERATOR_GRACE_SEC,
        metavar="SECONDS",
        help="warn when no operator has picked the job up this long (default: %(default)g)",
    )
    parser.add_argument(
        "--fail-fast",
        action="store_true",
        help="exit 1 instead of waiting on when no operator has picked the job up (for CI)",
    )
