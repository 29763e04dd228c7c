"""Seed 002's `rollout()`: a RolloutConfig run as a job, through `rollout run`'s own code, and
its summary returned.

1. The config is read (`load_config`) and the call's arguments put over its keys
   (`data_path`, `output_dir`, `model_name`, `max_tasks` -> number_of_tasks, `task_ids`,
   `evaluate=False` -> evaluate_results false, `metric` -> evaluation_metric).
2. It becomes a job (`RolloutConfig.to_job`), named `<benchmark_name or the data's name>-<UTC
   time>` so that every call is a job of its own, as every seed 002 run writes a summary of its
   own. The job is written to a temporary job.yaml, which holds `${VAR}` references only: a
   literal API key of the config reaches the run through the environment the run resolves
   `${VAR}` from, never a file or a resource.
3. `rollout run` runs that file exactly as on the command line (`rollout.cli.run`): on the
   cluster of the kubeconfig (KUBECONFIG, `context`, `namespace`) with the storage settings of
   the environment or `rollout login`'s config file, or with `local=True` in local mode with the
   host sandbox (environment type local: no container engine needed). Progress is printed as
   the command prints it. Results go into `<output_dir>/<job>/` (output_dir default: `jobs`).
4. The job's seed 002 summary (`summary_<benchmark>_<timestamp>.json`) is returned as a dict,
   its `results_file` and `evaluation_file` the local copies. A job whose summary was not saved
   (`save_summary: false`) or whose dataset is not of rows gets one made from its trials.

Errors are the CLI's: `InvalidInput` for bad input (each problem naming the config file, the
key or the data file and line; the generated job file is named as the config's: `rollout run`'s
checks of the job are made first, so that they raise it), `Problems` for what else `rollout run`
finds before anything is created (the cluster, storage, a job of that name), `CliError` or
`StorageError` for the cluster and storage, `KeyboardInterrupt` when the run was stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rollout.api.dataset import load_dataset_path
from rollout.api.errors import InvalidInput, Problem
from rollout.api.layout import RESULT_JSON, local_job_dir
from rollout.api.results import JobResult, format_timestamp
from rollout.api.rowresults import (
    EVALUATION_JSON,
    RESULTS_JSONL,
    ROW_LINE,
    ResultLine,
    Summary,
    parse_line,
    summary,
)
from rollout.cli import run as run_command
from rollout.cli.errors import CliError, ExitCode, Problems, note
from rollout.cli.prepare import cache_dir, check_job
from rollout.python_api.config import RolloutConfig, load_config

_ARGUMENT_KEYS = {
    "data_path": "data_path",
    "output_dir": "output_dir",
    "model_name": "model_name",
    "number_of_tasks": "max_tasks",
    "task_ids": "task_ids",
    "evaluate_results": "evaluate",
    "evaluation_metric": "metric",
}
"""The config key each argument of `rollout()` sets, by key: problems name the argument."""


def rollout(
    *,
    config_path: str | os.PathLike[str],
    data_path: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    model_name: str | None = None,
    max_tasks: int | None = None,
    task_ids: Sequence[str] | None = None,
    evaluate: bool = True,
    metric: str | None = None,
    local: bool = False,
    namespace: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the benchmark a seed 002 config describes and return its summary.

    Args:
        config_path: the RolloutConfig file (.json, .yaml or .yml).
        data_path: the benchmark's rows (.jsonl or .json file, or a dataset directory), over
            the config's `data_path`; relative paths are relative to the working directory.
        output_dir: where results go, as `<output_dir>/<job>/` (over the config's).
        model_name: the model, over the config's `model_name`.
        max_tasks: only the first N rows (the config's `number_of_tasks`).
        task_ids: only these rows, in the data's order (the config's `task_ids`).
        evaluate: False skips scoring (the verifier); True keeps the config's
            `evaluate_results`.
        metric: the evaluation metric, over the config's `evaluation_metric`.
        local: run on this machine (local mode, the host sandbox) instead of the cluster.
        namespace: the cluster's namespace (default: the kubeconfig context's).
        context: the kubeconfig context (default: the current one).
        environ: the environment to read settings and `${VAR}`s from (default: os.environ).

    Returns:
        Seed 002's summary: benchmark_name, total_tasks, successful_tasks, failed_tasks,
        average_score, metric, total_time_seconds, results_file, evaluation_file, timestamp.

    Raises:
        InvalidInput: the config, an argument or the data is not valid (every problem).
        Problems: what `rollout run` found before creating anything (every problem).
        CliError: the cluster could not be used, or the job failed or was deleted.
        StorageError: object storage could not be used.
        KeyboardInterrupt: the run was stopped (a cluster job keeps running).
    """
    env = dict(os.environ if environ is None else environ)
    config = load_config(config_path)
    config = _with_arguments(
        config,
        data_path=data_path,
        output_dir=output_dir,
        model_name=model_name,
        max_tasks=max_tasks,
        task_ids=task_ids,
        evaluate=evaluate,
        metric=metric,
    )
    for line in config.notes():
        note(f"note: {line}")
    base_dir = Path.cwd()
    row_count = _row_count(config, base_dir) if config.concurrency() > 1 else None
    jobs_dir = config.results_dir(base_dir)
    name = job_name(config, jobs_dir)
    job, additions = config.to_job(
        base_dir=base_dir, job_name=name, local=local, row_count=row_count
    )
    env.update(additions)
    with tempfile.TemporaryDirectory(prefix="rollout-python-") as directory:
        job_file = Path(directory) / f"{name}.yaml"
        job_file.write_text(yaml.safe_dump(job, sort_keys=False, allow_unicode=True))
        args = run_arguments(job_file, local=local, namespace=namespace, context=context)
        label = f"{config.file} (as job.yaml)"
        try:
            # The job's own problems as InvalidInput, as a Python caller expects them; `rollout
            # run` makes the same checks again and reports the cluster's and storage's too.
            check_job(job_file, env, cache=cache_dir(env), local=local)
            code = _call(args.handler, args, env)
        except InvalidInput as err:
            raise _relabelled_input(err, str(job_file), label) from None
        except Problems as err:
            messages = [m.replace(str(job_file), label) for m in err.messages]
            raise Problems(messages, hint=err.hint) from None
    target = local_job_dir(jobs_dir, name)
    if code == ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    if code == ExitCode.DELETED:
        raise CliError(
            f"the RolloutJob of job {name} was deleted before it finished; results written so "
            f"far stay in storage (`rollout download {name}`)"
        )
    if code != ExitCode.OK:
        raise CliError(f"job {name} failed (see above); what it wrote is in {target}")
    return job_summary(target)


def job_name(config: RolloutConfig, jobs_dir: Path, now: datetime | None = None) -> str:
    """`<benchmark_name, else the data's name>-<UTC time as 20250204T103000>`, with `-2`, `-3`
    ... when `jobs_dir` already has a job of that name (two calls in the same second)."""
    base = config.benchmark_name or Path(config.data_path or "rollout").stem or "rollout"
    base = "".join(c if c.isalnum() or c in "-_." else "-" for c in base).strip("-.") or "rollout"
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    name = f"{base}-{stamp}"
    count = 1
    while local_job_dir(jobs_dir, name).exists():
        count += 1
        name = f"{base}-{stamp}-{count}"
    return name


def run_arguments(
    job_file: Path, *, local: bool, namespace: str | None, context: str | None
) -> argparse.Namespace:
    """`rollout run JOB_FILE` with these options, parsed by the command's own parser (so every
    option has the command's default)."""
    parser = argparse.ArgumentParser(prog="rollout", add_help=False)
    run_command.register(parser.add_subparsers(dest="command", required=True))
    argv = ["run", str(job_file)]
    if local:
        argv.append("--local")
    if namespace:
        argv += ["--namespace", namespace]
    if context:
        argv += ["--context", context]
    return parser.parse_args(argv)


def job_summary(job_dir: Path) -> dict[str, Any]:
    """Seed 002's summary of the job in `job_dir`: its summary file's content, else one made
    from its trials (its rows' lines, else its result.json); `results_file` and
    `evaluation_file` are the files in `job_dir` when they are there."""
    made = _summary_file(job_dir) or _summary_of_trials(job_dir)
    data = made.model_dump(mode="json")
    for key, file in (("results_file", RESULTS_JSONL), ("evaluation_file", EVALUATION_JSON)):
        if (job_dir / file).is_file():
            data[key] = str(job_dir / file)
    return data


