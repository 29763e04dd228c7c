"""Where a trial's environment runs: `environment.type` and the job's environment settings.

One meaning per value, the same in job.yaml and in a RolloutJob (../DESIGN.md, "Environment
types"), decided here and nowhere else:

- `kubernetes` (alias `k8s`): a Pod per trial in the job's cluster. A RolloutJob's default.
- `docker`: containers of the task's image. job.yaml's default, as in the seed. On a cluster
  these containers are the trial's Pod: the CLI submits the job as `kubernetes` (and says so
  once), and the operator runs a RolloutJob of type `docker` as Pods too.
- `modal`, `daytona`, `e2b`: provider sandboxes through a bridge controller, which this version
  does not have: a job of these types is refused, saying so.
- `local`: the host sandbox of local mode (`rollout run --local`): the trial runs on this
  machine in namespaces of its own, the task's docker_image ignored. Refused on a cluster.

With `rollout run --local`, `docker` means the local Docker-compatible engine and `local` the host
sandbox; the other types are refused there.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from rollout.api.base import ApiModel, reading_a_file
from rollout.api.quantity import IntOrQuantity
from rollout.api.rules import check_bytes_override, check_cpus_override, quantity_as_written


class EnvironmentType(StrEnum):
    """Where a trial's environment runs (see the module docstring for each value's meaning)."""

    DOCKER = "docker"
    KUBERNETES = "kubernetes"
    MODAL = "modal"
    DAYTONA = "daytona"
    E2B = "e2b"
    LOCAL = "local"

    @classmethod
    def parse(cls, value: Any) -> Any:
        """`value` as written, trimmed and lowercased, with `k8s` read as `kubernetes`."""
        if isinstance(value, str):
            value = value.strip().lower()
            return ALIASES.get(value, value)
        return value

    @property
    def runs_as_pods(self) -> bool:
        """On a cluster, each trial of this type is a Pod the operator runs."""
        return self in (EnvironmentType.KUBERNETES, EnvironmentType.DOCKER)

    def on_cluster(self) -> EnvironmentType:
        """The type a job of this type has once submitted to a cluster: `docker` is `kubernetes`
        there (the same containers, as a Pod); every other type stays what it is."""
        return EnvironmentType.KUBERNETES if self.runs_as_pods else self

    def refusal_on_cluster(self) -> str | None:
        """Why a cluster cannot run a job of this type, or None when it can."""
        if self.runs_as_pods:
            return None
        if self is EnvironmentType.LOCAL:
            return (
                "'local': the host sandbox runs trials on the machine that runs `rollout run "
                "--local`, never on a cluster; use 'docker' or 'kubernetes' there"
            )
        return (
            f"{self.value!r}: on a cluster this version runs trials as Pods only ('docker' or "
            "'kubernetes'); the bridge controller for external sandboxes is not available yet"
        )

    def refusal_locally(self) -> str | None:
        """Why `rollout run --local` cannot run a job of this type, or None when it can."""
        if self in (EnvironmentType.DOCKER, EnvironmentType.LOCAL):
            return None
        if self is EnvironmentType.KUBERNETES:
            return (
                "'kubernetes': Pods need a cluster; with --local use 'docker' (a local "
                "Docker-compatible engine) or 'local' (the host sandbox)"
            )
        return (
            f"{self.value!r}: provider sandboxes run through the bridge controller, which is "
            "not available yet; with --local use 'docker' or 'local'"
        )


ALIASES: Mapping[str, EnvironmentType] = {"k8s": EnvironmentType.KUBERNETES}


class EnvironmentSettings(ApiModel):
    """`environment`: where trials run and what of each task's environment to override."""

    SEED_KEYS: ClassVar[Mapping[str, str]] = {"preserve_env": "preserveEnv"}
    """Fields job.yaml spells in camelCase, as the seed does (`preserve_env` is read too)."""

    type: EnvironmentType = Field(
        EnvironmentType.DOCKER,
        description="Environment provider: docker, kubernetes (or k8s), modal, daytona, e2b.",
    )
    force_build: bool = Field(
        False,
        strict=True,
        description="Build from environment/Dockerfile even when a task names an image.",
    )
    preserve_env: bool = Field(
        False,
        strict=True,
        description="Keep each trial's environment (its Pod) after the trial ends.",
    )
    override_cpus: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.cpus."
    )
    override_memory: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.memory (bare number: MiB)."
    )
    override_storage: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.storage (bare number: MiB)."
    )

    @model_validator(mode="before")
    @classmethod
    def _seed_spelling(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "preserveEnv" in data and "preserve_env" not in data:
            data = {("preserve_env" if k == "preserveEnv" else k): v for k, v in data.items()}
        return data

    @model_serializer(mode="wrap")
    def _seed_keys(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if info.by_alias:
            return data
        return {self.SEED_KEYS.get(k, k): v for k, v in data.items()}

    @field_validator("type", mode="before")
    @classmethod
    def _normalise_type(cls, value: Any) -> Any:
        return EnvironmentType.parse(value)

    @field_validator("override_cpus", "override_memory", "override_storage", mode="before")
    @classmethod
    def _quantity_as_written(cls, value: Any, info: ValidationInfo) -> Any:
        if reading_a_file(info):
            return quantity_as_written(value)
        # A resource: the apiserver takes only an integer or a string here, and so do we.
        if isinstance(value, bool | float):
            raise ValueError(f"expected an integer or a quantity string, got {value}")
        return value

    @field_validator("override_cpus")
    @classmethod
    def _check_cpus(cls, value: int | str | None) -> int | str | None:
        return check_cpus_override(value)

    @field_validator("override_memory", "override_storage")
    @classmethod
    def _check_bytes(cls, value: int | str | None) -> int | str | None:
        return check_bytes_override(value)

    def on_cluster(self) -> EnvironmentSettings:
        """These settings as a cluster runs them (`EnvironmentType.on_cluster`)."""
        return self.model_copy(update={"type": self.type.on_cluster()})


class ClusterEnvironmentSettings(EnvironmentSettings):
    """A RolloutJob's `environment`: the same settings, with `kubernetes` as the default type."""

    type: EnvironmentType = Field(
        EnvironmentType.KUBERNETES,
        description="kubernetes runs each trial in a Pod, and so does docker (the same "
        "containers; the rollout CLI submits job.yaml's docker as kubernetes). modal, daytona "
        "and e2b are kept for a bridge controller that does not exist yet: a job of those types "
        "is refused (condition Valid=False), and so is local (the host sandbox of `rollout run "
        "--local`, never a cluster's).",
    )
