"""Parts shared by RolloutJob and RolloutTrial: names, agents, env vars, storage, pod overrides.

Rules are written once (`rollout.api.rules`): an agent here is the agent of job.yaml with its env
in Kubernetes' form, and patterns that also go into the CRD schema are constants there, so the
apiserver and the models refuse the same things.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from rollout.api.base import ApiModel
from rollout.api.envrefs import ENV_NAME_PATTERN, env_key_problem
from rollout.api.job_settings import AgentBase
from rollout.api.names import (
    CATEGORY,
    GROUP,
    VERSION,
)
from rollout.api.problems import FieldErrors
from rollout.api.rules import (
    duplicate_problems,
)
from rollout.api.secretref import SecretKeySelector as SecretKeySelector
from rollout.api.service_agents import HEADER_NAME_PATTERN, ModelBase, header_name_problem
from rollout.api.storage import StorageSpec as StorageSpec  # spec.storage: rollout.api.storage
from rollout.api.trials import LABEL_VALUE_RULE, is_label_value, label_key_problem


class ObjectMeta(BaseModel):
    """The parts of Kubernetes object metadata the models read; the rest is kept as it is."""

    model_config = ConfigDict(
        extra="allow", alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None

    @model_serializer(mode="wrap")
    def _without_empty_maps(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A manifest says nothing rather than `labels: {}`.
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v != {} or k not in ("labels", "annotations")}


# --- env vars -------------------------------------------------------------------------------------


class EnvVarSource(ApiModel):
    """Where an env var's value comes from."""

    secret_key_ref: SecretKeySelector = Field(description="A key of a Secret.")


class EnvVar(ApiModel):
    """An environment variable, as in a Kubernetes container: a literal `value` or `valueFrom`."""

    name: str = Field(
        description="Variable name (letters, digits, underscores).",
        json_schema_extra={"pattern": ENV_NAME_PATTERN},
    )
    value: str | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(None, description="Take the value from a Secret.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if problem := env_key_problem(value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env var {self.name!r} has both 'value' and 'valueFrom'")
        return self


class HeaderVar(ApiModel):
    """An endpoint agent's request header: a literal `value` or `valueFrom` a Secret."""

    name: str = Field(
        description="Header name.", json_schema_extra={"pattern": HEADER_NAME_PATTERN}
    )
    value: str | None = Field(None, description="Literal value.")
    value_from: EnvVarSource | None = Field(None, description="Take the value from a Secret.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if problem := header_name_problem(value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> HeaderVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"header {self.name!r} has both 'value' and 'valueFrom'")
        return self


class ModelSpec(ModelBase):
    """A model agent's model; its API key comes from a Secret."""

    api_key: SecretKeySelector | None = Field(
        None, description="The Secret key holding the API key; none: no Authorization header."
    )


class AgentSpec(AgentBase):
    """An agent, as job.yaml describes it; env and header values are literal or come from a
    Secret, and so does a model's key."""

    env: list[EnvVar] = Field(
        default_factory=list, description="Environment for the install and execute scripts."
    )
    headers: list[HeaderVar] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="An endpoint agent: headers of each request.",
    )
    model: ModelSpec | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A model agent: the OpenAI-compatible model that answers.",
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: list[EnvVar]) -> list[EnvVar]:
        if problems := duplicate_problems([v.name for v in value], "env var", "env"):
            raise FieldErrors(problems)
        return value

    @model_validator(mode="after")
    def _builtin_keys(self) -> AgentSpec:
        # A resource cannot take a key from anyone's environment: the built-in's keys must be
        # in env, from a Secret.
        if (entry := self.builtin_agent) is None:
            return self
        given = {v.name for v in self.env}
        missing = [key for key in entry.keys_for(self.model_name) if key not in given]
        if missing:
            raise FieldErrors(
                [
                    (
                        "env",
                        f"the built-in agent {entry.name!r} needs {key}: add it to env, from "
                        f"a Secret (valueFrom.secretKeyRef)",
                    )
                    for key in missing
                ]
            )
        return self

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: list[HeaderVar]) -> list[HeaderVar]:
        names = [v.name.lower() for v in value]
        if problems := duplicate_problems(names, "header", "headers"):
            raise FieldErrors(problems)
        return value


# --- pods -----------------------------------------------------------------------------------------


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """The taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A Kubernetes toleration for trial Pods."""

    key: str | None = Field(None, description="Taint key; empty with Exists matches all taints.")
    operator: TolerationOperator | None = Field(None, description="Exists or Equal (default).")
    value: str | None = Field(None, description="Taint value to match with Equal.")
    effect: TaintEffect | None = Field(None, description="Effect to match; empty matches all.")
    toleration_seconds: int | None = Field(
        None, description="How long a NoExecute taint is tolerated before eviction."
    )

    @model_validator(mode="after")
    def _as_the_api_server_takes_it(self) -> Toleration:
        # What the API server would refuse in every trial's Pod, said once, here.
        if self.key and (problem := label_key_problem(self.key)):
            raise FieldErrors([("key", problem)])
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise FieldErrors([("value", "must be empty when operator is Exists")])
        return self


class LocalObjectReference(ApiModel):
    """A reference to an object in the same namespace, by name."""

    name: str = Field(min_length=1, description="Name of the object.")


class PodOverrides(ApiModel):
    """Scheduling settings applied to every trial Pod."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels a trial Pod must be scheduled on."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints trial Pods tolerate."
    )
    runtime_class_name: str | None = Field(
        None, description="RuntimeClass of trial Pods (e.g. gvisor, kata)."
    )
    priority_class_name: str | None = Field(None, description="PriorityClass of trial Pods.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, description="Secrets for pulling environment and runner images."
    )

    @field_validator("node_selector")
    @classmethod
    def _node_labels(cls, value: dict[str, str]) -> dict[str, str]:
        # The API server refuses a Pod whose selector no node label can match; say so here,
        # before any trial, rather than have every trial's Pod refused.
        problems: list[tuple[str | None, str]] = []
        for key, label in value.items():
            if problem := label_key_problem(key):
                problems.append((key, problem))
            elif not is_label_value(label):
                problems.append((key, f"{label!r} is no label value: {LABEL_VALUE_RULE}"))
        if problems:
            raise FieldErrors(problems)
        return value


# --- what the CRD generator reads -----------------------------------------------------------------


@dataclass(frozen=True)
class PrinterColumn:
    """A column of `kubectl get`."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0


@dataclass(frozen=True)
class ResourceInfo:
    """Names and presentation of a custom resource kind, declared beside its model."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    printer_columns: tuple[PrinterColumn, ...]
    group: str = GROUP
    version: str = VERSION
    categories: tuple[str, ...] = (CATEGORY,)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


class CustomResource(ApiModel):
    """What every kind of ours has besides its spec and status; each kind narrows `kind`."""

    api_version: Literal["rollout.dev/v1alpha1"] = Field(
        "rollout.dev/v1alpha1", description="rollout.dev/v1alpha1."
    )
    kind: str = Field(description="The kind.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")

    def manifest(self) -> dict[str, Any]:
        """The object as the Kubernetes API takes it: camelCase, nulls left out."""
        return self.model_dump(mode="json", exclude_none=True)


AGE_COLUMN = PrinterColumn(
    "Age", "date", ".metadata.creationTimestamp", "Time since the resource was created."
)
