"""Base classes for the models: one for user files (snake_case), one for Kubernetes resources."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class FileModel(BaseModel):
    """A section of a user's file (job.yaml, result.json). Unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class OpenFileModel(BaseModel):
    """A section of task.toml: unknown keys are kept (newer Harbor versions add keys)."""

    model_config = ConfigDict(extra="allow")


class ResourceModel(BaseModel):
    """Part of a RolloutJob/RolloutTrial: camelCase in Kubernetes, snake_case in Python."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )
