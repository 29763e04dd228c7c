"""`rollout validate PATH...`: check tasks, datasets, job files, RolloutJob manifests and
registries without running them.

What a file is, is read from its content, not its name: a YAML or JSON file with `apiVersion` and
`kind` is a Kubernetes manifest (a RolloutJob is checked against the RolloutJob schema, as the
cluster and the operator check it; a Secret beside it, as `rollout render` writes, is left
alone); JSON that is a list, or one registry dataset (it has `tasks`), or registry datasets under
`datasets` without `agents`, is a registry; other YAML or JSON is a job.yaml. A file named
registry.json is a registry unless it has `agents`. Prints `ok <path> (<kind>)` for each valid
input, or each problem with its file and field, and exits 1 when anything is invalid. For tasks
(alone, in a dataset or in a job) it prints where each task's image comes from first:
`image <task>: pull <image>`, `lift <image>` (a Dockerfile that needs no build runs its FROM
image) or `build environment/Dockerfile` (`rollout.api.images`).

A job file gets every check `rollout run` and `rollout render` make, in their words (they share
`rollout.cli.prepare.check_job`): each `${VAR}` of agent env must be set here (--no-env: a
warning), registry datasets are fetched with git to check their commits and tasks (--offline:
only found in their registry), and what will fail trials once the job runs is a warning.
Warnings never change the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from rollout.api.dataset import Dataset, load_local_dataset, looks_like_registry
from rollout.api.errors import InvalidInput, Problem
from rollout.api.problems import problems_from_validation_error
from rollout.api.resources import API_VERSION, RolloutJob
from rollout.api.rows import ROW_ALIASES
from rollout.api.taskdir import load_task
from rollout.api.verifiers import Metric
from rollout.cli.prepare import (
    EnvValues,
    cache_dir,
    check_job,
    image_plans,
    unhonoured_problems,
)
from rollout.datasets.registry import load_registry

EPILOG = """\
examples:
  rollout validate ./tasks/hello-world        a task directory (it holds task.toml)
  rollout validate ./tasks                    a dataset: a directory of task directories
  rollout validate ./gsm8k ./qa.jsonl         data datasets: dataset.toml + data/<split>.jsonl,
                                              or a bare .jsonl / .json file of rows
  rollout validate job.yaml registry.json     a job file and a registry of datasets
  rollout validate rolloutjob.yaml            a RolloutJob manifest (GitOps)
  rollout validate --no-env --offline job.yaml   in CI: no secrets, no network
"""

JOB_SUFFIXES = (".yaml", ".yml", ".json")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "validate",
        help="check task directories, datasets, job files and registry.json files",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument(
        "--no-env",
        action="store_true",
        help="an unset ${VAR} of agent env is a warning, not an error (values set elsewhere)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="do not fetch registry datasets' tasks with git (their commits go unchecked)",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="check job files as `rollout run --local` would run them (environment.type docker "
        "or local) rather than as a cluster would",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    checks = JobChecks(
        environ,
        cache=cache_dir(environ),
        env_values=EnvValues.WARN if args.no_env else EnvValues.REQUIRED,
        fetch=not args.offline,
        local=args.local,
    )
    return validate_paths(args.paths, sys.stdout, checks)


@dataclass(frozen=True)
class Findings:
    """What a valid input's checks found besides its validity: warnings, and where its tasks'
    images come from."""

    warnings: list[Problem]
    images: list[str]
    rows: list[str] = field(default_factory=list)
    """A data dataset's rows: how many, from where, and how they are scored."""


@dataclass(frozen=True)
class JobChecks:
    """How a job file is checked: the environment its `${VAR}` come from, where registry
    datasets are fetched to, and what --no-env and --offline asked for."""

    environ: Mapping[str, str]
    cache: Path
    env_values: EnvValues = EnvValues.REQUIRED
    fetch: bool = True
    local: bool = False

    def check(self, path: Path) -> Findings:
        """A job file is valid when run would accept it and all its tasks can run (what
        `rollout run --strict` asks); its warnings and its tasks' images."""
        checked = check_job(
            path,
            self.environ,
            cache=self.cache,
            env_values=self.env_values,
            fetch=self.fetch,
            local=self.local,
        )
        if unrunnable := checked.task_problems():
            raise InvalidInput(unrunnable)
        loaded = [d for d in checked.datasets if d is not None]
        force = checked.job.environment.force_build
        job = checked.job
        rows = [_rows_line(d, job.evaluation_metric) for d in loaded if d.rows is not None]
        return Findings(checked.warnings, image_plans(loaded, force_build=force), rows)


def validate_paths(paths: list[Path], out: TextIO, checks: JobChecks) -> int:
    failed = False
    for path in paths:
        kind, check = classify(path, checks)
        try:
            warnings = check(path)
        except InvalidInput as err:
            failed = True
            for problem in err.problems:
                print(f"error {problem}", file=out)
        else:
            found = warnings if isinstance(warnings, Findings) else Findings([], [])
            for line in found.rows:
                print(f"rows {line}", file=out)
            for line in found.images:
                print(f"image {line}", file=out)
            for warning in found.warnings:
                print(f"warning {warning}", file=out)
            print(f"ok {path} ({kind})", file=out)
    return 1 if failed else 0


