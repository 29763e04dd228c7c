"""From a job.yaml to everything `rollout run` and `rollout render` need, with nothing written.

`check_job` is every check of a job file that run, render and validate make, in one place so that
they cannot drift: the file itself; the environment type; every `${VAR}` of agent env (unset:
an error, a warning, or not looked at when no value is needed); every dataset loaded (local
directories; registry datasets fetched with git into the cache, unless told not to fetch); two
datasets of one name; and, as warnings, what will fail a task's trials (an image it would have
to build). Every problem found is reported at once, each naming the file and the field, and
nothing has touched storage or the cluster yet.

`prepare_job` adds each dataset's bundle manifest and content address.

A broken task does not stop the job: its trials fail with its error (task_invalid,
task_not_found) and start nothing, and so do the oracle's trials of a task without a solution.
`task_problems` lists those tasks, for `rollout run` to say before it starts (and to refuse the
job with `--strict`) and for `rollout validate`.

`environment.type: docker` (job.yaml's default) means "run it in containers"; submitted to a
cluster that is a Pod per trial, so it becomes `kubernetes` here (in the RolloutJob; the job's
config.json keeps the file as written, docker included), unless `environment.docker_host`
names a remote engine, which the bridge controller runs the trials on. Other types (modal,
daytona, e2b) are refused: the bridge has no provider for them yet.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from rollout.api.dataset import (
    DATASET_TOML,
    Dataset,
    RegistryDataset,
    find_registry_dataset,
    load_dataset_path,
)
from rollout.api.environment import BRIDGE_ROWS, EnvironmentType
from rollout.api.envrefs import resolve_agent_env, resolve_task_env
from rollout.api.errors import InvalidInput, Problem
from rollout.api.images import ImageSource, image_source, needs_build
from rollout.api.job import JobConfig, JobDataset, read_job_file, resolve_evaluator_key
from rollout.api.manifest import DatasetManifest, manifest_digest
from rollout.api.resources import DatasetRef, RolloutJob, StorageSpec
from rollout.api.rules import ORACLE_AGENT
from rollout.api.task_support import unhonoured_keys
from rollout.api.taskdir import TASK_TOML, BrokenTask, Task, no_solution_message
from rollout.api.translate import job_to_rollout_job
from rollout.api.verifiers import Metric
from rollout.datasets.bundle import build_manifest
from rollout.datasets.registry import fetch_registry_dataset, load_registry

ENV_CACHE_DIR = "ROLLOUT_CACHE_DIR"


@dataclass(frozen=True)
class PreparedDataset:
    """A loaded dataset with its bundle manifest and content address (the manifest's digest)."""

    dataset: Dataset
    manifest: DatasetManifest
    digest: str
    source: JobDataset
    """The job.yaml entry, its paths relative to the job file's directory as they were written,
    so that a rendered manifest names no path of this machine."""

    @property
    def ref(self) -> DatasetRef:
        return DatasetRef(name=self.dataset.name, digest=self.digest, source=self.source)


@dataclass(frozen=True)
class PreparedJob:
    """A job ready to submit: the job (environment type mapped) and its datasets, in order."""

    file: Path
    job: JobConfig
    datasets: list[PreparedDataset]
    docker_mapped: bool
    """True when job.yaml said `type: docker` explicitly and it became `kubernetes`."""
    content: dict[str, Any]
    """The job file as written (type docker still docker, paths relative, `${VAR}` as text):
    the job's config.json."""
    warnings: list[Problem] = field(default_factory=list)
    """What check_job found that does not stop the job: say it before it starts."""

    def task_problems(self) -> list[Problem]:
        """The job's tasks that cannot run (`task_problems`)."""
        datasets = [(index, prepared.dataset) for index, prepared in enumerate(self.datasets)]
        return task_problems(self.file, datasets, [agent.name for agent in self.job.agents])


class EnvValues(Enum):
    """What an unset `${VAR}` of agent env is: it depends on whether its value is needed."""

    REQUIRED = "required"
    """An error: the values go into the Secret (rollout run, render --include-secrets)."""
    WARN = "warn"
    """A warning: the values are not here yet (rollout validate --no-env)."""
    UNUSED = "unused"
    """Not looked at: no Secret is made here (rollout render without --include-secrets)."""


@dataclass(frozen=True)
class CheckedJob:
    """A job file with every check made (see the module docstring)."""

    file: Path
    job: JobConfig
    """As read: dataset paths absolute, environment.type not yet mapped."""
    content: dict[str, Any]
    datasets: list[Dataset | None]
    """In job.yaml's order; None for a registry dataset that was not fetched."""
    warnings: list[Problem]

    def task_problems(self) -> list[Problem]:
        """The job's tasks that cannot run (`task_problems`); a registry dataset that was not
        fetched (validate --offline) is not looked into."""
        datasets = [(index, d) for index, d in enumerate(self.datasets) if d is not None]
        return task_problems(self.file, datasets, [agent.name for agent in self.job.agents])


def task_problems(
    file: Path, datasets: Sequence[tuple[int, Dataset]], agents: Sequence[str]
) -> list[Problem]:
    """The tasks whose trials fail without starting, one problem each naming the job file's
    dataset entry (`datasets[<index>]`), the error type and the message the trials get: each
    broken task (every agent's trials) and, when the job has the oracle agent, each task without
    a solution (the oracle's trials, task_invalid). The operator fails those trials with the same
    error and message when it creates them."""
    problems: list[Problem] = []
    oracle = ORACLE_AGENT in agents
    for index, dataset in datasets:
        where = f"datasets[{index}]"
        for task in dataset.tasks:
            if isinstance(task, BrokenTask):
                problems.append(Problem(str(file), where, f"{task.error_type}: {task.message}"))
            elif oracle and not task.has_solution:
                message = (
                    f"task_invalid for the {ORACLE_AGENT} agent: {no_solution_message(task.name)}"
                )
                problems.append(Problem(str(file), where, message))
    return problems


def _tasks(count: int) -> str:
    return "1 task" if count == 1 else f"{count} tasks"


def unrunnable_heading(count: int) -> str:
    """What `rollout run` says above the tasks that cannot run, before the job starts."""
    return (
        f"warning: {_tasks(count)} cannot run; the trials below fail with these errors, "
        "without starting, and the other trials run (--strict refuses such a job):"
    )


def strict_refusal(count: int) -> str:
    """Why `rollout run --strict` refuses a job with tasks that cannot run."""
    return (
        f"--strict: the job is refused because {_tasks(count)} cannot run (above); without "
        "--strict, their trials fail with those errors and the other trials run"
    )


def cache_dir(environ: Mapping[str, str]) -> Path:
    """Where registry datasets are fetched: $ROLLOUT_CACHE_DIR, else $XDG_CACHE_HOME/rollout,
    else ~/.cache/rollout."""
    if explicit := environ.get(ENV_CACHE_DIR, "").strip():
        return Path(explicit).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip()
    home = environ.get("HOME", "") or str(Path.home())
    return Path(base or os.path.join(home, ".cache")) / "rollout"


def check_job(
    path: Path,
    environ: Mapping[str, str],
    *,
    cache: Path,
    env_values: EnvValues = EnvValues.REQUIRED,
    fetch: bool = True,
    local: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> CheckedJob:
    """Every check of a job file that run, render and validate make; InvalidInput with every
    problem at once. `fetch=False` (validate --offline) finds registry datasets in their
    registry without fetching their tasks. `local`: for `rollout run --local`, which runs the
    types `docker` and `local` and builds images itself."""
    read = read_job_file(path, overrides)
    job = read.job
    problems: list[Problem] = []
    warnings: list[Problem] = []
    environment = job.environment
    if refusal := environment.refusal_locally() if local else environment.refusal_on_cluster():
        problems.append(Problem(str(path), environment.refused_field(local=local), f"is {refusal}"))
    if env_values is not EnvValues.UNUSED:
        try:
            resolve_agent_env(job, environ, file=path)
        except InvalidInput as err:
            (problems if env_values is EnvValues.REQUIRED else warnings).extend(err.problems)
    datasets: list[Dataset | None] = []
    for index, entry in enumerate(job.datasets):
        try:
            datasets.append(load_dataset(entry, cache) if fetch else _find_dataset(entry))
        except InvalidInput as err:
            problems.extend(Problem(str(path), f"datasets[{index}]", str(p)) for p in err.problems)
            datasets.append(None)
    problems += _shared_dataset_names(path, job.datasets, datasets)
    # What will fail or change a task's trials once the job runs: warnings, one call a rule.
    loaded = [d for d in datasets if d is not None]
    problems += data_problems(path, job, datasets)
    if env_values is not EnvValues.UNUSED:
        try:
            resolve_evaluator_key(job, environ, file=path)
        except InvalidInput as err:
            (problems if env_values is EnvValues.REQUIRED else warnings).extend(err.problems)
    warnings += _build_warnings(loaded, force_build=job.environment.force_build)
    warnings += _task_env_warnings(loaded, job)
    warnings += unhonoured_problems(loaded)
    if problems:
        raise InvalidInput(problems)
    return CheckedJob(path, job, read.content, datasets, warnings)


def prepare_job(
    path: Path,
    environ: Mapping[str, str],
    *,
    cache: Path,
    env_values: EnvValues = EnvValues.REQUIRED,
    local: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> PreparedJob:
    """check_job, then each dataset's manifest and content address (hashes every task).

    For a cluster, `docker` becomes `kubernetes`; `local` (rollout run --local) keeps the type.
    """
    checked = check_job(
        path, environ, cache=cache, env_values=env_values, local=local, overrides=overrides
    )
    job = checked.job
    datasets: list[PreparedDataset] = []
    for entry, dataset in zip(job.datasets, checked.datasets, strict=True):
        assert dataset is not None  # fetched: check_job raised for any that could not be
        datasets.append(_bundled(dataset, _relative_source(entry, path.parent)))
    explicit_docker = (
        not local
        and "type" in job.environment.model_fields_set
        and job.environment.type is EnvironmentType.DOCKER
        and job.environment.docker_host is None
    )
    if not local:
        job = job.model_copy(update={"environment": job.environment.on_cluster()})
    return PreparedJob(
        file=path,
        job=job,
        datasets=datasets,
        docker_mapped=explicit_docker,
        content=checked.content,
        warnings=checked.warnings,
    )


def data_problems(path: Path, job: JobConfig, datasets: Sequence[Dataset | None]) -> list[Problem]:
    """What stops a job's data datasets: llm_judgement without its evaluator's settings, or a
    remote Docker engine (the bridge does not run rows)."""
    problems: list[Problem] = []
    for index, dataset in enumerate(datasets):
        if dataset is None or dataset.rows is None:
            continue
        if job.environment.docker_host is not None:
            refusal = BRIDGE_ROWS.format(name=dataset.name, field="docker_host")
            problems.append(Problem(str(path), f"datasets[{index}]", refusal))
        verifier = dataset.rows.verifier.under(job.evaluation_metric)
        if verifier.metric is not Metric.LLM_JUDGEMENT:
            continue
        for field_name in ("evaluator_model_name", "evaluator_base_url"):
            if getattr(job, field_name) is None:
                problems.append(
                    Problem(
                        str(path),
                        field_name,
                        f"datasets[{index}] ({dataset.name}) is scored by llm_judgement "
                        f"({verifier.describe()}), which needs the evaluator's {field_name}",
                    )
                )
    return problems


def _find_dataset(entry: JobDataset) -> Dataset | None:
    """A local dataset loaded, or a registry dataset found in its registry (not fetched)."""
    if entry.path is not None:
        return load_dataset_path(entry.path, split=entry.split)
    _registry_entry(entry)
    return None


def _shared_dataset_names(
    path: Path, entries: Sequence[JobDataset], datasets: Sequence[Dataset | None]
) -> list[Problem]:
    """Two datasets of one name would write their trials to the same directories."""
    problems: list[Problem] = []
    first: dict[str, int] = {}
    for index, (entry, dataset) in enumerate(zip(entries, datasets, strict=True)):
        name = dataset.name if dataset is not None else entry.name
        if name is None:  # a local dataset that could not be loaded: reported already
            continue
        if name not in first:
            first[name] = index
            continue
        other = first[name]
        local = [i for i in (other, index) if entries[i].path is not None]
        if local:
            fix = (
                f"rename one of the directories or set `name` in its {DATASET_TOML}"
                if len(local) == 2
                else f"rename the directory of datasets[{local[0]}] or set `name` in its "
                f"{DATASET_TOML}"
            )
        else:
            fix = "two registry datasets of one name cannot run in one job; run them as two jobs"
        message = (
            f"dataset name {name!r} is also datasets[{other}]'s, and the two datasets' trials "
            f"would share result directories (<agent>/{name}/): {fix}"
        )
        problems.append(Problem(str(path), f"datasets[{index}]", message))
    return problems


def _build_warnings(datasets: Sequence[Dataset], *, force_build: bool) -> list[Problem]:
    """Tasks whose trials will fail with environment_build_failed: their image needs a build
    and they have no environment/Dockerfile to build."""
    warnings: list[Problem] = []
    for dataset in datasets:
        for task in dataset.tasks:
            if isinstance(task, BrokenTask):
                continue  # its trials fail with the task's own error (task_problems)
            if needs_build(task.config, force_build=force_build) and not task.dockerfile.is_file():
                why = "the job sets force_build" if force_build else "it has no docker_image"
                warnings.append(
                    Problem(
                        str(task.path / TASK_TOML),
                        "environment.docker_image",
                        f"its trials will fail with environment_build_failed: {why}, and its "
                        "environment/ has no Dockerfile to build",
                    )
                )
    return warnings


def image_plans(sources: Sequence[Dataset | Task], *, force_build: bool = False) -> list[str]:
    """Where each task's image comes from, a line each: `<task dir>: pull <image>`, `lift
    <image>` (from a Dockerfile that needs no build) or `build environment/Dockerfile`."""
    tasks = [t for s in sources for t in (s.tasks if isinstance(s, Dataset) else [s])]
    lines: list[str] = []
    for task in tasks:
        if isinstance(task, BrokenTask):
            continue
        source = image_source(task.config, lifted=task.lifted, force_build=force_build)
        image = task.config.environment.docker_image
        if source is ImageSource.PULL:
            lines.append(f"{task.path}: pull {image}")
        elif source is ImageSource.LIFT:
            lines.append(f"{task.path}: lift {image} (its Dockerfile needs no build)")
        else:
            why = " (force_build)" if force_build and image else ""
            lines.append(f"{task.path}: build environment/Dockerfile{why}")
    return lines


def unhonoured_problems(sources: Sequence[Dataset | Task]) -> list[Problem]:
    """The task.toml keys of these tasks (or datasets' tasks) that a trial cannot honour, each a
    warning naming the task's task.toml, the key and what happens instead
    (`api.task_support.unhonoured_keys`)."""
    tasks = [t for s in sources for t in (s.tasks if isinstance(s, Dataset) else [s])]
    return [
        Problem(str(task.path / TASK_TOML), unhonoured.key, unhonoured.instead)
        for task in tasks
        if not isinstance(task, BrokenTask)
        for unhonoured in unhonoured_keys(task.config)
    ]


def _task_env_warnings(datasets: Sequence[Dataset], job: JobConfig) -> list[Problem]:
    """Tasks whose `[environment.env]` takes a `${VAR}` that an agent's env does not set: the
    runner resolves those from the agent's env, so that agent's trials of the task will fail
    with task_invalid (`api.envrefs.resolve_task_env`, the runner's words)."""
    warnings: list[Problem] = []
    for dataset in datasets:
        for task in dataset.tasks:
            if isinstance(task, BrokenTask) or not task.config.environment.env:
                continue
            for agent in job.agents:
                try:
                    resolve_task_env(
                        task.config.environment.env,
                        dict.fromkeys(agent.env, ""),
                        task=task.name,
                        agent=agent.name,
                    )
                except InvalidInput as err:
                    warnings += [
                        Problem(
                            str(task.path / TASK_TOML),
                            p.field,
                            f"the trials of agent {agent.name!r} will fail with task_invalid: "
                            f"{p.message}",
                        )
                        for p in err.problems
                    ]
    return warnings


def prepare_dataset(
    entry: JobDataset, cache: Path, *, source: JobDataset | None = None
) -> PreparedDataset:
    """Load one dataset and compute its manifest and content address (hashes every task)."""
    return _bundled(load_dataset(entry, cache), source or entry)


def _bundled(dataset: Dataset, source: JobDataset) -> PreparedDataset:
    manifest = build_manifest(dataset)
    return PreparedDataset(dataset, manifest, manifest_digest(manifest), source)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def job_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """job.yaml settings given on the command line, over the file's."""
    overrides: dict[str, Any] = {}
    if args.max_tasks is not None:
        overrides["max_tasks"] = args.max_tasks
    if args.task_ids:
        overrides["task_ids"] = list(args.task_ids)
    return overrides


def load_dataset(entry: JobDataset, cache: Path) -> Dataset:
    """A job.yaml dataset entry, loaded: a local directory, or a registry dataset fetched with
    git into `cache/git`."""
    if entry.path is not None:
        return load_dataset_path(entry.path, split=entry.split)
    return fetch_registry_dataset(_registry_entry(entry), cache / "git")


def _registry_entry(entry: JobDataset) -> RegistryDataset:
    """A registry dataset entry of job.yaml found in its registry."""
    # JobDataset's validator: a dataset without a path has a registry and a name.
    assert entry.registry is not None
    assert entry.name is not None
    registry = load_registry(entry.registry.location)
    return find_registry_dataset(registry, entry.name, entry.version)


def build_resources(
    prepared: PreparedJob,
    *,
    namespace: str,
    environ: Mapping[str, str] | None,
    storage: StorageSpec | None,
    runner_image: str | None,
) -> tuple[RolloutJob, dict[str, Any] | None]:
    """The RolloutJob and its agent env Secret (None when no value has `${VAR}`, or when
    `environ` is None: no value wanted)."""
    return job_to_rollout_job(
        prepared.job,
        namespace=namespace,
        datasets=[d.ref for d in prepared.datasets],
        environ=environ,
        storage=storage,
        runner_image=runner_image,
        file=prepared.file,
    )


def _relative_source(entry: JobDataset, base: Path) -> JobDataset:
    """`entry` with its (absolute, after load_job) paths made relative to the job file again."""

    def relative(value: str | None) -> str | None:
        if value is None:
            return None
        text = os.path.relpath(value, base.absolute())
        return text if text == "." or text.startswith("..") else f"./{text}"

    registry = entry.registry
    if registry is not None and registry.path is not None:
        registry = registry.model_copy(update={"path": relative(registry.path)})
    return entry.model_copy(update={"path": relative(entry.path), "registry": registry})
