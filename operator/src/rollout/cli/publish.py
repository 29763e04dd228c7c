"""Datasets into object storage as content-addressed bundles, and `rollout publish DATASET...`.

A bundle is one archive per task, `tasks/<content hash>.tar.gz`, one per task environment/ with a
Dockerfile, `environments/<environment hash>.tar.gz` (the context an in-cluster image build
fetches, without the task's tests and solution), and a manifest,
`datasets/<manifest digest>.json`, listing the tasks in order with their parsed task.toml and
content hash (rollout.datasets.bundle, rollout.api.manifest, rollout.api.layout). Both are named
by what they hold, so an object that exists never needs writing again:

- a manifest is uploaded last, after all of its task archives, so a manifest in storage means the
  whole bundle is there and nothing of that dataset is looked at again;
- otherwise each task and environment archive is checked (HEAD) and only missing ones are made
  and uploaded; a task (or an environment) shared by several tasks or datasets is uploaded once;
- a broken task (task_invalid, task_not_found) has no archive: the manifest lists it with its
  error, and the operator fails its trials without starting them.

All missing archives are built (into a temporary directory) before the first upload, so a task
that cannot be archived (a symlink leaving the task) stops the publish with nothing written.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from pydantic import ValidationError

from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import JobDataset, RegistrySource
from rollout.api.layout import dataset_manifest_key, environment_archive_key, task_archive_key
from rollout.api.manifest import canonical_json
from rollout.api.problems import validation_problems
from rollout.api.taskdir import Task
from rollout.cli import config
from rollout.cli.errors import ExitCode
from rollout.cli.prepare import PreparedDataset, cache_dir, prepare_dataset
from rollout.cli.threads import parallel_map
from rollout.datasets.bundle import environment_archive, rows_archive, task_archive
from rollout.storage import WritableStore

WORKERS = 8

EPILOG = """\
A DATASET is a local directory of tasks, or a dataset of a registry.json written
REGISTRY#NAME or REGISTRY#NAME@VERSION, REGISTRY being a file path or an http(s) URL.

Prints each dataset's address as YAML entries for spec.datasets of a RolloutJob written by hand.

examples:
  rollout publish ./tasks
  rollout publish ./registry.json#terminal-bench@2.0 --storage-bucket evals
  rollout publish 'https://example.com/registry.json#hello-world@head'