def classify(path: Path, checks: JobChecks) -> tuple[str, Callable[[Path], Any]]:
    """Decide what a path is from its shape, so that each kind gets its own checks. A check
    raises InvalidInput, or returns its `Findings` or anything else."""
    if path.is_dir():
        if (path / "task.toml").exists():
            return "task", check_task
        return "dataset", check_dataset
    if path.suffix == ".jsonl" or (path.suffix == ".json" and _is_rows(path)):
        return "dataset", check_dataset
    if path.suffix == ".json" and _is_registry(path):
        return "registry", load_registry
    if path.suffix in JOB_SUFFIXES:
        documents = _manifests(path)
        if documents:
            kinds = sorted({str(d.get("kind")) for d in documents if d.get("kind") != "Secret"})
            return ", ".join(kinds) or "Secret", check_manifests
        return "job", checks.check
    if not path.exists():
        return "path", _missing
    return "file", _unknown_kind


def check_task(path: Path) -> Findings:
    """A task directory: its problems, else its warnings (keys a trial cannot honour) and its
    image."""
    task = load_task(path)
    return Findings(unhonoured_problems([task]), image_plans([task]))


def check_dataset(path: Path) -> Findings:
    """A dataset directory is valid when every task in it is (`rollout run` would run the
    others, and fail the broken ones' trials); its warnings and its tasks' images. A data
    dataset (rows) is valid when every row is; it says how many rows and how they are scored."""
    dataset = load_local_dataset(path)
    if problems := dataset.problems():
        raise InvalidInput(problems)
    rows = [_rows_line(dataset)] if dataset.rows is not None else []
    return Findings(unhonoured_problems([dataset]), image_plans([dataset]), rows)


def _rows_line(dataset: Dataset, metric: Metric | None = None) -> str:
    """`<dataset>: 250 rows of split test (data/test.jsonl), scored by metric exact_match
    (dataset.toml)`; a job's evaluation_metric replaces the dataset's verifier."""
    rows = dataset.rows
    assert rows is not None
    verifier = rows.verifier.under(metric)
    count = len(rows.rows)
    plural = "row" if count == 1 else "rows"
    return (
        f"{dataset.name}: {count} {plural} of split {rows.split} ({rows.data_file}), scored by "
        f"{verifier.describe()}"
    )


def _manifests(path: Path) -> list[dict[str, Any]] | None:
    """The documents of a Kubernetes manifest file (each with apiVersion and kind), or None
    when the file is something else (a job.yaml)."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # the job.yaml checks say what is wrong with it
    if documents and all(
        isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in documents
    ):
        return documents
    return None


def check_manifests(path: Path) -> None:
    """Every RolloutJob of a manifest file against the RolloutJob schema; other kinds refused,
    but for Secrets (the agent env Secret `rollout render` writes beside the RolloutJob)."""
    documents = _manifests(path) or []
    problems: list[Problem] = []
    for index, document in enumerate(documents):
        where = f"{path} (document {index + 1})" if len(documents) > 1 else str(path)
        kind, version = document.get("kind"), document.get("apiVersion")
        if kind == "Secret" and version == "v1":
            continue
        if kind != RolloutJob.resource.kind:
            problems.append(
                Problem(
                    where,
                    "kind",
                    f"a Kubernetes {kind} ({version}), which rollout validate does not check: it "
                    "checks job files (job.yaml), RolloutJob manifests, task and dataset "
                    "directories, and registry.json files",
                )
            )
            continue
        if version != API_VERSION:
            problems.append(
                Problem(where, "apiVersion", f"is {version!r}; RolloutJobs are {API_VERSION}")
            )
            continue
        try:
            RolloutJob.model_validate(document)
        except ValidationError as err:
            problems.extend(problems_from_validation_error(err, where))
    if problems:
        raise InvalidInput(problems)


def _is_registry(path: Path) -> bool:
    """Whether a JSON file is a registry: by its content, or (when that says nothing, e.g. it is
    not valid JSON) by its name."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path.name == "registry.json"  # the registry checks say what is wrong with it
    if isinstance(data, dict) and "agents" in data:
        return False
    return looks_like_registry(data) or path.name == "registry.json"


def _is_rows(path: Path) -> bool:
    """Whether a JSON file is a data dataset: a list of rows (objects with a question)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(item, dict) and "tasks" not in item for item in data)
        and any(key in data[0] for key in ROW_ALIASES["question"])
    )


def _missing(path: Path) -> None:
    raise InvalidInput.one(path, None, "no such file or directory")


def _unknown_kind(path: Path) -> None:
    raise InvalidInput.one(
        path,
        None,
        "not a task directory, dataset directory, job file (.yaml, .yml, .json), RolloutJob "
        "manifest or registry.json",
    )
