"""`rollout validate PATH...`: check tasks, datasets, job files and registries without running them.

Prints `ok <path> (<kind>)` for each valid input, or each problem with its file and field, and
exits 1 when anything is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rollout.api.dataset import find_registry_dataset, load_local_dataset, load_registry
from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import JobConfig, load_job
from rollout.api.taskdir import load_task

EPILOG = """\
examples:
  rollout validate ./tasks/hello-world        a task directory (it holds task.toml)
  rollout validate ./tasks                    a dataset: a directory of task directories
  rollout validate job.yaml registry.json     a job file and a registry of datasets
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
        "not a task directory, dataset directory, job file (.yaml, .yml, .json) or registry.json",
    )
