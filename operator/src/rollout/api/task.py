"""The task.toml model: the seed's fields and defaults, plus the newer Harbor keys real tasks use.

Unknown keys anywhere are kept (`OpenFileModel`), never fatal: Harbor adds keys between versions
and a task written for a newer Harbor must still run here.

Resources are normalised to canonical Kubernetes quantities while loading, so that
`environment.cpus`, `environment.memory` and `environment.storage` are always the effective values
the environment container gets:

- `cpus = 1` becomes `"1"`, `cpus = 0.5` becomes `"500m"`;
- `memory = "2048"` (a bare number means MiB) becomes `"2048Mi"`, `memory = "2G"` stays `"2G"`;
- Harbor's `memory_mb`/`storage_mb` (whole MiB) win over the seed's default `memory`/`storage`.
  When a task sets both `memory` and `memory_mb` they must agree, otherwise the task is invalid
  with a message naming both fields: silently preferring one would hide the author's mistake.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator

from rollout.api.base import OpenFileModel
from rollout.api.errors import ErrorType, InvalidInput, Problem
from rollout.api.network import NETWORK_MODE_ALIASES, NetworkMode, TrialEgress
from rollout.api.problems import problems_from_validation_error
from rollout.api.quantity import (
    cpu_millicores,
    mib_quantity,
    normalize_cpus,
    normalize_memory,
    quantity_bytes,
)


def _not_bool(value: Any) -> Any:
    # TOML `true` would otherwise pass as the number 1.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


Seconds = Annotated[float, BeforeValidator(_not_bool), Field(gt=0, allow_inf_nan=False)]
PositiveMiB = Annotated[int, BeforeValidator(_not_bool), Field(gt=0)]
EnvVars = dict[str, str]


class TaskSection(OpenFileModel):
    """Harbor's `[task]` table (schema_version >= 1.1): identity of the task as published."""

    name: str | None = Field(None, description="Published name, e.g. 'harbor/hello-world'.")
    description: str | None = Field(None, description="One-line description of the task.")
    version: str | None = Field(None, description="Version of the task itself.")
    authors: list[Any] = Field(default_factory=list, description="Authors (names or tables).")
    keywords: list[str] = Field(default_factory=list, description="Search keywords.")


class VerifierConfig(OpenFileModel):
    """`[verifier]`: how tests/test.sh is run."""

    timeout_sec: Seconds = Field(600.0, description="Timeout in seconds for the verifier.")
    user: str | int | None = Field(None, description="User the verifier runs as (default: image).")
    env: EnvVars = Field(default_factory=dict, description="Environment for tests/test.sh.")


class AgentConfig(OpenFileModel):
    """`[agent]`: limits and user for agent install and execution."""

    install_timeout_sec: Seconds = Field(
        300.0, description="Timeout in seconds for agent installation."
    )
    timeout_sec: Seconds = Field(600.0, description="Timeout in seconds for agent execution.")
    user: str | int | None = Field(None, description="User the agent runs as (default: image).")


class SolutionConfig(OpenFileModel):
    """`[solution]`: environment for the oracle's solution/solve.sh."""

    env: EnvVars = Field(default_factory=dict, description="Environment for solution/solve.sh.")