"""


@dataclass(frozen=True)
class PublishReport:
    """What publishing one dataset did."""

    name: str
    digest: str
    tasks: int
    archives_uploaded: int
    manifest_uploaded: bool
    broken: tuple[str, ...] = ()
    """The broken tasks, listed in the manifest with their errors (their trials will fail)."""
    environments_uploaded: int = 0
    """Build contexts (environment/ archives) uploaded for this dataset."""

    def describe(self, store: WritableStore) -> str:
        where = store.uri(dataset_manifest_key(store.prefix, self.digest))
        plural = "task" if self.tasks == 1 else "tasks"
        if self.broken:
            plural += f", {len(self.broken)} of them broken: {', '.join(self.broken)}"
        if not self.manifest_uploaded:
            return f"dataset {self.name} ({self.tasks} {plural}): already in storage at {where}"
        archives = "archive" if self.archives_uploaded == 1 else "archives"
        contexts = ""
        if self.environments_uploaded:
            many = "s" if self.environments_uploaded > 1 else ""
            contexts = f", {self.environments_uploaded} build context{many}"
        return (
            f"dataset {self.name} ({self.tasks} {plural}): uploaded {self.archives_uploaded} "
            f"task {archives}{contexts} and the manifest {where}"
        )


def publish_datasets(
    store: WritableStore,
    datasets: Sequence[PreparedDataset],
    *,
    workers: int = WORKERS,
    build_contexts: bool = True,
) -> list[PublishReport]:
    """Publish each dataset's bundle, skipping what storage already has (module docstring).

    `build_contexts=False` leaves out the build contexts: local mode builds from the task's own
    directory, and nothing in its store reads them."""
    prefix = store.prefix
    manifest_keys = [dataset_manifest_key(prefix, d.digest) for d in datasets]
    have_manifest = dict(
        zip(manifest_keys, parallel_map(store.exists, manifest_keys, workers), strict=True)
    )

    # Each archive (a task's, or an environment's: build contexts) is uploaded by the first
    # dataset that has it: key -> (dataset index, what makes the archive).
    owner: dict[str, tuple[int, Callable[[], bytes]]] = {}
    contexts: set[str] = set()
    for index, (prepared, key) in enumerate(zip(datasets, manifest_keys, strict=True)):
        if have_manifest[key]:
            continue
        rows = prepared.dataset.rows
        if rows is not None and prepared.manifest.rows is not None:
            archive_key = task_archive_key(prefix, prepared.manifest.rows.content_hash)
            owner.setdefault(archive_key, (index, partial(rows_archive, rows)))
        for task, entry in zip(prepared.dataset.tasks, prepared.manifest.tasks, strict=True):
            if entry.content_hash is None or not isinstance(task, Task):
                continue  # a broken task: listed with its error, it has no archive
            archive_key = task_archive_key(prefix, entry.content_hash)
            owner.setdefault(archive_key, (index, partial(task_archive, task)))
            if build_contexts and entry.environment_hash is not None:
                context_key = environment_archive_key(prefix, entry.environment_hash)
                owner.setdefault(context_key, (index, partial(environment_archive, task)))
                contexts.add(context_key)
    keys = list(owner)
    present = parallel_map(store.exists, keys, workers)
    missing = [k for k, there in zip(keys, present, strict=True) if not there]

    uploaded = [0] * len(datasets)
    uploaded_contexts = [0] * len(datasets)
    with tempfile.TemporaryDirectory(prefix="rollout-publish-") as scratch:
        files: dict[str, Path] = {}
        for number, archive_key in enumerate(missing):  # all made before the first upload
            path = Path(scratch) / f"{number}.tar.gz"
            path.write_bytes(owner[archive_key][1]())
            files[archive_key] = path
        parallel_map(lambda k: store.upload_file(files[k], k), missing, workers)
    for archive_key in missing:
        counts = uploaded_contexts if archive_key in contexts else uploaded
        counts[owner[archive_key][0]] += 1

    reports: list[PublishReport] = []
    written: set[str] = set()
    for index, (prepared, key) in enumerate(zip(datasets, manifest_keys, strict=True)):
        upload = not have_manifest[key] and key not in written
        if upload:
            store.put_bytes(key, canonical_json(prepared.manifest), "application/json")
            written.add(key)
        reports.append(
            PublishReport(
                name=prepared.dataset.name,
                digest=prepared.digest,
                tasks=_task_count(prepared),
                archives_uploaded=uploaded[index],
                manifest_uploaded=upload,
                broken=tuple(t.name for t in prepared.dataset.broken),
                environments_uploaded=uploaded_contexts[index],
            )
        )
    return reports


def _task_count(prepared: PreparedDataset) -> int:
    rows = prepared.manifest.rows
    return len(rows.ids) if rows is not None else len(prepared.manifest.tasks)


# --- `rollout publish` ----------------------------------------------------------------------------


def parse_dataset_argument(text: str) -> JobDataset:
    """`./tasks` -> a local dataset; `REGISTRY#NAME[@VERSION]` -> a registry dataset."""
    if "#" not in text:
        if Path(text).is_file():
            raise InvalidInput.one(
                text,
                None,
                "a registry file needs the dataset's name: REGISTRY#NAME or REGISTRY#NAME@VERSION",
            )
        return JobDataset(path=str(Path(text).absolute()))
    location, _, rest = text.rpartition("#")
    name, at, version = rest.rpartition("@")
    if not at:
        name, version = rest, ""
    if not location or not name:
        raise InvalidInput.one(text, None, "write a registry dataset as REGISTRY#NAME[@VERSION]")
    try:
        if location.startswith(("http://", "https://")):
            registry = RegistrySource(url=location)
        else:
            registry = RegistrySource(path=str(Path(location).absolute()))
        return JobDataset(registry=registry, name=name, version=version or None)
    except ValidationError as err:
        raise InvalidInput(validation_problems(err, text)) from None


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "publish",
        help="upload datasets as content-addressed bundles and print their addresses",
        description="Upload each dataset to object storage as a content-addressed bundle "
        "(skipping what is already there) and print its name and digest.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("datasets", nargs="+", metavar="DATASET")
    config.add_storage_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = config.resolve(args, environ)
    store = settings.object_store(environ)
    problems: list[Problem] = []
    prepared: list[PreparedDataset] = []
    for text in args.datasets:
        try:
            prepared.append(prepare_dataset(parse_dataset_argument(text), cache_dir(environ)))
        except InvalidInput as err:
            problems.extend(err.problems)
    if problems:
        raise InvalidInput(problems)
    reports = publish_datasets(store, prepared)
    for report in reports:
        print(report.describe(store), file=sys.stderr)
        print(f"- name: {report.name}\n  digest: {report.digest}")
    return ExitCode.OK
