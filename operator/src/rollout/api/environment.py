"""Where a trial's environment runs: `environment.type` and the job's environment settings.

One meaning per value, the same in job.yaml and in a RolloutJob (../DESIGN.md, "Environment
types"), decided here and nowhere else:

- `kubernetes` (alias `k8s`): a Pod per trial in the job's cluster. A RolloutJob's default.
- `docker`: containers of the task's image. job.yaml's default, as in the seed. On a cluster
  these containers are the trial's Pod: the CLI submits the job as `kubernetes` (and says so
  once), and the operator runs a RolloutJob of type `docker` as Pods too.
  With `docker_host` set, a remote Docker engine instead: on a cluster, the bridge controller
  (`rollout-bridge`) runs each trial there, and the type stays `docker`.
- `modal`, `daytona`, `e2b`: provider sandboxes through the bridge controller, each trial's in
  the provider's cloud.
- `local`: the host sandbox of local mode (`rollout run --local`): the trial runs on this
  machine in namespaces of its own, the task's docker_image ignored. Refused on a cluster.

With `rollout run --local`, `docker` means the local Docker-compatible engine and `local` the host
sandbox; the other types are refused there.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar

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
from rollout.api.rules import (
    check_bytes_override,
    check_cpus_override,
    matching_pattern,
    quantity_as_written,
)


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
        """Why a cluster cannot run a job of this type, or None when it can (as Pods, or as a
        provider's sandboxes through the bridge controller)."""
        if self is EnvironmentType.LOCAL:
            return (
                "'local': the host sandbox runs trials on the machine that runs `rollout run "
                "--local`, never on a cluster; use 'docker' or 'kubernetes' there"
            )
        return None

    @property
    def runs_on_bridge(self) -> bool:
        """A RolloutTrial of this type is the bridge controller's, not a Pod. A trial's type is
        its job's as the cluster runs it (`EnvironmentSettings.cluster_type`): `docker` only
        with a remote engine (`docker_host`), since without one it is `kubernetes` there."""
        return self not in (EnvironmentType.KUBERNETES, EnvironmentType.LOCAL)

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
            f"{self.value!r}: provider sandboxes run on a cluster, through the bridge "
            "controller; with --local use 'docker' or 'local'"
        )


ALIASES: Mapping[str, EnvironmentType] = {"k8s": EnvironmentType.KUBERNETES}

BRIDGE_ROWS = (
    "dataset {name} is a data dataset, whose rows run as Pods only: the bridge controller does "
    "not run shards of data rows yet (leave {field} out)"
)
"""Why a job on a remote Docker engine cannot have a data dataset (the CLI and the operator)."""

CLOUD_TYPES = (EnvironmentType.MODAL, EnvironmentType.DAYTONA, EnvironmentType.E2B)
"""The types whose sandboxes are a cloud provider's, signed in with credentials."""

# A DNS subdomain, as Kubernetes names Secrets (a name's pattern, not a password: noqa S105).
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"  # noqa: S105
SecretName = Annotated[
    str,
    matching_pattern(
        SECRET_NAME_PATTERN, "a Secret's name (a DNS subdomain: lowercase, digits, '-', '.')"
    ),
    Field(json_schema_extra={"pattern": SECRET_NAME_PATTERN}, max_length=253),
]

DOCKER_HOST_PATTERN = r"^(tcp|ssh)://[^\s/@]+(@[^\s/@]+)?(:[0-9]+)?/?$"
DockerHost = Annotated[
    str,
    matching_pattern(DOCKER_HOST_PATTERN, "tcp://HOST:PORT or ssh://USER@HOST[:PORT]"),
    Field(json_schema_extra={"pattern": DOCKER_HOST_PATTERN}, max_length=253),
]
"""A remote Docker engine's address as docker-py takes it: the Engine API over TCP (TLS from
the bridge's settings) or over SSH. A unix socket would be the bridge Pod's own: not remote."""


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
    docker_host: DockerHost | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="type docker only: the address of a remote Docker engine (tcp://HOST:PORT, "
        "with TLS from the bridge's settings, or ssh://USER@HOST) where the bridge controller "
        "runs each trial's container, instead of a Pod.",
    )
    provider_secret: SecretName | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="modal, daytona, e2b only: a Secret in the job's namespace whose keys are "
        "the provider's credentials (MODAL_TOKEN_ID, DAYTONA_API_KEY, E2B_API_KEY, ...), over "
        "the bridge's own: the job's trials run on that account.",
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

    @model_validator(mode="after")
    def _docker_host_for_docker(self) -> EnvironmentSettings:
        if self.docker_host is not None and self.type is not EnvironmentType.DOCKER:
            raise ValueError(
                f"docker_host is a remote Docker engine: it applies to type 'docker' only, "
                f"not {self.type.value!r}"
            )
        if self.provider_secret is not None and self.type not in CLOUD_TYPES:
            names = ", ".join(repr(t.value) for t in CLOUD_TYPES)
            raise ValueError(
                f"provider_secret holds a cloud provider's credentials: it applies to types "
                f"{names} only, not {self.type.value!r}"
            )
        return self

    @property
    def cluster_type(self) -> EnvironmentType:
        """The type a cluster runs these settings as: `docker` is `kubernetes` there (the same
        containers, as a Pod), unless `docker_host` names a remote engine (the bridge's)."""
        if self.docker_host is not None:
            return self.type
        return self.type.on_cluster()

    @property
    def runs_on_bridge(self) -> bool:
        """On a cluster, the bridge controller runs this job's trials."""
        return self.cluster_type.runs_on_bridge

    def on_cluster(self) -> EnvironmentSettings:
        """These settings as a cluster runs them (`cluster_type`)."""
        return self.model_copy(update={"type": self.cluster_type})

    def refusal_on_cluster(self) -> str | None:
        """Why a cluster cannot run a job with these settings, or None when it can (the
        remote Docker engine of `docker_host` is the bridge's)."""
        if self.docker_host is not None:
            return None
        return self.type.refusal_on_cluster()

    def refusal_locally(self) -> str | None:
        """Why `rollout run --local` cannot run a job with these settings, or None."""
        if self.docker_host is not None:
            return (
                "a remote Docker engine, which a cluster's bridge controller runs trials on; "
                "--local runs containers on this machine's engine (DOCKER_HOST): leave "
                "docker_host out"
            )
        return self.type.refusal_locally()

    def refused_field(self, *, local: bool) -> str:
        """The job.yaml field a refusal (`refusal_locally`, `refusal_on_cluster`) is about."""
        return "environment.docker_host" if local and self.docker_host else "environment.type"


class ClusterEnvironmentSettings(EnvironmentSettings):
    """A RolloutJob's `environment`: the same settings, with `kubernetes` as the default type."""

    type: EnvironmentType = Field(
        EnvironmentType.KUBERNETES,
        description="kubernetes runs each trial in a Pod, and so does docker (the same "
        "containers; the rollout CLI submits job.yaml's docker as kubernetes), unless dockerHost "
        "names a remote Docker engine: the bridge controller (rollout-bridge) runs the trials "
        "there, as it runs those of modal, daytona and e2b in their sandboxes. local (the host "
        "sandbox of `rollout run --local`, never a cluster's) is refused (Valid=False).",
    )
