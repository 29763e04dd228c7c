"""`rollout run JOB.yaml --local`: the whole job on this machine, no cluster and no object store.

1. Check everything first, nothing written: the job file, every `${VAR}` of agent env, every
   dataset, that the environment type can run here (`docker`: a Docker-compatible engine
   reachable; `local`: namespaces for the host sandbox) and that `<jobs_dir>/<job>/` holds no
   results (with --resume it may: its unfinished trials run).
2. Put each dataset's task archives into the local store (`<cache>/local/`, content-addressed,
   shared by every local job), as `rollout publish` puts them into a bucket.
3. Run the trials, `n_concurrent_trials` at a time (`rollout.local.job`), writing the seed's
   layout into `<jobs_dir>/<job>/`, with the same progress display and summary as a cluster run.

Ctrl-C stops the job: no trial starts any more, the running ones are stopped (their runners
record them, as a deleted Pod's runner does) and their sandboxes torn down, and the job's
result.json is written over what finished; a second Ctrl-C kills the running trials at once.
Exit status: 0 when every trial ran (whatever the rewards), 1 when the job could not start,
130 when it was stopped (`rollout run JOB.yaml --local --resume` runs the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

from rollout.api.environment import EnvironmentType
from rollout.api.envrefs import resolve_agent_env
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.job import config_json_text, resolve_evaluator_key
from rollout.api.layout import local_job_dir
from rollout.api.plan import JobPlan, TooManyTrials, pick_tasks, plan_job, resolved_dataset
from rollout.api.resources import JobPhase
from rollout.api.service_agents import AgentKind
from rollout.api.taskdir import Task
from rollout.cli.errors import ExitCode, Problems, note
from rollout.cli.prepare import (
    PreparedJob,
    build_resources,
    cache_dir,
    job_overrides,
    prepare_job,
    strict_refusal,
    unrunnable_heading,
)
from rollout.cli.progress import JobView, ProgressDisplay, make_console
from rollout.cli.publish import publish_datasets
from rollout.cli.summary import load_summary, print_row_summary, print_summary
from rollout.local.environments import sandboxes, unavailable_reason
from rollout.local.job import JobRun, LocalJob, Progress, resolved_secrets
from rollout.storage import DirectoryStore

STOPPED = "Stopped"
"""The phase shown for a local job stopped with Ctrl-C (a cluster job would still be running)."""

LOCAL_NAMESPACE = "local"
"""The namespace of the RolloutJob a local job is modelled as (nothing is created anywhere)."""


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    prepared, jobs_dir = _check_everything(args, environ)
    job = prepared.job
    for problem in prepared.warnings:
        note(f"warning: {problem}")
    if unrunnable := prepared.task_problems():
        note(unrunnable_heading(len(unrunnable)))
        for problem in unrunnable:
            note(f"  {problem}")

    jobs_dir.mkdir(parents=True, exist_ok=True)
    store = DirectoryStore(_store_root(environ), jobs_dir=jobs_dir)
    for report in publish_datasets(store, prepared.datasets, build_contexts=False):
        if report.archives_uploaded:
            note(report.describe(store))

    rollout_job, _ = build_resources(
        prepared, namespace=LOCAL_NAMESPACE, environ=None, storage=None, runner_image=None
    )
    secrets = resolved_secrets(rollout_job, resolve_agent_env(job, environ, file=prepared.file))
    plan = _plan(prepared, rollout_job.metadata.name or job.name)
    console = make_console()
    with ProgressDisplay(console) as display:
        last: list[Progress] = []

        def show(progress: Progress, phase: str = JobPhase.RUNNING.value) -> None:
            last[:] = [progress]
            display.update(_view(job.name, progress, phase))

        local_job = LocalJob(
            rollout_job,
            plan,
            store,
            sandboxes(
                job.environment.type,
                environ,
                _task_dirs(prepared),
                force_build=job.environment.force_build,
            ),
            secrets=secrets,
            environ=environ,
            config_json=config_json_text(prepared.content),
            resume=args.resume,
            retry_errors=args.retry_errors or (),
            on_progress=show,
            evaluator_key=resolve_evaluator_key(job, environ, file=prepared.file),
        )
        outcome = asyncio.run(_run_until_stopped(local_job, display))
        if last:
            show(last[0], STOPPED if outcome.stopped else JobPhase.COMPLETED.value)
    for kept in outcome.kept:
        note(f"kept for inspection (preserve_env): {kept}")
    target = local_job_dir(jobs_dir, job.name)
    summary = load_summary(target, None)
    if summary is not None:
        print_summary(console, summary)
    print_row_summary(console, target)
    note(f"results: {target}")
    if outcome.stopped:
        note(
            f"stopped: the trials that finished are kept; `rollout run {args.job_file} --local "
            "--resume` runs the others"
        )
        return ExitCode.INTERRUPTED
    return ExitCode.OK


async def _run_until_stopped(job: LocalJob, display: ProgressDisplay) -> JobRun:
    loop = asyncio.get_running_loop()
    interrupts = 0

    def interrupted() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            display.warn(
                "stopping: no more trials start; the running ones are recording their state "
                "(Ctrl-C again kills them)"
            )
        job.stop(now=interrupts > 1)

    # Signals reach the main thread only (the CLI run from a test's thread has no Ctrl-C).
    signals = (
        (signal.SIGINT, signal.SIGTERM)
        if threading.current_thread() is threading.main_thread()
        else ()
    )
    for sig in signals:
        loop.add_signal_handler(sig, interrupted)
    try:
        return await job.run()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await job.sandboxes.aclose()


def _check_everything(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> tuple[PreparedJob, Path]:
    problems: list[str] = []
    prepared = None
    try:
        prepared = prepare_job(
            args.job_file,
            environ,
            cache=cache_dir(environ),
            local=True,
            overrides=job_overrides(args),
        )
    except InvalidInput as err:
        problems += [str(p) for p in err.problems]
    if args.strict and prepared is not None and (unrunnable := prepared.task_problems()):
        problems += [str(p) for p in unrunnable]
        problems.append(strict_refusal(len(unrunnable)))
    jobs_dir: Path = args.jobs_dir or Path(prepared.job.jobs_dir if prepared else "jobs")
    if prepared is not None:
        sandboxed = _needs_sandboxes(prepared)
        if sandboxed and (reason := unavailable_reason(prepared.job.environment.type, environ)):
            problems.append(f"{args.job_file}: environment.type: {reason}")
        elif prepared.job.environment.type is EnvironmentType.LOCAL and os.geteuid() != 0:
            problems += _agent_users_without_root(prepared, args.job_file)
        if sandboxed and prepared.job.environment.type is EnvironmentType.DOCKER:
            problems += _rows_without_image(prepared)
        local_dir = local_job_dir(jobs_dir, prepared.job.name)
        if not args.resume and local_dir.is_dir() and any(local_dir.iterdir()):
            problems.append(
                f"{args.job_file}: name: {local_dir} already holds results of a job named "
                f"{prepared.job.name!r}: give the job another name, pass --jobs-dir, or pass "
                "--resume to run only its trials without a result (or with an infrastructure "
                "failure)"
            )
    if problems:
        raise Problems(problems)
    assert prepared is not None
    return prepared, jobs_dir.absolute()


def _agent_users_without_root(prepared: PreparedJob, job_file: Path) -> list[str]:
    """The host sandbox without root maps only root into its user namespace: no agent user can
    exist there, so a job that needs one is refused rather than failing every trial."""
    why = "needs an agent user, which the host sandbox can make only when run as root"
    instead = "run as root, or use environment.type: docker"
    if prepared.job.isolate_agents:
        return [f"{job_file}: isolate_agents: {why}; {instead}"]
    return [
        f"{job_file}: datasets: task {task.name!r} has [agent] user = {task.config.agent.user!r}, "
        f"which {why}; {instead}"
        for dataset in prepared.datasets
        for task in dataset.dataset.tasks
        if isinstance(task, Task) and task.config.agent.user is not None
    ]


def _script_agents(prepared: PreparedJob) -> bool:
    return any(agent.kind is AgentKind.SCRIPT for agent in prepared.job.agents)


def _needs_sandboxes(prepared: PreparedJob) -> bool:
    """Whether any trial runs in an environment: every task of a dataset of task directories
    does; a data row does only when a script agent answers it (the runner answers for the
    oracle and endpoint and model agents, with no sandbox)."""
    return _script_agents(prepared) or any(d.dataset.rows is None for d in prepared.datasets)


def _rows_without_image(prepared: PreparedJob) -> list[str]:
    """A data dataset runs its rows in containers of its declared image, which local mode
    cannot guess (a cluster uses the runner's image)."""
    return [
        f"{prepared.file}: datasets[{index}]: data dataset {d.dataset.name!r} declares no "
        "[environment] docker_image in its dataset.toml, which its rows need to run in "
        "containers; declare one, or use environment.type: local"
        for index, d in enumerate(prepared.datasets)
        if d.dataset.rows is not None
        and d.dataset.rows.config.environment.docker_image is None
        and _script_agents(prepared)
    ]


def _store_root(environ: Mapping[str, str]) -> Path:
    """Where local mode keeps task archives and dataset manifests: one store for every job."""
    root = cache_dir(environ) / "local"
    root.mkdir(parents=True, exist_ok=True)
    return root.absolute()


def _task_dirs(prepared: PreparedJob) -> dict[str, Path]:
    """Each task's directory by its content hash (an engine builds its environment/ there);
    a data dataset's rows archive by its directory."""
    dirs = {
        entry.content_hash: task.path
        for d in prepared.datasets
        for task, entry in zip(d.dataset.tasks, d.manifest.tasks, strict=True)
        if entry.content_hash is not None
    }
    for d in prepared.datasets:
        if d.dataset.rows is not None and d.manifest.rows is not None:
            dirs[d.manifest.rows.content_hash] = d.dataset.rows.root
    return dirs


def _plan(prepared: PreparedJob, name: str) -> JobPlan:
    job = prepared.job
    datasets = pick_tasks(
        [resolved_dataset(d.manifest, d.dataset.name, d.digest) for d in prepared.datasets],
        max_tasks=job.max_tasks,
        task_ids=job.task_ids,
        where=str(prepared.file),
    )
    agents = [a.name for a in job.agents]
    try:
        return plan_job(name, agents, datasets, job.n_attempts, shard_size=job.shard_size)
    except TooManyTrials as err:
        raise InvalidInput.one(prepared.file, "n_attempts", str(err)) from None


def _view(job_name: str, progress: Progress, phase: str) -> JobView:
    job = progress.summary.job
    return JobView(
        name=job_name,
        job_name=job_name,
        phase=phase,
        total=progress.total,
        finished=progress.finished,
        running=progress.running,
        completed=job.completed_trials,
        failed=job.failed_trials,
        pass_rate=job.pass_rate,
        mean_reward=job.mean_reward,
        metrics=[(m.type.value, m.value) for m in progress.summary.metrics],
    )


def parse_error_type(text: str) -> ErrorType:
    try:
        return ErrorType(text.strip())
    except ValueError:
        choices = ", ".join(e.value for e in ErrorType)
        raise argparse.ArgumentTypeError(f"{text!r} is not an error type ({choices})") from None
