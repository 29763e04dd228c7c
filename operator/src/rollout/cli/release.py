"""`rollout release`: free RolloutJobs that are being deleted and that no operator serves.

Every RolloutJob carries the operator's finalizer (`rollout.dev/finalizer`). When a job is
deleted, the operator stops its work on it and then removes the finalizer; only then does the
job go, and its RolloutTrials, their Pods and its agent env Secret with it (they are owned by
it). With no operator serving the job (uninstalled, scaled to zero, or not watching its
namespace), a deleted job waits for good, and a namespace being deleted waits with it
("Some content in the namespace has finalizers remaining: rollout.dev/finalizer").

`rollout release` removes the finalizer from such jobs: those whose deletion began at least
--grace seconds ago (a running operator releases a job within seconds). It changes nothing on
jobs that are not being deleted: delete them first (`rollout cancel JOB`, or kubectl).
What the jobs wrote to object storage stays.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rollout.api.resources import FINALIZER
from rollout.cli import kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.progress import make_console

DEFAULT_GRACE_SEC = 30.0

EPILOG = """\
examples:
  rollout cancel my-eval; rollout release my-eval     no operator runs: delete, then free it
  rollout release --all -n evals                      every stuck job of a namespace
  rollout release --all -A                            ... of every namespace (after an uninstall)
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "release",
        help="free deleted jobs that no operator serves (remove the operator's finalizer)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "jobs", nargs="*", metavar="JOB", help="RolloutJob names, or the jobs' own names"
    )
    parser.add_argument(
        "--all", action="store_true", help="every RolloutJob being deleted in the namespace"
    )
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="with --all: in every namespace"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_SEC,
        metavar="SECONDS",
        help="leave jobs whose deletion began less than this long ago, which an operator may "
        "still be finishing (default: %(default)g; 0: release them now)",
    )
    kube.add_cluster_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if bool(args.jobs) == bool(args.all):
        raise CliError("command line: name the jobs to release, or give --all (not both)")
    if args.all_namespaces and not args.all:
        raise CliError("command line: -A/--all-namespaces goes with --all")
    if args.grace < 0:
        raise CliError(f"command line: --grace: {args.grace:g} is negative")
    cluster = kube.Cluster.from_args(args, environ)
    console = make_console()
    now = datetime.now(UTC)
    if args.all:
        jobs = [j for j in cluster.list_jobs(all_namespaces=args.all_namespaces) if _held(j)]
        if not jobs:
            where = "any namespace" if args.all_namespaces else cluster.where
            console.print(f"no deleted RolloutJob waits for an operator in {where}", markup=False)
            return ExitCode.OK
    else:
        jobs = []
        for name in args.jobs:
            body = cluster.find_job(name)
            if body is None:
                raise CliError(f"no RolloutJob {name} in {cluster.where}")
            jobs.append(body)
    code = ExitCode.OK
    for job in jobs:
        meta = job["metadata"]
        where = f"RolloutJob {meta['name']} in namespace {meta.get('namespace')}"
        if not meta.get("deletionTimestamp"):
            console.print(
                f"{where} is not being deleted: nothing to release (delete it first: "
                f"rollout cancel {meta['name']})",
                markup=False,
            )
            code = ExitCode.FAILED
            continue
        if not _held(job):
            console.print(
                f"{where} does not wait for an operator: nothing to release", markup=False
            )
            continue
        waited = (now - _parse_time(meta["deletionTimestamp"])).total_seconds()
        if waited < args.grace:
            console.print(
                f"{where} was deleted {waited:.0f} s ago: an operator may still be finishing it; "
                f"left alone (release it anyway with --grace 0)",
                markup=False,
            )
            code = ExitCode.FAILED
            continue
        cluster.remove_job_finalizer(job, FINALIZER)
        console.print(
            f"released {where} (deleted {waited:.0f} s ago, no operator released it): it goes "
            "now, and its RolloutTrials, their Pods and its Secret after it; its results stay in "
            "storage",
            markup=False,
        )
    return code


def _held(job: Mapping[str, Any]) -> bool:
    """Deleted, and waiting for the operator's finalizer to go."""
    meta = job.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and FINALIZER in (meta.get("finalizers") or [])


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
