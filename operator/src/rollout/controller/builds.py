"""In-cluster image builds as a job sees them: the operator's build settings, which image a trial
needs, and the RolloutImage that builds it. Pure.

A trial whose task needs a build (`rollout.api.images.needs_build`) gets, when its RolloutTrial is
made, the image it will run (`<pull registry>/<repository>:<image hash>`) and the name of the
RolloutImage that builds it (`plan_image`); the job makes that RolloutImage first
(`image_manifest`), and the trial's Pod waits until it is Ready (`rollout.controller.trials`).
`rollout.controller.images` drives the RolloutImage itself: the registry look-up, the build Pod,
the outcome.

When a build cannot even start, the trial fails when it is made, with no Pod (`BuildRefused`):
the operator has no registry to push to, or the task has no Dockerfile to build (or was
published by a version without builds, whose manifest has no environment hash).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.failures import BUILD_NOT_RUN, FailureClass, failure_class
from rollout.api.images import (
    image_hash,
    image_reference,
    image_resource_name,
    needs_build,
)
from rollout.api.layout import build_log_key, environment_archive_key
from rollout.api.names import LABEL_COMPONENT, LABEL_JOB, controller_reference
from rollout.api.plan import PlannedTrial
from rollout.api.resources import (
    API_VERSION,
    BuildContext,
    Builder,
    BuilderType,
    RolloutImage,
    RolloutImageSpec,
    RolloutJob,
    StorageSpec,
)
from rollout.api.timeouts import effective_timeouts
from rollout.api.trials import label_value

DEFAULT_BUILD_PLATFORM = "linux/amd64"
DEFAULT_BUILDER_IMAGES: dict[BuilderType, str] = {
    BuilderType.BUILDKIT: "moby/buildkit:v0.23.2-rootless",
    BuilderType.BUILDAH: "quay.io/containers/buildah:v1.38.1",
}
"""Each builder's image, pinned: the builder's version is part of every image hash."""

IMAGE_COMPONENT = "image"
"""The `rollout.dev/component` label of a RolloutImage."""

_HOST = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]{1,5})?")
_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(/{_COMPONENT})*")
"""A repository name as the OCI distribution spec (v1.1) has it."""


def check_registry(value: str) -> str:
    """A registry address as an image reference starts with it: `host` or `host:port`."""
    if not _HOST.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a registry address: write host or host:port, without a scheme "
            "or a path (e.g. registry.example.com or localhost:5001)"
        )
    return value


def check_repository(value: str) -> str:
    """A repository path as OCI references allow it: lowercase components joined by '/'."""
    if not _REPOSITORY.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a repository: lowercase letters and digits, with '.', '_', '__' "
            "or dashes between them, in components joined by '/' (e.g. evals/rollout-env)"
        )
    return value


@dataclass(frozen=True)
class BuildSettings:
    """How the operator builds images (`OperatorConfig.builds`)."""

    registry: str
    repository: str
    pull_registry: str
    plain_http: bool
    push_secret: str | None
    pull_secret: str | None
    builder: Builder
    platform: str


@dataclass(frozen=True)
class ImageBuild:
    """The image a trial runs, built in the cluster, and the RolloutImage that builds it."""

    name: str
    """The RolloutImage."""
    image_hash: str
    environment_hash: str
    image: str
    """The reference pushed and looked up: `<registry>/<repository>:<image hash>`."""
    pull_image: str
    """The same, as the nodes pull it."""
    forced: bool
    """Made for the job's force_build: built whatever the registry has, once per job."""


@dataclass(frozen=True)
class BuildRefused:
    """Why a trial's image cannot be built at all: the trial fails when it is made."""

    message: str
    failure_class: FailureClass


def plan_image(
    trial: PlannedTrial,
    *,
    force_build: bool,
    settings: BuildSettings | None,
    job_uid: str,
) -> ImageBuild | BuildRefused | None:
    """The image build a new trial needs (None: its task names its image, which is pulled)."""
    task = trial.task
    if not needs_build(task.config, force_build=force_build):
        return None
    why = (
        "the job sets environment.force_build"
        if force_build and task.config.environment.docker_image
        else "its task.toml has no environment.docker_image, and its Dockerfile does more than "
        "FROM, WORKDIR, ENV and LABEL"
    )
    if settings is None:
        return BuildRefused(
            f"Task {task.name!r} needs its image built ({why}), and the operator has no image "
            "registry to build into: set the chart's images.registry (ROLLOUT_IMAGE_REGISTRY), "
            "or give the task a pre-built environment.docker_image"
            + (" and unset force_build in the job." if force_build else "."),
            BUILD_NOT_RUN,
        )
    if task.environment_hash is None:
        return BuildRefused(
            f"Task {task.name!r} needs its image built ({why}), but there is no "
            "environment/Dockerfile to build: add one, or give the task a pre-built "
            "environment.docker_image. (A dataset published by a version of rollout without "
            "in-cluster builds has no build contexts either: publish it again.)",
            failure_class(ErrorType.ENVIRONMENT_BUILD_FAILED, agent_name=trial.key.agent),
        )
    hashed = image_hash(task.environment_hash, settings.builder, settings.platform)
    return ImageBuild(
        name=image_resource_name(hashed, forced_by=job_uid if force_build else None),
        image_hash=hashed,
        environment_hash=task.environment_hash,
        image=image_reference(settings.registry, settings.repository, hashed),
        pull_image=image_reference(settings.pull_registry, settings.repository, hashed),
        forced=force_build,
    )


def build_timeout_seconds(trial: PlannedTrial, job: RolloutJob) -> int:
    """The build's timeout: the task's build_timeout_sec times the job's multiplier."""
    timeouts = effective_timeouts(trial.task.config, multiplier=job.spec.timeout_multiplier)
    return max(1, math.ceil(timeouts.build_sec))


def image_manifest(
    build: ImageBuild,
    trial: PlannedTrial,
    *,
    job: RolloutJob,
    job_uid: str,
    namespace: str,
    storage: StorageSpec,
    settings: BuildSettings,
) -> dict[str, Any]:
    """The RolloutImage to make for `build`, first asked for by `trial` of `job`.

    A forced build belongs to its job (it goes with it); any other is the cache's record and
    belongs to no job.
    """
    job_name = job.metadata.name or job.job_name
    spec = RolloutImageSpec(
        environment_hash=build.environment_hash,
        image_hash=build.image_hash,
        image=build.image,
        pull_image=build.pull_image,
        context=BuildContext(
            storage=storage, key=environment_archive_key(storage.prefix, build.environment_hash)
        ),
        builder=settings.builder,
        platform=settings.platform,
        plain_http=settings.plain_http,
        push_secret=settings.push_secret,
        force_build=build.forced,
        timeout_seconds=build_timeout_seconds(trial, job),
        log_key=build_log_key(storage.prefix, job.job_name, build.image_hash),
        requested_by=job_name,
    )
    metadata: dict[str, Any] = {
        "name": build.name,
        "namespace": namespace,
        "labels": {LABEL_COMPONENT: IMAGE_COMPONENT},
    }
    if build.forced:
        metadata["labels"][LABEL_JOB] = label_value(job_name)
        metadata["ownerReferences"] = [
            controller_reference(type(job).resource.kind, job_name, job_uid)
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": RolloutImage.resource.kind,
        "metadata": metadata,
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }
