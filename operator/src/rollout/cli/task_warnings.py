"""`rollout validate`'s warnings about task.toml keys a trial cannot honour
(`rollout.api.task_support`): one line per key, naming the task's task.toml, the key and what
happens instead."""

from __future__ import annotations

from pathlib import Path

from rollout.api.dataset import load_local_dataset
from rollout.api.errors import InvalidInput
from rollout.api.job import load_job
from rollout.api.task_support import unhonoured_keys
from rollout.api.taskdir import Task, load_task

JOB_SUFFIXES = (".yaml", ".yml", ".json")


def task_warnings(path: Path) -> list[str]:
    """The warnings for the tasks of a valid task directory, dataset directory or job file
    (its local datasets); none for anything else."""
    try:
        tasks = _tasks(path)
    except InvalidInput:
        return []  # validate reports what is wrong with it
    return [
        f"warning {task.path / 'task.toml'}: {unhonoured}"
        for task in tasks
        for unhonoured in unhonoured_keys(task.config)
    ]


def _tasks(path: Path) -> list[Task]:
    if path.is_dir():
        if (path / "task.toml").exists():  # as `validate.classify` tells them apart
            return [load_task(path)]
        return load_local_dataset(path).tasks
    if path.suffix in JOB_SUFFIXES and path.is_file():
        try:
            job = load_job(path)
        except InvalidInput:
            return []  # a manifest or a registry, not a job file
        return [
            task
            for spec in job.datasets
            if spec.path is not None
            for task in load_local_dataset(spec.path).tasks
        ]
    return []