class EnvironmentConfig(OpenFileModel):
    """`[environment]`: image and resources of the environment container."""

    build_timeout_sec: Seconds = Field(
        600.0, description="Timeout in seconds for environment build."
    )
    docker_image: str | None = Field(
        None, description="Pre-built image; when set it is used instead of environment/Dockerfile."
    )
    cpus: str = Field("1", description="CPUs as a Kubernetes quantity ('1', '500m').")
    memory: str = Field("2G", description="Memory as a Kubernetes quantity; a bare number is MiB.")
    storage: str = Field("10G", description="Storage as a Kubernetes quantity; bare number is MiB.")
    memory_mb: PositiveMiB | None = Field(None, description="Memory in MiB (Harbor); wins.")
    storage_mb: PositiveMiB | None = Field(None, description="Storage in MiB (Harbor); wins.")
    gpus: Annotated[int, BeforeValidator(_not_bool), Field(ge=0)] = Field(
        0, description="Number of GPUs."
    )
    workdir: str | None = Field(None, description="Working directory for agent and verifier.")
    env: EnvVars = Field(default_factory=dict, description="Environment of the container.")
    mcp_servers: list[dict[str, Any]] = Field(
        default_factory=list, description="MCP servers offered to the agent, kept as written."
    )
    allow_internet: bool = Field(True, description="False: no network but what the trial needs.")
    network_mode: NetworkMode | None = Field(
        None, description="public, no-network ('none') or allowlist; wins over allow_internet."
    )
    allowed_hosts: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Hosts a no-network or allowlist task may reach."
    )

    @field_validator("network_mode", mode="before")
    @classmethod
    def _network_mode_alias(cls, value: Any) -> Any:
        return NETWORK_MODE_ALIASES.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _network_keys_agree(self) -> EnvironmentConfig:
        if self.network_mode is None:
            return self
        public = self.network_mode == NetworkMode.PUBLIC
        if "allow_internet" not in self.model_fields_set:
            # Made to agree, so that the task reads back the same from its manifest.
            self.allow_internet = public
        elif public != self.allow_internet:
            raise ValueError(
                f"environment.network_mode = {self.network_mode.value!r} and "
                f"environment.allow_internet = {str(self.allow_internet).lower()} disagree; "
                "set only one of them"
            )
        return self

    @property
    def egress(self) -> TrialEgress:
        """The network access the task's trials get (`rollout.api.network`)."""
        mode = self.network_mode
        if mode is None:
            mode = NetworkMode.PUBLIC if self.allow_internet else NetworkMode.NO_NETWORK
        if mode == NetworkMode.PUBLIC:
            return TrialEgress()
        return TrialEgress(restricted=True, allowed_hosts=self.allowed_hosts)

    @field_validator("cpus", mode="before")
    @classmethod
    def _canonical_cpus(cls, value: Any) -> str:
        return normalize_cpus(value)

    @field_validator("memory", "storage", mode="before")
    @classmethod
    def _canonical_bytes(cls, value: Any) -> str:
        return normalize_memory(value)

    @model_validator(mode="after")
    def _reconcile_mib_fields(self) -> EnvironmentConfig:
        for name in ("memory", "storage"):
            mib: int | None = getattr(self, f"{name}_mb")
            if mib is None:
                continue
            written: str = getattr(self, name)
            if name in self.model_fields_set and quantity_bytes(written) != mib * 2**20:
                raise ValueError(
                    f"environment.{name} = {written!r} and environment.{name}_mb = {mib} "
                    f"disagree; set only one of them"
                )
            setattr(self, name, mib_quantity(mib))
        return self

    @property
    def cpu_millicores(self) -> int:
        """Effective CPUs in millicores."""
        return cpu_millicores(self.cpus)

    @property
    def memory_bytes(self) -> int:
        """Effective memory in bytes ("2G" is 2*10**9, memory_mb = 2048 is 2048 MiB)."""
        return quantity_bytes(self.memory)

    @property
    def storage_bytes(self) -> int:
        """Effective storage in bytes."""
        return quantity_bytes(self.storage)


class TaskConfig(OpenFileModel):
    """A task's task.toml. Every field has the seed's default, so an empty file is valid."""

    version: str = Field("1.0", description="Version of the task configuration format.")
    schema_version: str | None = Field(None, description="Harbor's task.toml schema version.")
    task: TaskSection | None = Field(None, description="Harbor's [task] table.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Arbitrary metadata provided by the task author."
    )
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = Field(None, description="Optional source string for task provenance.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (unknown keys included) that `parse_task_config` reads back equal."""
        return self.model_dump(mode="json")


def parse_task_config(data: Mapping[str, Any], file: str | Path = "task.toml") -> TaskConfig:
    """Validate an already-parsed task.toml (or a manifest's copy of it); `file` names errors."""
    try:
        return TaskConfig.model_validate(dict(data))
    except ValidationError as err:
        raise InvalidInput(
            problems_from_validation_error(err, file), ErrorType.TASK_INVALID
        ) from None


def load_task_config(path: str | Path) -> TaskConfig:
    """Read and validate a task.toml file; every problem names the file and the field."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise _invalid(path, "file is missing") from None
    except IsADirectoryError:
        raise _invalid(path, "is a directory, expected a TOML file") from None
    except UnicodeDecodeError as err:
        raise _invalid(path, f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise _invalid(path, f"cannot be read: {err.strerror or err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        # The message carries the position: "Invalid value (at line 3, column 10)".
        raise _invalid(path, f"not valid TOML: {err}") from None
    return parse_task_config(data, path)


def _invalid(path: Path, message: str) -> InvalidInput:
    return InvalidInput([Problem(str(path), None, message)], ErrorType.TASK_INVALID)