def _summary_file(job_dir: Path) -> Summary | None:
    found = sorted(job_dir.glob("summary_*.json"))
    if not found:
        return None
    try:
        return Summary.model_validate_json(found[-1].read_bytes())
    except ValidationError:
        return None


def _summary_of_trials(job_dir: Path) -> Summary:
    path = job_dir / RESULT_JSON
    if not path.is_file():
        raise CliError(f"no results in {job_dir}: the job wrote no {RESULT_JSON}")
    result = JobResult.from_json(path.read_bytes(), str(path))
    at = result.ended_at or datetime.now(UTC)
    lines: list[ResultLine] = []
    for row_file in sorted(job_dir.glob(f"*/*/*/{ROW_LINE}")):
        try:
            lines.append(parse_line(row_file.read_bytes(), str(row_file)))
        except InvalidInput:
            continue
    if lines:
        datasets = list(dict.fromkeys(line.rollout.dataset_name for line in lines))
        return summary(
            lines,
            benchmark_name=datasets[0] if len(datasets) == 1 else result.job_name,
            total_time_seconds=result.total_duration_sec,
            results_file=None,
            evaluation_file=None,
            at=at,
        )
    datasets = list(dict.fromkeys(trial.dataset_name for trial in result.results))
    return Summary(
        benchmark_name=datasets[0] if len(datasets) == 1 else result.job_name,
        total_tasks=result.total_trials,
        successful_tasks=result.completed_trials,
        failed_tasks=result.failed_trials,
        average_score=result.mean_reward,
        metric=None,
        total_time_seconds=result.total_duration_sec,
        results_file=None,
        evaluation_file=None,
        timestamp=format_timestamp(at),
    )


def _with_arguments(
    config: RolloutConfig,
    *,
    data_path: str | os.PathLike[str] | None,
    output_dir: str | os.PathLike[str] | None,
    model_name: str | None,
    max_tasks: int | None,
    task_ids: Sequence[str] | None,
    evaluate: bool,
    metric: str | None,
) -> RolloutConfig:
    changes: dict[str, Any] = {}
    if data_path is not None:
        changes["data_path"] = os.fspath(data_path)
    if output_dir is not None:
        changes["output_dir"] = os.fspath(output_dir)
    if model_name is not None:
        changes["model_name"] = model_name
    if max_tasks is not None:
        changes["number_of_tasks"] = max_tasks
    if task_ids is not None:
        if isinstance(task_ids, str):
            raise InvalidInput.one("rollout()", "task_ids", "must be a list of ids, not a string")
        changes["task_ids"] = list(task_ids)
    if not evaluate:
        changes["evaluate_results"] = False
    if metric is not None:
        changes["evaluation_metric"] = metric
    if not changes:
        return config
    try:
        return config.updated(changes, where="rollout()")
    except InvalidInput as err:
        problems = [
            Problem(p.file, _ARGUMENT_KEYS.get(p.field or "", p.field), p.message)
            if p.file == "rollout()" and (p.field or "") in changes
            else Problem(config.file, p.field, p.message)
            for p in err.problems
        ]
        raise InvalidInput(problems) from None


def _row_count(config: RolloutConfig, base_dir: Path) -> int | None:
    """How many rows the job will run (after number_of_tasks and task_ids); None when the data
    is not a data benchmark or cannot be read (the run says why)."""
    if not config.data_path:
        return None
    try:
        dataset = load_dataset_path(base_dir / config.data_path)
    except InvalidInput:
        return None
    if dataset.rows is None:
        return None
    count = len(dataset.rows.rows)
    if config.task_ids is not None:
        count = min(count, len(set(config.task_ids)))
    if config.number_of_tasks is not None:
        count = min(count, config.number_of_tasks)
    return count


def _call(
    handler: Callable[[argparse.Namespace, Mapping[str, str]], int],
    args: argparse.Namespace,
    environ: Mapping[str, str],
) -> int:
    """The command's handler, in a thread of its own when this one runs an event loop (a
    notebook): local mode runs one of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return handler(args, environ)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout-run") as pool:
        return pool.submit(handler, args, environ).result()


def _relabelled_input(err: InvalidInput, job_file: str, label: str) -> InvalidInput:
    """`err` with the generated job file named as the config it came from."""
    return InvalidInput(
        [
            Problem(
                p.file.replace(job_file, label),
                p.field,
                p.message.replace(job_file, label),
            )
            for p in err.problems
        ],
        err.error_type,
    )
