"""Which tasks need an image build, and what is said about them while this version has no
builder.

A task runs in its `environment.docker_image` as it is; without one, or when the job sets
`environment.force_build`, its environment/Dockerfile would have to be built, which this version
cannot do. The operator fails such a task's trials with `environment_build_failed` and this
message; `rollout validate`, `rollout run` and `rollout render` warn with the same words before
the job starts.

A built image is named by what it is built from: `environment_image_tag` is the content hash of
the task's environment/ directory (`rollout.api.taskdir.tree_hash`: relative paths, the
executable bit, symlink targets and file bytes, in a fixed order; never timestamps or where the
directory is), so the same Dockerfile and files give the same tag on every machine and a build
is skipped wherever that tag is already present. Local mode's engine builds under it
(`rollout.local.engine_images`); an in-cluster builder is to reuse it.
"""

from __future__ import annotations

from pathlib import Path

from rollout.api.task import TaskConfig
from rollout.api.taskdir import tree_hash

ENVIRONMENT_IMAGE_REPOSITORY = "rollout-env"
"""The repository (image name) built environments are tagged in, their tag being the hash."""

BUILD_UNSUPPORTED = (
    "In-cluster image builds are not supported yet: task {task!r} {why}. Set "
    "environment.docker_image in the task's task.toml to a pre-built image{and_force}."
)


def image_build_message(task_name: str, task: TaskConfig, *, force_build: bool) -> str | None:
    """The trial's environment_build_failed message when its image would need a build."""
    if task.environment.docker_image and not force_build:
        return None
    if force_build:
        why = "needs a build because the job sets environment.force_build"
        and_force = ", and unset force_build in the job"
    else:
        why = (
            "has no environment.docker_image and its environment/Dockerfile needs a build (one "
            "of only FROM, WORKDIR, ENV and LABEL would run its FROM image as it is)"
        )
        and_force = ""
    return BUILD_UNSUPPORTED.format(task=task_name, why=why, and_force=and_force)


def environment_image_tag(
    environment_dir: str | Path, repository: str = ENVIRONMENT_IMAGE_REPOSITORY
) -> str:
    """`<repository>:<sha256 hex of environment_dir's content>`, the image built from it.

    A pure function of the directory's content: the same on every machine and run, different as
    soon as a file's bytes, name or executable bit changes.
    """
    return f"{repository}:{tree_hash(environment_dir)}"
