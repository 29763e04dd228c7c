"""From a job.yaml to everything `rollout run` and `rollout render` need, with nothing written.

`prepare_job` loads the job, resolves every `${VAR}` of agent env from the environment, loads
every dataset (local directories; registry datasets fetched with git into the cache) and computes
each dataset's bundle manifest and content address. Every problem found is reported at once, each
naming the file and the field, and nothing has touched storage or the cluster yet.

A broken task does not stop the job: its trials fail with its error (task_invalid,
task_not_found) and start nothing, and so do the oracle's trials of a task without a solution.
`task_problems` lists those tasks, for `rollout run` to say before it starts (and to refuse the
job with `--strict`) and for `rollout validate`.

`environment.type: docker` (job.yaml's default) means "run it in containers"; submitted to a
cluster that is a Pod per trial, so it becomes `kubernetes` here (in the RolloutJob; the job's
config.json keeps the file as written, docker included). Other types (modal, daytona,
e2b) are refused: the bridge controller that will run them does not exist yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.dataset import Dataset, find_registry_dataset, load_local_dataset
from rollout.api.environment import EnvironmentType
from rollout.api.envrefs import resolve_agent_env
from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import JobConfig, JobDataset, read_job_file
from rollout.api.manifest import DatasetManifest, manifest_digest
from rollout.api.resources import DatasetRef, RolloutJob, StorageSpec
from rollout.api.rules import ORACLE_AGENT
from rollout.api.taskdir import BrokenTask, no_solution_message
from rollout.api.translate import job_to_rollout_job
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

    def task_problems(self) -> list[Problem]:
        """The job's tasks that cannot run (`task_problems`)."""
        datasets = [(index, prepared.dataset) for index, prepared in enumerate(self.datasets)]
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


def cache_dir(environ: Mapping[str, str]) -> Path:
    """Where registry datasets are fetched: $ROLLOUT_CACHE_DIR, else $XDG_CACHE_HOME/rollout,
    else ~/.cache/rollout."""
    if explicit := environ.get(ENV_CACHE_DIR, "").strip():
        return Path(explicit).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip()
    home = environ.get("HOME", "") or str(Path.home())
    return Path(base or os.path.join(home, ".cache")) / "rollout"


def prepare_job(path: Path, environ: Mapping[str, str], *, cache: Path) -> PreparedJob:
    """Load and check everything about the job (see the module docstring)."""
    read = read_job_file(path)
    job = read.job
    problems: list[Problem] = []
    if refusal := job.environment.type.refusal_on_cluster():
        problems.append(Problem(str(path), "environment.type", f"is {refusal}"))
    try:
        resolve_agent_env(job, environ, file=path)
    except InvalidInput as err:
        problems.extend(err.problems)
    datasets: list[PreparedDataset] = []
    for index, entry in enumerate(job.datasets):
        try:
            source = _relative_source(entry, path.parent)
            datasets.append(prepare_dataset(entry, cache, source=source))
        except InvalidInput as err:
            problems.extend(Problem(str(path), f"datasets[{index}]", str(p)) for p in err.problems)
    if problems:
        raise InvalidInput(problems)
    explicit_docker = (
        "type" in job.environment.model_fields_set
        and job.environment.type is EnvironmentType.DOCKER
    )
    job = job.model_copy(update={"environment": job.environment.on_cluster()})
    return PreparedJob(
        file=path,
        job=job,
        datasets=datasets,
        docker_mapped=explicit_docker,
        content=read.content,
    )


def prepare_dataset(
    entry: JobDataset, cache: Path, *, source: JobDataset | None = None
) -> PreparedDataset:
    """Load one dataset and compute its manifest and content address (hashes every task)."""
    dataset = load_dataset(entry, cache)
    manifest = build_manifest(dataset)
    return PreparedDataset(dataset, manifest, manifest_digest(manifest), source or entry)


def load_dataset(entry: JobDataset, cache: Path) -> Dataset:
    """A job.yaml dataset entry, loaded: a local directory, or a registry dataset fetched with
    git into `cache/git`."""
    if entry.path is not None:
        return load_local_dataset(entry.path)
    # JobDataset's validator: a dataset without a path has a registry and a name.
    assert entry.registry is not None
    assert entry.name is not None
    registry = load_registry(entry.registry.location)
    found = find_registry_dataset(registry, entry.name, entry.version)
    return fetch_registry_dataset(found, cache / "git")


def build_resources(
    prepared: PreparedJob,
    *,
    namespace: str,
    environ: Mapping[str, str],
    storage: StorageSpec | None,
    runner_image: str | None,
) -> tuple[RolloutJob, dict[str, Any] | None]:
    """The RolloutJob and its agent env Secret (None when no value has `${VAR}`)."""
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
