"""The RolloutImage resource: one environment image built in the cluster, its lock and its record.

A task without `environment.docker_image` (or a job with `environment.force_build`) runs in an
image built from the task's environment/ directory. The operator names that image by a hash of
what it is built from (`rollout.api.images.image_hash`: the environment's content, the builder,
the platform) and makes one RolloutImage per hash, named after it, before the first trial that
needs it: creating a name that exists fails, so two trials, two jobs or two operators asking for
the same image make one RolloutImage, hence one build. `kubectl get rolloutimages` lists what was
built and what is building.

The spec is everything the build needs, fixed when the RolloutImage is made (so a change to the
operator's settings never changes a build under way): where the build context is in storage, the
image to push, the builder, the platform, the timeout, where the build log goes. The operator
writes only the status.

Status phases:

- `Pending`: not looked at yet;
- `Building`: the registry did not have the image; a build Pod (`status.podName`) builds it;
- `Ready`: the image is in the registry (`status.digest`), found there (reason `CacheHit`) or
  built (`Built`);
- `Failed`: the build failed (`BuildFailed`, with the end of its log in the message), ran past its
  timeout (`BuildTimeout`), could not run (`BuildNotRun`: its context could not be fetched, the
  builder's image not pulled, no node took its Pod, its Pod was lost too often), or the registry
  could not be asked (`RegistryUnavailable`). A failed image is built again for the next job
  that needs it, not for the job that saw it fail.

A RolloutImage made for `force_build` is owned by its RolloutJob and named after the job as well
(one rebuild per job); every other one belongs to no job: it is the cache's record and stays.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import AwareDatetime, Field

from rollout.api.base import ApiModel
from rollout.api.resources.common import (
    AGE_COLUMN,
    CustomResource,
    PrinterColumn,
    ResourceInfo,
    StorageSpec,
)
from rollout.api.resources.conditions import CONDITIONS_LIST_MAP, Condition
from rollout.api.rules import Digest

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

IMAGE_READY = "Ready"
"""The condition type of a RolloutImage: True once the image is in the registry, False while it
builds and when it failed (`kubectl wait --for=condition=Ready rolloutimage/...`)."""


class ImagePhase(StrEnum):
    """Where a RolloutImage is in its life (see the module docstring)."""

    PENDING = "Pending"
    BUILDING = "Building"
    READY = "Ready"
    FAILED = "Failed"


class ImageReason(StrEnum):
    """Why a RolloutImage is where it is (`status.reason`, and its `Ready` condition's)."""

    CACHE_HIT = "CacheHit"
    BUILDING = "Building"
    BUILT = "Built"
    BUILD_FAILED = "BuildFailed"
    BUILD_TIMEOUT = "BuildTimeout"
    BUILD_NOT_RUN = "BuildNotRun"
    """The build could not run: its context, the builder's image, no node, a lost Pod."""
    REGISTRY_UNAVAILABLE = "RegistryUnavailable"


class BuilderType(StrEnum):
    """The tool that builds images in the cluster."""

    BUILDKIT = "buildkit"
    """BuildKit, rootless and daemonless (`buildctl-daemonless.sh`): the default."""
    BUILDAH = "buildah"
    """Buildah (`buildah build`, then `buildah push`): runs as root in its Pod."""


class Builder(ApiModel):
    """Which builder runs, in which image."""

    type: BuilderType = Field(BuilderType.BUILDKIT, description="buildkit or buildah.")
    image: str = Field(min_length=1, description="The builder's image, with its version.")


class BuildContext(ApiModel):
    """Where the build context (the task's environment/ directory, archived) is."""

    storage: StorageSpec = Field(description="The object storage holding the archive.")
    key: str = Field(
        min_length=1, description="Its key: <prefix>/environments/<environmentHash>.tar.gz."
    )


class RolloutImageSpec(ApiModel):
    """What to build, fixed when the operator makes the RolloutImage."""

    environment_hash: Digest = Field(
        description="Content hash of the task's environment/ directory (the build context)."
    )
    image_hash: Digest = Field(
        description="Hash of everything the image depends on (environment, builder, platform): "
        "the image's tag."
    )
    image: str = Field(
        min_length=1,
        description="The reference pushed and checked for: <registry>/<repository>:<hash>.",
    )
    pull_image: str = Field(
        min_length=1,
        description="The same image as the cluster's nodes pull it (another registry address "
        "where nodes reach the registry differently, as on kind).",
    )
    context: BuildContext = Field(description="Where the build context is.")
    builder: Builder = Field(description="The builder.")
    platform: str = Field(min_length=1, description="Target platform, e.g. linux/amd64.")
    plain_http: bool = Field(
        False, description="Reach the registry over plain HTTP (a local registry without TLS)."
    )
    push_secret: str | None = Field(
        None,
        description="A kubernetes.io/dockerconfigjson Secret in this namespace with credentials "
        "to push to the registry; none: push without credentials.",
    )
    force_build: bool = Field(
        False, description="Build even when the registry has the image (a job's force_build)."
    )
    timeout_seconds: int = Field(
        gt=0, description="Seconds the build may take (build_timeout_sec x timeout_multiplier)."
    )
    log_key: str = Field(
        min_length=1,
        description="Storage key of the build log: <prefix>/jobs/<job>/builds/<hash>.log of the "
        "job that asked first.",
    )
    requested_by: str | None = Field(
        None, description="The RolloutJob (metadata.name) that asked for the image first."
    )


class RolloutImageStatus(ApiModel):
    """What became of it; written by the operator only."""

    phase: ImagePhase | None = Field(None, description="Pending, Building, Ready or Failed.")
    reason: ImageReason | None = Field(None, description="Why it is in its phase.")
    message: str | None = Field(
        None, description="What happened; the end of the build log when the build failed."
    )
    digest: str | None = Field(
        None, description="Manifest digest of the image in the registry (sha256:...)."
    )
    pod_name: str | None = Field(None, description="The build Pod.")
    attempts: int = Field(0, ge=0, description="Build Pods made so far (a lost one is replaced).")
    started_at: AwareDatetime | None = Field(None, description="When the build started.")
    completed_at: AwareDatetime | None = Field(None, description="When it became Ready or Failed.")
    duration_seconds: Seconds | None = Field(None, description="How long the build took.")
    log_uri: str | None = Field(None, description="s3:// URI of the build log.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: True once the image is in the registry, False when it failed.",
        json_schema_extra=CONDITIONS_LIST_MAP,
    )

    @property
    def finished(self) -> bool:
        return self.phase in (ImagePhase.READY, ImagePhase.FAILED)


class RolloutImage(CustomResource):
    """An environment image built in the cluster (or found in the registry): the lock that
    makes one build of it, and its record."""

    resource: ClassVar[ResourceInfo] = ResourceInfo(
        kind="RolloutImage",
        plural="rolloutimages",
        singular="rolloutimage",
        short_names=("ri",),
        printer_columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Where the build is."),
            PrinterColumn("Reason", "string", ".status.reason", "Why."),
            PrinterColumn("Image", "string", ".spec.image", "The image reference."),
            PrinterColumn("Digest", "string", ".status.digest", "The image's digest.", priority=1),
            PrinterColumn(
                "Duration", "number", ".status.durationSeconds", "Seconds the build took."
            ),
            PrinterColumn("Job", "string", ".spec.requestedBy", "Who asked first.", priority=1),
            AGE_COLUMN,
        ),
    )

    kind: Literal["RolloutImage"] = Field("RolloutImage", description="RolloutImage.")
    spec: RolloutImageSpec = Field(description="What to build.")
    status: RolloutImageStatus | None = Field(None, description="What became of it.")
