"""The operator's settings: environment variables set by the Helm chart, or command-line flags.

The variables are the contract with the Helm chart (its deployment template sets them, and
tests/unit/test_chart.py feeds the rendered environment to `OperatorConfig.from_env`); the README's
"Chart values" section lists them; `options.py` declares them with their flags. Every variable
has a flag of the same meaning; a flag that is given wins over its variable (`rollout.settings`).
Empty values count as unset, except ROLLOUT_PEERING, where "" means "no peering" (standalone).

Bad values raise `InvalidInput`, one `Problem` per bad value, each naming the variable (file
"environment") or the flag (file "command line") at fault.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rollout.api.images import ENVIRONMENT_IMAGE_REPOSITORY
from rollout.api.job_settings import LogLevel
from rollout.api.resources import Builder, BuilderType, PodOverrides, StorageSpec
from rollout.api.trials import is_dns_label
from rollout.controller.builds import (
    DEFAULT_BUILD_PLATFORM,
    DEFAULT_BUILDER_IMAGES,
    BuildSettings,
    check_registry,
    check_repository,
)
from rollout.controller.options import (
    DEFAULT_PEERING,
    PULL_POLICIES,
    SETTINGS,
    PullPolicy,
)
from rollout.controller.prices import UnitPrices
from rollout.settings import COMMAND_LINE, ENVIRONMENT, RUNNER_IMAGE, Resolved, resolve
from rollout.storage import StorageCredentials
from rollout.storage.settings import (
    BUCKET,
    ENDPOINT,
    PREFIX,
    REGION,
    read_credentials,
    read_location,
)

__all__ = [
    "COMMAND_LINE",
    "DEFAULT_PEERING",
    "ENVIRONMENT",
    "PULL_POLICIES",
    "SETTINGS",
    "OperatorConfig",
    "PullPolicy",
    "add_arguments",
    "from_args",
]

STRAY_WITHOUT_BUCKET = (PREFIX, ENDPOINT, REGION)
"""Storage settings that make no sense without a bucket (the chart always sets the path style)."""


class OperatorConfig(BaseModel):
    """Everything the operator process is configured with (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty: the whole cluster."
    )
    runner_image: str = Field(
        min_length=1, description="Runner image for RolloutJobs without spec.runnerImage."
    )
    runner_image_pull_policy: PullPolicy = Field(
        "IfNotPresent", description="imagePullPolicy of the runner container."
    )
    rows_image: str | None = Field(
        None,
        min_length=1,
        description="The environment image of data rows whose dataset declares no "
        "docker_image; None: the runner's image (it has sh, and it is on the node already).",
    )
    storage: StorageSpec | None = Field(
        None,
        description="The spec.storage of RolloutJobs without one; None: every RolloutJob must "
        "name its own. It names no credentials Secret: trial Pods of jobs that name none mount "
        "`storage_credentials_secret`.",
    )
    storage_credentials: StorageCredentials | None = Field(
        None,
        description="The operator's own credentials for storage, read with the default "
        "storage; None: boto3's default chain (IRSA, instance profile).",
    )
    storage_credentials_secret: str | None = Field(
        None, description="Secret that trial Pods mount for storage credentials."
    )
    trial_service_account: str | None = Field(
        None, description="serviceAccountName of trial Pods; None: the namespace's default."
    )
    peering_name: str | None = Field(
        DEFAULT_PEERING, description="kopf peering name; None: standalone, no peering."
    )
    clusterwide_peering: bool = Field(
        True,
        description="ClusterKopfPeering (whole cluster) rather than namespaced KopfPeering; "
        "derived from `namespaces` when not given.",
    )
    metrics_port: int = Field(9090, ge=1, le=65535, description="Prometheus metrics port.")
    health_port: int = Field(8080, ge=1, le=65535, description="Port of /healthz.")
    worker_limit: int = Field(
        200,
        ge=1,
        description=(
            "kopf's worker limit: objects handled at once. Each job and RolloutImage holds a "
            "worker while its events are processed (trials and Pods are the operator's own "
            "watches, `watches`)."
        ),
    )
    log_level: LogLevel = Field(LogLevel.INFO, description="debug, info, warning or error.")
    default_pod_overrides: PodOverrides | None = Field(
        None, description="Trial Pod overrides where a RolloutJob's spec.pod sets nothing."
    )
    unschedulable_grace_sec: float = Field(
        600.0,
        ge=0,
        allow_inf_nan=False,
        description="How long a trial Pod may stay Unschedulable before the trial fails.",
    )
    image_pull_grace_sec: float = Field(
        120.0,
        ge=0,
        allow_inf_nan=False,
        description="How long an image may fail to pull (ErrImagePull, ImagePullBackOff) before "
        "the trial fails; InvalidImageName fails at once.",
    )
    running_status_after_sec: float = Field(
        10.0,
        ge=0,
        allow_inf_nan=False,
        description="How long a trial's runner runs before its RolloutTrial's status says "
        "Running: a trial that ends sooner goes from Pending to its outcome, one API write "
        "fewer (the job's status counts it as running meanwhile, from its Pod); 0: at once.",
    )
    status_interval_sec: float = Field(
        2.0,
        ge=0,
        allow_inf_nan=False,
        description="Least seconds between two status patches of one RolloutJob.",
    )
    pod_termination_grace_sec: int = Field(
        10, ge=0, description="terminationGracePeriodSeconds of trial Pods."
    )
    unit_prices: UnitPrices | None = Field(
        None,
        description="The price of one unit of each resource for one hour, which gives each "
        "trial a cost (`rollout.controller.cost`); None: no prices, every cost is null.",
    )

    image_registry: str | None = Field(
        None,
        description="Registry (host[:port]) built images are pushed to and looked up in; "
        "None: no in-cluster builds.",
    )
    image_repository: str = Field(
        ENVIRONMENT_IMAGE_REPOSITORY, description="Repository of built images in the registry."
    )
    image_pull_registry: str | None = Field(
        None, description="The registry's address as the nodes pull from it; None: the same."
    )
    image_registry_plain_http: bool = Field(
        False, description="Reach the registry over plain HTTP (no TLS)."
    )
    image_push_secret: str | None = Field(
        None, description="dockerconfigjson Secret build Pods push with (in each namespace)."
    )
    image_pull_secret: str | None = Field(
        None, description="Secret trial Pods of built images pull with (in each namespace)."
    )
    image_registry_config: str | None = Field(
        None, description="The operator's own .dockerconfigjson file for registry look-ups."
    )
    builder: BuilderType = Field(BuilderType.BUILDKIT, description="buildkit or buildah.")
    builder_image: str | None = Field(
        None, description="The builder's image; None: the pinned default of the builder."
    )
    build_platform: str = Field(
        DEFAULT_BUILD_PLATFORM, min_length=1, description="Platform images are built for."
    )
    build_poll_sec: float = Field(
        2.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between two looks at a running build Pod.",
    )

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        # The operator's own watches go to /namespaces/<name>/...: a pattern is no name.
        for name in value:
            if not is_dns_label(name):
                raise ValueError(
                    f"{name!r} is not a namespace name (lower-case letters, digits and '-', "
                    "at most 63): name each namespace to watch, patterns are not supported"
                )
        return value

    @field_validator("image_registry", "image_pull_registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        return check_registry(value) if value is not None else None

    @field_validator("image_repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        return check_repository(value)

    @property
    def builds(self) -> BuildSettings | None:
        """How images are built in the cluster; None when no registry is configured."""
        if self.image_registry is None:
            return None
        return BuildSettings(
            registry=self.image_registry,
            repository=self.image_repository,
            pull_registry=self.image_pull_registry or self.image_registry,
            plain_http=self.image_registry_plain_http,
            push_secret=self.image_push_secret,
            pull_secret=self.image_pull_secret,
            builder=Builder(
                type=self.builder,
                image=self.builder_image or DEFAULT_BUILDER_IMAGES[self.builder],
            ),
            platform=self.build_platform,
        )

    @model_validator(mode="before")
    @classmethod
    def _derive_clusterwide_peering(cls, data: Any) -> Any:
        # Watching the whole cluster goes with a cluster-wide peering object, unless told.
        if isinstance(data, dict) and data.get("clusterwide_peering") is None:
            # Absent or None: derived. The field's default only satisfies type checkers.
            data = {**data, "clusterwide_peering": not data.get("namespaces")}
        return data

    @property
    def clusterwide(self) -> bool:
        """Whether the operator watches the whole cluster."""
        return not self.namespaces

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorConfig:
        """Read the settings from ROLLOUT_* variables (the chart's contract).

        Raises InvalidInput with one Problem per bad or missing variable, each naming it.
        """
        return _read(os.environ if environ is None else environ, None)


# --- reading --------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a flag for every setting; each flag defaults to None, i.e. "use the variable"."""
    for setting in SETTINGS:
        setting.add_flag(parser, show_variable=True)


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> OperatorConfig:
    """The settings from parsed flags (see `add_arguments`) over the variables of `environ`.

    A problem with a value that came from a flag names the flag (file "command line").
    """
    return _read(os.environ if environ is None else environ, args)


def _read(environ: Mapping[str, str], args: argparse.Namespace | None) -> OperatorConfig:
    """Parse every setting; report every problem at once, each where its value was written."""
    resolved = resolve(SETTINGS, environ, args)
    values = {name: value for name, value in resolved.values.items() if name in _OWN_FIELDS}
    if RUNNER_IMAGE.name not in values:
        resolved.report(RUNNER_IMAGE.name, "is required: the runner image of trial Pods")
    values["storage"], values["storage_credentials"] = _default_storage(resolved, environ)
    # Range checks too, for the values that parsed, so that one run reports every problem.
    config: OperatorConfig | None = None
    try:
        config = OperatorConfig(**values)
    except ValidationError as err:
        resolved.report_invalid(err, skip_missing=True)  # the one required setting: see above
    resolved.raise_problems()
    assert config is not None  # no problem means it validated
    return config


_OWN_FIELDS = frozenset(OperatorConfig.model_fields) - {"storage", "storage_credentials"}


def _default_storage(
    resolved: Resolved, environ: Mapping[str, str]
) -> tuple[StorageSpec | None, StorageCredentials | None]:
    """The default storage and the operator's credentials, or None for both when no bucket is
    set (RolloutJobs then name their own)."""
    if BUCKET.name in resolved.values:
        return read_location(resolved, StorageSpec), read_credentials(resolved, environ)
    if stray := [s.variable for s in STRAY_WITHOUT_BUCKET if resolved.given(s.name)]:
        resolved.report(
            BUCKET.name, f"is required when {', '.join(stray)} is set: the default bucket"
        )
    return None, None
