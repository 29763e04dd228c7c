"""A key of a Secret, as Kubernetes' env `valueFrom.secretKeyRef` names it: shared by agent env
(`rollout.api.resources.common`) and a shard's evaluator key (`rollout.api.rowrun`)."""

from __future__ import annotations

from pydantic import Field

from rollout.api.base import ApiModel


class SecretKeySelector(ApiModel):
    """A key of a Secret in the resource's namespace."""

    name: str = Field(min_length=1, description="Name of the Secret.")
    key: str = Field(min_length=1, description="Key in the Secret's data.")
    optional: bool | None = Field(
        None, description="If true, a missing Secret or key leaves the variable unset."
    )
