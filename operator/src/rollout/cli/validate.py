"""`rollout validate PATH...`: check tasks, datasets, job files, RolloutJob manifests and
registries without running them.

What a file is, is read from it: a YAML or JSON file with `apiVersion` and `kind` is a Kubernetes
manifest (a RolloutJob is checked against the RolloutJob schema, as the cluster and the operator
check it; a Secret beside it, as `rollout render` writes, is left alone); other YAML or JSON is a
job.yaml; a JSON list is a registry. Prints `ok <path> (<kind>)` for each valid input, or each
problem with its file and field, and exits 1 when anything is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from rollout.api.dataset import find_registry_dataset, load_local_dataset
from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import JobConfig, load_job
from rollout.api.problems import problems_from_validation_error
from rollout.api.resources import API_VERSION, RolloutJob
from rollout.api.taskdir import load_task
from rollout.cli.task_warnings import task_warnings
from rollout.datasets.registry import load_registry

EPILOG = """\
examples:
  rollout validate ./tasks/hello-world        a task directory (it holds task.toml)
  rollout validate ./tasks                    a dataset: a directory of task directories
  rollout validate job.yaml registry.json     a job file and a registry of datasets
  rollout validate rolloutjob.yaml            a RolloutJob manifest (GitOps)
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
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return validate_paths(args.paths, sys.stdout)


def validate_paths(paths: list[Path], out: TextIO) -> int:
    failed = False
    for path in paths:
        kind, check = classify(path)
        try:
            check(path)
        except InvalidInput as err:
            failed = True
            for problem in err.problems:
                print(f"error {problem}", file=out)
        else:
            print(f"ok {path} ({kind})", file=out)
            for warning in task_warnings(path):
                print(warning, file=out)
    return 1 if failed else 0


def classify(path: Path) -> tuple[str, Callable[[Path], Any]]:
    """Decide what a path is from its shape, so that each kind gets its own checks."""
    if path.is_dir():
        if (path / "task.toml").exists():
            return "task", load_task
        return "dataset", load_local_dataset
    if path.name == "registry.json" or (path.suffix == ".json" and _is_json_list(path)):
        return "registry", load_registry
    if path.suffix in JOB_SUFFIXES:
        documents = _manifests(path)
        if documents:
            kinds = sorted({str(d.get("kind")) for d in documents if d.get("kind") != "Secret"})
            return ", ".join(kinds) or "Secret", check_manifests
        return "job", check_job
    if not path.exists():
        return "path", _missing
    return "file", _unknown_kind


def check_job(path: Path) -> JobConfig:
    """A job file is valid when it parses and every dataset it names can be found."""
    job = load_job(path)
    problems: list[Problem] = []
    for index, spec in enumerate(job.datasets):
        try:
            if spec.path is not None:
                load_local_dataset(spec.path)
            elif spec.registry is not None and spec.name is not None:
                registry = load_registry(spec.registry.location)
                find_registry_dataset(registry, spec.name, spec.version)
        except InvalidInput as err:
            problems.extend(Problem(str(path), f"datasets[{index}]", str(p)) for p in err.problems)
    if problems:
        raise InvalidInput(problems)
    return job


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


def _is_json_list(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), list)
    except (OSError, ValueError):
        return False


def _missing(path: Path) -> None:
    raise InvalidInput.one(path, None, "no such file or directory")


def _unknown_kind(path: Path) -> None:
    raise InvalidInput.one(
        path,
        None,
        "not a task directory, dataset directory, job file (.yaml, .yml, .json), RolloutJob "
        "manifest or registry.json",
    )
