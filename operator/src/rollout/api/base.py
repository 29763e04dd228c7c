"""Base classes for the models: one model per concept, two spellings.

A concept that the user's files and the custom resources share (an agent, the environment
settings, a trial's error, durations and timestamps, an agent's figures) is ONE `ApiModel`:
its field names are the seed's snake_case (job.yaml, result.json) and its aliases are camelCase
(RolloutJob, RolloutTrial). Which spelling is used is decided at the top, once per surface:

- a resource (`RolloutJob`, `RolloutTrial`, their parts) reads both spellings, like kubectl
  users expect of the Python client, and writes camelCase;
- a user's file (`FileModel`: job.yaml, config.json, result.json, the termination message) reads
  and writes snake_case only, nested `ApiModel`s included, so an unknown or camelCase key in
  job.yaml is still an error and a result.json keeps the seed's keys exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationInfo
from pydantic.alias_generators import to_camel

_IN_A_FILE = "rollout.api.in_a_file"


def reading_a_file(info: ValidationInfo) -> bool:
    """Whether a validator runs for a user's file (`FileModel.model_validate`), where YAML's
    looser typing is met halfway (a float override becomes a quantity string), rather than for
    a resource, where the models refuse what the apiserver refuses."""
    return isinstance(info.context, Mapping) and bool(info.context.get(_IN_A_FILE))


class ApiModel(BaseModel):
    """A concept of the API: snake_case field names, camelCase aliases, unknown keys refused.

    Dumped camelCase by default (the resource spelling); a `FileModel` around it dumps it
    snake_case.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class FileModel(BaseModel):
    """The top of a user's file (job.yaml, result.json): snake_case in and out, also for the
    `ApiModel`s inside it. Unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # pydantic applies `by_alias`/`by_name` given to a call to every nested model, while a
    # model's config only applies to that model: the file's spelling is therefore chosen here,
    # once, for the whole file.

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        return super().model_validate(obj, **_as_a_file(kwargs))

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        return super().model_validate_json(json_data, **_as_a_file(kwargs))

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("by_alias", False)
        return super().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        kwargs.setdefault("by_alias", False)
        return super().model_dump_json(**kwargs)


def _as_a_file(kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs.setdefault("by_alias", False)
    kwargs.setdefault("by_name", True)
    kwargs["context"] = {**(kwargs.get("context") or {}), _IN_A_FILE: True}
    return kwargs


class OpenFileModel(BaseModel):
    """A section of task.toml: unknown keys are kept (newer Harbor versions add keys)."""

    model_config = ConfigDict(extra="allow")
