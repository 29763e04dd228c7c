"""`rollout download JOB`: a job's results from object storage into `<jobs_dir>/<job>/`.

The job's prefix in storage (`jobs/<job>/`) is copied as it is, so the local tree has the seed's
layout: config.json, result.json, and `<agent>/<dataset>/<task>__<n>/` with result.json,
error.txt, setup/, command/ and logs/. Files already there are overwritten with storage's copy;
files storage does not have are left alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from rollout.api.layout import job_prefix, local_job_dir
from rollout.cli import config, kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.jobs import connect_optional, find_job, results_store
from rollout.cli.progress import make_console
from rollout.cli.summary import load_summary, print_summary
from rollout.cli.threads import WORKERS
from rollout.storage import ObjectStore

EPILOG = """\
examples:
  rollout download my-eval                    into ./jobs/my-eval/ (the job's jobs_dir)
  rollout download my-eval --jobs-dir /data   into /data/my-eval/
"""


def download_results(
    store: ObjectStore, job_name: str, jobs_dir: Path, *, workers: int = WORKERS
) -> tuple[Path, list[Path]]:
    """Copy `jobs/<job_name>/` from storage to `<jobs_dir>/<job_name>/`, a few files at a time;
    the directory and the files written (no directory is made when there are none).

    `ObjectStore.download_prefix` checks every key before anything is written: one that would
    land outside the directory (a `..` segment, or through a symlink already there) stops it.
    """
    target = local_job_dir(jobs_dir, job_name)
    base = job_prefix(store.location.prefix, job_name)
    return target, store.download_prefix(base, target, workers=workers)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "download",
        help="download a job's results from object storage",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", help="the RolloutJob's name, or the job's name")
    parser.add_argument(
        "--jobs-dir",
        type=Path,
        metavar="DIR",
        help="where to put <job>/ (default: the job's jobs_dir, relative to this directory)",
    )
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = config.resolve(args, environ)
    job = find_job(connect_optional(args, environ), args.job)
    store = results_store(job, settings, environ)
    jobs_dir = args.jobs_dir or Path(job.jobs_dir)
    target, written = download_results(store, job.job_name, jobs_dir)
    count = len(written)
    if count == 0:
        where = store.uri(job_prefix(store.location.prefix, job.job_name))
        known = "" if job.body is not None else f" (and no RolloutJob {job.name} was found)"
        raise CliError(f"no results of job {job.job_name} in storage at {where}{known}")
    console = make_console()
    console.print(f"downloaded {count} files to {target}", markup=False)
    summary = load_summary(target, job.body)
    if summary is not None:
        print_summary(console, summary)
    return ExitCode.OK
