"""`rollout cancel JOB`: delete the RolloutJob; its RolloutTrials, their Pods and its agent env
Secret are deleted with it (they are owned by it).

What storage holds is kept: the results trials already wrote (`jobs/<job>/`, which
`rollout download` still fetches) and the dataset bundles (shared by every job that uses the same
tasks). `--delete-results` deletes the job's results too.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from rollout.api.errors import InvalidInput
from rollout.api.layout import job_prefix
from rollout.api.resources import FINALIZER
from rollout.cli import config, kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.jobs import find_job, results_store
from rollout.cli.progress import make_console
from rollout.storage import StorageError

EPILOG = """\
examples:
  rollout cancel my-eval                     stop it; results written so far are kept
  rollout cancel my-eval --delete-results    stop it and delete jobs/my-eval/ from storage
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "cancel",
        help="stop a job: delete its RolloutJob (trials and Pods go with it)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", help="the RolloutJob's name, or the job's name")
    parser.add_argument(
        "--delete-results",
        action="store_true",
        help="also delete the job's results (jobs/<job>/) from object storage",
    )
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = config.resolve(args, environ)
    cluster = kube.Cluster.from_args(args, environ)
    job = find_job(cluster, args.job)
    if job.body is None:
        raise CliError(f"no RolloutJob {args.job} in {cluster.where}")
    store = None
    try:
        store = results_store(job, settings, environ)
    except InvalidInput:
        if args.delete_results:
            raise  # the user asked for storage: say what is missing
    console = make_console()
    cluster.delete_job(job.name)
    console.print(
        f"deleted RolloutJob {job.name} in namespace {cluster.namespace}: its RolloutTrials, "
        "their Pods and its agent env Secret are deleted with it",
        markup=False,
    )
    remaining = cluster.get_job(job.name)
    if remaining is not None and FINALIZER in (remaining["metadata"].get("finalizers") or []):
        console.print(
            f"it goes once the operator has stopped its work on it; if no operator serves "
            f"namespace {cluster.namespace}, free it with: rollout release {job.name}",
            markup=False,
        )
    prefix = job_prefix(store.location.prefix if store else "", job.job_name)
    if store is None:
        console.print(
            f"kept in storage: the results written so far under {prefix} and the dataset "
            f"bundles; download the results with: rollout download {job.job_name}",
            markup=False,
        )
        return ExitCode.OK
    where = store.uri(prefix)
    try:
        if args.delete_results:
            count = store.delete_prefix(prefix)
            console.print(f"deleted {count} objects of results under {where}", markup=False)
            console.print("kept in storage: the dataset bundles (datasets/, tasks/)", markup=False)
            return ExitCode.OK
        count = len(store.list_keys(prefix))
    except StorageError as err:
        raise CliError(f"the RolloutJob is deleted, but storage could not be read: {err}") from None
    console.print(
        f"kept in storage: {count} objects of results under {where} (download them with: "
        f"rollout download {job.job_name}) and the dataset bundles (datasets/, tasks/)",
        markup=False,
    )
    return ExitCode.OK
