"""`rollout status [JOB]`: one job's progress and figures, or a table of the namespace's jobs.

With `--watch`, follows the job until it finishes (a live progress bar on a terminal, a line per
change otherwise) and exits as `rollout run` does: 0 when it completed, 1 when it failed, 3 when
it was deleted.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from rollout.cli import kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.progress import (
    JobView,
    ProgressDisplay,
    add_operator_arguments,
    follow,
    make_console,
    number,
    percent,
)
from rollout.cli.summary import from_status, print_summary

EPILOG = """\
examples:
  rollout status                      every job in the namespace
  rollout status -A                   every job in every namespace
  rollout status my-eval              one job: phase, trials, pass rate, metrics, per agent
  rollout status my-eval --watch      follow it until it finishes
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "status",
        help="show a job's progress, or list the jobs of the namespace",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "job", nargs="?", metavar="JOB", help="the RolloutJob's name, or the job's name"
    )
    parser.add_argument("-w", "--watch", action="store_true", help="follow until it finishes")
    add_operator_arguments(parser)
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="list jobs of every namespace"
    )
    kube.add_cluster_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    cluster = kube.Cluster.from_args(args, environ)
    console = make_console()
    if args.job is None:
        if args.watch:
            raise CliError("--watch needs a JOB")
        jobs = cluster.list_jobs(all_namespaces=args.all_namespaces)
        if not jobs:
            where = "any namespace" if args.all_namespaces else cluster.where
            console.print(f"no RolloutJobs in {where}", markup=False)
            return ExitCode.OK
        console.print(jobs_table(jobs, all_namespaces=args.all_namespaces))
        return ExitCode.OK
    body = cluster.find_job(args.job)
    if body is None:
        raise CliError(f"no RolloutJob {args.job} in {cluster.where}")
    name = str(body["metadata"]["name"])
    if not args.watch:
        show_job(console, body, cluster.namespace)
        return ExitCode.OK
    with ProgressDisplay(console) as display:
        final = follow(
            cluster,
            name,
            display,
            operator_grace=args.operator_grace,
            fail_fast=args.fail_fast,
        )
    if final is None:
        console.print(f"RolloutJob {name} was deleted", markup=False)
        return ExitCode.DELETED
    show_job(console, final, cluster.namespace)
    return ExitCode.OK if JobView.from_body(final).succeeded else ExitCode.FAILED


def show_job(console: Console, body: Mapping[str, Any], namespace: str) -> None:
    view = JobView.from_body(body)
    status = body.get("status") or {}
    lines = [
        ("Job", f"{view.job_name} (RolloutJob {view.name} in namespace {namespace})"),
        ("Phase", view.phase),
        (
            "Trials",
            f"{view.finished}/{view.total} done, {view.running} running, "
            f"{view.completed} completed, {view.failed} failed",
        ),
        ("Pass rate", percent(view.pass_rate)),
        ("Mean reward", number(view.mean_reward)),
    ]
    if view.metrics:
        lines.append(("Metrics", ", ".join(f"{t} {number(v)}" for t, v in view.metrics)))
    for key, label in (("startedAt", "Started"), ("endedAt", "Ended")):
        if status.get(key):
            lines.append((label, str(status[key])))
    if view.result_uri:
        lines.append(("Result", view.result_uri))
    if view.message:
        lines.append(("Problem", view.message))
    width = max(len(label) for label, _ in lines) + 1
    for label, value in lines:
        console.print(f"{label + ':':<{width}} {value}", markup=False)
    summary = from_status(body)
    if summary.rows:
        print_summary(console, summary)


def _creation_order(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """Oldest first; within a second (creationTimestamp's resolution), by namespace and name,
    not by the API server's list order, which is not the same everywhere."""
    metadata = body.get("metadata") or {}
    return (
        str(metadata.get("creationTimestamp")),
        str(metadata.get("namespace", "")),
        str(metadata.get("name", "")),
    )


def jobs_table(jobs: list[dict[str, Any]], *, all_namespaces: bool) -> Table:
    table = Table(box=None, pad_edge=False)
    columns = ["NAMESPACE"] if all_namespaces else []
    columns += ["NAME", "JOB", "PHASE", "DONE", "FAILED", "PASS RATE", "AGE"]
    for column in columns:
        table.add_column(column, no_wrap=True)
    now = datetime.now(UTC)
    for body in sorted(jobs, key=_creation_order):
        view = JobView.from_body(body)
        metadata = body.get("metadata") or {}
        row = [str(metadata.get("namespace", ""))] if all_namespaces else []
        row += [
            view.name,
            view.job_name,
            view.phase,
            f"{view.finished}/{view.total}",
            str(view.failed),
            percent(view.pass_rate),
            age(metadata.get("creationTimestamp"), now),
        ]
        table.add_row(*row)
    return table


def age(timestamp: Any, now: datetime) -> str:
    """kubectl's AGE: `45s`, `12m`, `3h`, `2d`."""
    try:
        created = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
