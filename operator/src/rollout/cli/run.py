"""`rollout run JOB.yaml` (or just `rollout JOB.yaml`): run a job on the cluster, from job.yaml
to results on disk.

1. Check everything first, before storage or the cluster is touched: the job file, every `${VAR}`
   of agent env (from this environment), every dataset (local directories; registry datasets
   fetched with git into ~/.cache/rollout/git), the storage settings, the kubeconfig, that no
   RolloutJob of that name exists and that neither storage nor the local jobs directory already
   holds results of a job of that name. Any problem: every one is printed with its file and
   field, and nothing is created anywhere. Tasks that cannot run (a broken task; the oracle on
   a task without a solution) are listed, each with the error type and message its trials will
   fail with, and the others run; with --strict such a job is refused instead, like a problem.
2. Publish each dataset to object storage as a content-addressed bundle (skipping what is there).
3. Store the job file as submitted, as JSON, in `jobs/<job>/config.json` (only where storage has
   none: a job of that name that got there first is refused). Then create the agent env Secret
   (values of `${VAR}`; never in the RolloutJob), then the RolloutJob, then make the RolloutJob
   the Secret's owner, so deleting the job deletes the Secret. When the RolloutJob cannot be
   created, the Secret and config.json are removed again.
   `environment.type: docker` (job.yaml's default) means the cluster runs each trial as a Pod:
   it is submitted as `kubernetes` (config.json keeps the file's docker), unless
   `environment.docker_host` names a remote engine, which the bridge controller runs it on.
4. Follow the job as its status changes: trials done of total, running, errors, pass rate and
   each metric the job configures.
5. Download the results into `<jobs_dir>/<job>/` (jobs_dir from job.yaml, relative to this
   directory, or --jobs-dir) in the seed's layout, and print a summary per agent.

With --resume (`cli.resume`), the same job name runs again and only its trials with no result, or
an infrastructure failure (and --retry-error's types), run: storage's results of the name are
not refused, a finished RolloutJob of the name is replaced (deleted, then created again with
`spec.resume`; a running one is refused), the first run's config.json is kept, and the local
copy of the results mirrors storage at the end.

Exit status: 0 when the job completed (whatever the rewards), 1 when it failed or anything went
wrong, 3 when the RolloutJob was deleted before it finished, 130 on Ctrl-C (the job keeps
running in the cluster; the message says how to follow, download or cancel it).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import config_json_text
from rollout.api.layout import job_config_key, job_prefix, job_result_key, local_job_dir
from rollout.api.resources import RolloutJob
from rollout.cli import config, kube, local_run, resume
from rollout.cli.download import download_results
from rollout.cli.errors import CliError, ExitCode, Problems, note
from rollout.cli.prepare import (
    PreparedJob,
    build_resources,
    cache_dir,
    job_overrides,
    positive_int,
    prepare_job,
    strict_refusal,
    unrunnable_heading,
)
from rollout.cli.progress import (
    JobView,
    ProgressDisplay,
    add_operator_arguments,
    follow,
    make_console,
)
from rollout.cli.publish import publish_datasets
from rollout.cli.summary import load_summary, print_row_summary, print_summary
from rollout.storage import ObjectStore, StorageError

EPILOG = """\
environment.type: docker (job.yaml's default) runs each trial as a Pod in the cluster, the
same as kubernetes; with environment.docker_host (tcp://HOST:PORT or ssh://USER@HOST), the
cluster's bridge controller (rollout-bridge) runs each trial's container on that remote Docker
engine instead; modal, daytona and e2b run each trial in a sandbox of that provider, through
the same bridge (which needs the provider's SDK and credentials).

With --local the job runs on this machine instead: environment.type docker in containers of a
local Docker-compatible engine (DOCKER_HOST respected; Podman's API service works too), local in
the host sandbox (namespaces of this machine; the task's docker_image is ignored). Results go
straight into <jobs_dir>/<job>/; Ctrl-C stops the job and keeps what finished; --resume runs the
rest.

examples:
  rollout job.yaml                                 the same as `rollout run job.yaml`
  rollout run job.yaml --local                     on this machine, no cluster or bucket
  rollout run job.yaml --local --resume            the same job's unfinished trials
  rollout run job.yaml --resume                    on the cluster: the finished job's trials
                                                   without a result or with an infrastructure
                                                   failure run again, the others are kept
  rollout run job.yaml --namespace evals --context prod
  rollout run job.yaml --storage-bucket evals --storage-endpoint http://127.0.0.1:9000 \\
      --storage-path-style --storage-cluster-endpoint http://minio.rollout-system:9000
  rollout run job.yaml --detach                    submit, then `rollout status NAME --watch`
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "run",
        help="run a job.yaml on the cluster and download its results (the default command)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_file", type=Path, metavar="JOB.yaml")
    parser.add_argument(
        "--jobs-dir",
        type=Path,
        metavar="DIR",
        help="where results go, as <DIR>/<job>/ (default: job.yaml's jobs_dir)",
    )
    parser.add_argument(
        "--detach", action="store_true", help="submit the job and return without following it"
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="run the job on this machine instead of a cluster, results straight into the jobs "
        "directory (environment.type docker: a local Docker-compatible engine; local: the host "
        "sandbox); no cluster or object storage is used",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run again only the trials of this job name that have no result or failed for the "
        "infrastructure's reason, keeping every other trial's result (on a cluster: a finished "
        "RolloutJob of that name is replaced; its results stay in storage)",
    )
    parser.add_argument(
        "--retry-error",
        dest="retry_errors",
        action="append",
        type=local_run.parse_error_type,
        metavar="TYPE",
        help="with --resume: run trials that failed with this error type again too "
        "(repeatable; e.g. agent_execution_timeout)",
    )
    parser.add_argument(
        "--max-tasks",
        type=positive_int,
        metavar="N",
        help="run only the first N tasks (rows) of each dataset (job.yaml's max_tasks)",
    )
    parser.add_argument(
        "--task-id",
        dest="task_ids",
        action="append",
        metavar="ID",
        help="run only this task (row) of the datasets, repeatable (job.yaml's task_ids)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse the job when any task cannot run (a broken task, or the oracle on a task "
        "without a solution), instead of failing those trials and running the others (for CI)",
    )
    add_operator_arguments(parser)
    parser.add_argument(
        "--watch-timeout",
        type=int,
        default=kube.WATCH_TIMEOUT_SEC,
        metavar="SECONDS",
        help="how long each watch request lasts before it is made again (default: %(default)s)",
    )
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.retry_errors and not args.resume:
        raise Problems(["--retry-error is read only with --resume"])
    if args.local:
        return local_run.run(args, environ)
    # 1. Everything checked; nothing written.
    checked = _check_everything(args, environ)
    settings, prepared, cluster, store = (
        checked.settings,
        checked.prepared,
        checked.cluster,
        checked.store,
    )
    job = prepared.job
    jobs_dir = checked.jobs_dir
    rollout_job, secret = checked.rollout_job, checked.secret
    name = str(rollout_job.metadata.name)
    if args.resume:
        rollout_job = resume.resumed_job(rollout_job, args.retry_errors or [])
    if prepared.docker_mapped:
        note("environment.type docker: each trial runs as a Pod in the cluster (kubernetes)")
    for problem in prepared.warnings:
        note(f"warning: {problem}")
    if warning := settings.loopback_warning():
        note(f"warning: {warning}")
    if unrunnable := prepared.task_problems():
        note(unrunnable_heading(len(unrunnable)))
        for problem in unrunnable:
            note(f"  {problem}")

    # 2. Datasets.
    for report in publish_datasets(store, prepared.datasets):
        note(report.describe(store))

    # 3. config.json, the Secret, the RolloutJob, the Secret's owner. With --resume, the finished
    # RolloutJob of that name goes first, and the first run's config.json stays.
    secret_name = secret["metadata"]["name"] if secret is not None else None
    if checked.replaces:
        resume.replace(cluster, name)
        if secret_name is not None:
            cluster.delete_secret(secret_name)  # the old job's, unless collected already
    config_key = _write_config(store, prepared, args.job_file, resume=args.resume)
    secret_made = False
    try:
        if secret is not None:
            cluster.create_secret(secret)
            secret_made = True
        created = cluster.create_job(rollout_job.manifest())
    except CliError:
        # Leave nothing behind, so that the job can be submitted again; the first error is the
        # one to tell.
        if secret_made and secret_name is not None:
            _undo(lambda: cluster.delete_secret(secret_name))
        if config_key is not None:
            _undo(lambda: store.delete(config_key))
        raise
    if secret_name is not None:
        try:
            cluster.own_secret(secret_name, created)
        except CliError as err:
            note(f"warning: {err}; delete the Secret {secret_name} yourself when the job is gone")
    note(f"created RolloutJob {name} in {cluster.where}")
    if args.detach:
        note(_how_to_continue(name, job.name))
        return ExitCode.OK

    # 4.-5. Follow, download, summarise.
    try:
        return _follow_and_download(
            args, cluster, store, name, job.name, jobs_dir, mirror=args.resume
        )
    except KeyboardInterrupt:
        note("\ninterrupted: the job keeps running in the cluster.")
        note(_how_to_continue(name, job.name))
        return ExitCode.INTERRUPTED


QUICKSTART_HINT = (
    "no cluster or object storage to run on yet? examples/quickstart.sh makes both on this "
    "machine (a kind cluster with the operator, and MinIO): see the README's Quickstart"
)


@dataclass(frozen=True)
class Checked:
    """Everything `rollout run` needs, all checked, nothing created yet."""

    settings: config.CliSettings
    prepared: PreparedJob
    cluster: kube.Cluster
    store: ObjectStore
    jobs_dir: Path
    rollout_job: RolloutJob
    secret: dict[str, Any] | None
    replaces: bool = False
    """--resume: a finished RolloutJob of the job's name is there, to be replaced."""


def _check_everything(args: argparse.Namespace, environ: Mapping[str, str]) -> Checked:
    """The settings, the job, the cluster and storage, every problem of all of them found
    before anything is created, and reported together (`Problems`)."""
    problems: list[str] = []
    where_to_run = False  # a missing or unreachable cluster or storage: the quickstart helps
    settings = store = prepared = cluster = None
    try:
        settings = config.resolve(args, environ)
        where_to_run = not settings.has_storage
        store = settings.object_store(environ)
    except InvalidInput as err:
        problems += [str(p) for p in err.problems]
    try:
        prepared = prepare_job(
            args.job_file, environ, cache=cache_dir(environ), overrides=job_overrides(args)
        )
    except InvalidInput as err:
        problems += [str(p) for p in err.problems]
    if args.strict and prepared is not None and (unrunnable := prepared.task_problems()):
        problems += [str(p) for p in unrunnable]
        problems.append(strict_refusal(len(unrunnable)))
    jobs_dir: Path = args.jobs_dir or Path(prepared.job.jobs_dir if prepared else "jobs")
    if prepared is not None and not args.resume:
        local_dir = local_job_dir(jobs_dir, prepared.job.name)
        if local_dir.is_dir() and any(local_dir.iterdir()):
            message = (
                f"{local_dir} already holds results of a job named {prepared.job.name!r}: give "
                "the job another name, or pass --jobs-dir"
            )
            problems.append(str(Problem(str(args.job_file), "name", message)))
    try:
        cluster = kube.Cluster.from_args(args, environ)
    except CliError as err:
        problems.append(str(err))
        where_to_run = True
    rollout_job = secret = None
    replaces = False
    if cluster is not None and (prepared is None or settings is None):
        try:  # no job to look for, but whether the cluster answers is worth knowing now
            cluster.check_reachable()
        except CliError as err:
            problems.append(str(err))
            where_to_run = True
    if cluster is not None and prepared is not None and settings is not None:
        rollout_job, secret = build_resources(
            prepared,
            namespace=cluster.namespace,
            environ=environ,
            storage=settings.storage_spec(),
            runner_image=settings.runner_image,
        )
        name = str(rollout_job.metadata.name)
        try:
            existing = cluster.get_job(name)
        except CliError as err:
            problems.append(str(err))
            where_to_run = True
        else:
            if existing is not None and args.resume:
                if refused := resume.refusal(existing, cluster.where):
                    problems.append(refused)
                replaces = True
            elif existing is not None:
                phase = (existing.get("status") or {}).get("phase") or "Pending"
                problems.append(
                    f"a RolloutJob {name} ({phase}) already exists in {cluster.where}: follow it "
                    f"with `rollout status {name} --watch`, delete it with `rollout cancel "
                    f"{name}`, or give the job another name in {args.job_file}"
                )
    if store is not None and prepared is not None and not args.resume:
        try:
            _check_no_old_results(store, prepared, args.job_file)
        except InvalidInput as err:
            problems += [str(p) for p in err.problems]
        except StorageError as err:
            problems.append(f"object storage cannot be used: {err}")
            where_to_run = True
    if problems:
        raise Problems(problems, hint=QUICKSTART_HINT if where_to_run else None)
    assert settings is not None
    assert prepared is not None
    assert cluster is not None
    assert store is not None
    assert rollout_job is not None
    return Checked(settings, prepared, cluster, store, jobs_dir, rollout_job, secret, replaces)


def _follow_and_download(
    args: argparse.Namespace,
    cluster: kube.Cluster,
    store: ObjectStore,
    name: str,
    job_name: str,
    jobs_dir: Path,
    *,
    mirror: bool = False,
) -> int:
    """`mirror`: the local copy is made the same as storage's (a resumed job moved files)."""
    console = make_console()
    with ProgressDisplay(console) as display:
        final = follow(
            cluster,
            name,
            display,
            timeout_seconds=args.watch_timeout,
            operator_grace=args.operator_grace,
            fail_fast=args.fail_fast,
        )
    if final is None:
        note(
            f"RolloutJob {name} was deleted before it finished; results written so far stay in "
            f"storage: rollout download {job_name}"
        )
        return ExitCode.DELETED
    view = JobView.from_body(final)
    target, written = download_results(store, job_name, jobs_dir)
    if mirror and (removed := resume.prune_stale(target, written)):
        note(f"removed {removed} local files that storage no longer has there (moved to retries/)")
    if written:
        note(f"downloaded {len(written)} files to {target}")
    else:
        note(f"no results in storage at {store.uri(job_prefix(store.location.prefix, job_name))}")
    summary = load_summary(target, final)
    if summary is not None and (summary.rows or summary.total.trials):
        print_summary(console, summary)
    print_row_summary(console, target)
    if not view.succeeded:
        reason = f": {view.message}" if view.message else ""
        note(f"job {job_name} failed{reason}")
        return ExitCode.FAILED
    return ExitCode.OK


def _check_no_old_results(store: ObjectStore, prepared: PreparedJob, job_file: Path) -> None:
    """Refuse a job name whose results are already in storage: the two runs would mix."""
    prefix = store.location.prefix
    name = prepared.job.name
    for key in (job_config_key(prefix, name), job_result_key(prefix, name)):
        if store.exists(key):
            raise _name_in_storage(store, name, job_file)


def _name_in_storage(store: ObjectStore, name: str, job_file: Path) -> InvalidInput:
    return InvalidInput.one(
        job_file,
        "name",
        f"storage already holds results of a job named {name!r} "
        f"({store.uri(job_prefix(store.location.prefix, name))}): give the job another name, "
        "or delete those results first",
    )


def _write_config(
    store: ObjectStore, prepared: PreparedJob, job_file: Path, *, resume: bool = False
) -> str | None:
    """Store the job file as submitted, as JSON, at `jobs/<job>/config.json`; its key (None:
    a resumed job's, written by its first run and kept).

    Written before the RolloutJob exists, so that the operator, which writes a config.json for
    jobs applied without the CLI, finds it there and keeps it. Written only where storage has
    none: a submission of the same name that got there since the checks is refused here, before
    anything is created in the cluster.
    """
    key = job_config_key(store.location.prefix, prepared.job.name)
    text = config_json_text(prepared.content)
    if store.put_new(key, text.encode(), "application/json"):
        return key
    if resume:
        return None
    raise _name_in_storage(store, prepared.job.name, job_file)


def _undo(step: Callable[[], object]) -> None:
    """Take back one thing made for a submission that failed; a failure is only a warning."""
    try:
        step()
    except (CliError, StorageError) as err:
        note(f"warning: {err}")


def _how_to_continue(name: str, job_name: str) -> str:
    return (
        f"  follow it:    rollout status {name} --watch\n"
        f"  download:     rollout download {name}\n"
        f"  cancel it:    rollout cancel {name}"
        + ("" if name == job_name else f"\n  (job {job_name!r} is RolloutJob {name})")
    )
