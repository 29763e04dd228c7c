"""Where a task's environment image comes from, and what names a built one.

A task's image is, in this order (seed 000, seed 004):

- **pulled**: task.toml's `environment.docker_image`, used as it is;
- **lifted**: no docker_image, and an environment/Dockerfile of only FROM, WORKDIR, ENV and
  LABEL (`rollout.api.dockerfile`): its FROM image runs with those settings, no build
  (`rollout.api.taskdir` lifts them into the task's config when it loads the task);
- **built**: otherwise, or whenever the job sets `environment.force_build` (then even a task
  with a docker_image is built from its Dockerfile).

A built image is named by what it is built from, so that the same files give the same name on
every machine and a build is skipped wherever that name is already present:

- locally, `environment_image_tag`: `rollout-env:<content hash of environment/>` in the local
  engine (`rollout.local.engine_images`);
- in a cluster, `image_hash`: the environment's content hash together with what else changes the
  result (the builder and its image, the target platform), the tag of
  `<registry>/<repository>:<hash>` in the operator's registry, and the name of the RolloutImage
  that records it (`image_resource_name`).
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from pathlib import Path

from rollout.api.resources import Builder
from rollout.api.task import TaskConfig
from rollout.api.taskdir import tree_hash

ENVIRONMENT_IMAGE_REPOSITORY = "rollout-env"
"""The repository (image name) built environments are tagged in, their tag being the hash."""

IMAGE_NAME_PREFIX = "env-"
"""RolloutImage names: `env-<hash>`; label values and Pod names made from them stay short."""
_NAME_HASH_CHARS = 51
"""Hex characters of the hash in a RolloutImage's name (204 bits): `env-` and 51 make 55
characters, so `<name>-build-<n>` (n < 10) is still a valid Pod host name (63 at most)."""
_FORCED_HASH_CHARS = 42
"""`env-`, 42, `-` and 8 of the job's uid: 55 characters as well."""
_JOB_UID_CHARS = 8

_HASH_VERSION = 1
"""Bump when what `image_hash` covers changes: every image is then built again."""


class ImageSource(StrEnum):
    """Where a task's image comes from (see the module docstring)."""

    PULL = "pull"
    LIFT = "lift"
    BUILD = "build"


def needs_build(task: TaskConfig, *, force_build: bool) -> bool:
    """Whether the task's image must be built from its environment/Dockerfile."""
    return force_build or not task.environment.docker_image


def image_source(task: TaskConfig, *, lifted: bool, force_build: bool) -> ImageSource:
    """Where the task's image comes from; `lifted`: its docker_image came from its Dockerfile."""
    if needs_build(task, force_build=force_build):
        return ImageSource.BUILD
    return ImageSource.LIFT if lifted else ImageSource.PULL


def image_hash(environment_hash: str, builder: Builder, platform: str) -> str:
    """sha256 hex of what a built image depends on: the environment's content (its files'
    names, executable bits and bytes: `rollout.api.taskdir.tree_hash`), the builder (its kind
    and its image, which pins its version) and the target platform."""
    covered = {
        "version": _HASH_VERSION,
        "environment": environment_hash,
        "builder": {"type": builder.type.value, "image": builder.image},
        "platform": platform,
    }
    canonical = json.dumps(covered, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def image_resource_name(hash_: str, *, forced_by: str | None = None) -> str:
    """The RolloutImage of an image hash: `env-<hash>`; for a job's force_build, also named
    after the job (`forced_by`: its uid), so that each such job builds once."""
    if forced_by is None:
        return f"{IMAGE_NAME_PREFIX}{hash_[:_NAME_HASH_CHARS]}"
    return f"{IMAGE_NAME_PREFIX}{hash_[:_FORCED_HASH_CHARS]}-{forced_by[:_JOB_UID_CHARS]}"


def image_reference(registry: str, repository: str, tag: str) -> str:
    """`<registry>/<repository>:<tag>`."""
    return f"{registry.rstrip('/')}/{repository.strip('/')}:{tag}"


def pinned_reference(reference: str, digest: str) -> str:
    """`reference` (`<registry>/<repository>:<tag>`) pinned to `digest`:
    `<registry>/<repository>@<digest>`, which names exactly the image that was built."""
    name = reference.rsplit("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:  # a tag, not a registry's port
        name = name[:colon]
    return f"{name}@{digest}"


def environment_image_tag(
    environment_dir: str | Path, repository: str = ENVIRONMENT_IMAGE_REPOSITORY
) -> str:
    """`<repository>:<sha256 hex of environment_dir's content>`, the image local mode builds
    from it.

    A pure function of the directory's content: the same on every machine and run, different as
    soon as a file's bytes, name or executable bit changes.
    """
    return f"{repository}:{tree_hash(environment_dir)}"
