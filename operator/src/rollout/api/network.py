"""A task's network access: what task.toml asks for, and what a trial's Pod is given.

task.toml says it two ways (Harbor's, both kept): the older `[environment] allow_internet =
false`, and the newer `[environment] network_mode` (`"public"`, `"no-network"` or
`"allowlist"`; `"none"` is read as `"no-network"`, Docker's spelling) with `allowed_hosts`.
Either way a trial ends up with one `TrialEgress`: public (no limit), or restricted to what the
trial itself needs (object storage, cluster DNS, the job's own service endpoints) plus the task's
`allowed_hosts`.

The operator enforces a restricted egress with a Kubernetes NetworkPolicy that selects the
trial's Pod by `EGRESS_LABEL` (`rollout.controller.netpolicy`). A NetworkPolicy matches
addresses, never names, so allowed hosts are resolved to addresses when the policy is made. The
label's value tells apart the Pods that need different hosts: `restricted` for none,
`hosts-<digest>` for a set of hosts (one policy per set in a job).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import Field, field_validator

from rollout.api.base import ApiModel
from rollout.api.names import GROUP

EGRESS_LABEL = f"{GROUP}/egress"
"""On a trial Pod whose egress is restricted; the job's NetworkPolicies select it."""
RESTRICTED = "restricted"
"""`EGRESS_LABEL`'s value on a Pod that may reach no hosts of its task's own."""


class NetworkMode(StrEnum):
    """Harbor's `network_mode`."""

    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


NETWORK_MODE_ALIASES = {"none": NetworkMode.NO_NETWORK}
"""Other spellings read as a mode: Docker's `network_mode = "none"`."""


class TrialEgress(ApiModel):
    """Where a trial's Pod may connect to (its runner included: a NetworkPolicy covers the Pod)."""

    restricted: bool = Field(
        False,
        description="Only object storage, cluster DNS, the job's endpoints and allowedHosts.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (names, addresses or CIDRs) the task may reach besides; names are "
        "resolved to addresses when the job's NetworkPolicy is made.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _sorted_unique(cls, hosts: list[str]) -> list[str]:
        # One order for one set: the set's label and policy do not depend on how it was written.
        return sorted(set(hosts))

    @property
    def label_value(self) -> str | None:
        """`EGRESS_LABEL`'s value on the trial's Pod (None: public, no label)."""
        if not self.restricted:
            return None
        if not self.allowed_hosts:
            return RESTRICTED
        digest = hashlib.sha256("\n".join(self.allowed_hosts).encode()).hexdigest()
        return f"hosts-{digest[:12]}"


PUBLIC = TrialEgress()
