"""Unit prices of Kubernetes resources: what one unit of each costs for one hour.

The operator's setting ROLLOUT_UNIT_PRICES (`--unit-prices`, the chart's `unitPrices`) is a JSON
object keyed by the resource names a container requests, e.g.
`{"cpu": 0.031, "memory": 0.004, "nvidia.com/gpu": 2.5}`. The unit of each resource is the one
users price it in, not Kubernetes' base unit:

- `cpu`: one core for one hour (a core-hour);
- `memory`, `ephemeral-storage` and `hugepages-<size>`: one GiB (2^30 bytes) for one hour;
- any other resource (extended resources such as `nvidia.com/gpu`, `amd.com/gpu`): one device
  for one hour.

Prices carry no currency: a cost is in whatever the user prices in. A resource without a price
costs nothing. `rollout.controller.cost` applies them to a trial's Pod.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollout.api.quantity import parse_quantity

GIB = 2**30

BYTE_RESOURCES = frozenset({"memory", "ephemeral-storage"})
"""Resources counted in bytes and priced per GiB (hugepages-<size> too, by its prefix)."""
HUGEPAGES_PREFIX = "hugepages-"
CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
"""The resource names without a domain that a container may request (besides hugepages-*)."""

EXAMPLE = '{"cpu": 0.031, "memory": 0.004, "nvidia.com/gpu": 2.5}'

# Kubernetes' qualified name (apimachinery IsQualifiedName): an optional DNS-1123 subdomain
# prefix and "/", then a name of at most 63 characters.
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def unit_size(resource: str) -> int:
    """How many of the resource's base units (cores, bytes, devices) one priced unit is."""
    if resource in BYTE_RESOURCES or resource.startswith(HUGEPAGES_PREFIX):
        return GIB
    return 1


def unit_name(resource: str) -> str:
    """The priced unit, for messages and help: "core-hour", "GiB-hour" or "device-hour"."""
    if resource == "cpu":
        return "core-hour"
    return "GiB-hour" if unit_size(resource) == GIB else "device-hour"


def resource_name_problem(name: str) -> str | None:
    """Why `name` is not a resource a container can request, or None when it is.

    The rules are the API server's for container resources: a standard name without a domain
    (cpu, memory, ephemeral-storage, hugepages-<size>), or an extended resource, a qualified
    name with a domain (`nvidia.com/gpu`) that does not start with `requests.`.
    """
    hint = (
        "a container requests cpu, memory, ephemeral-storage, hugepages-<size>, or a resource "
        "with a domain such as nvidia.com/gpu"
    )
    prefix, slash, local = name.rpartition("/")
    if not slash:
        if name in CONTAINER_RESOURCES:
            return None
        if name.startswith(HUGEPAGES_PREFIX) and _is_quantity(name[len(HUGEPAGES_PREFIX) :]):
            return None
        return f"{name!r} is not a Kubernetes resource name ({hint})"
    if (
        not prefix
        or len(prefix) > 253
        or _SUBDOMAIN.fullmatch(prefix) is None
        or len(local) > 63
        or _NAME.fullmatch(local) is None
        or name.startswith("requests.")
    ):
        return f"{name!r} is not a Kubernetes resource name ({hint})"
    return None


def price_problems(prices: Any) -> list[str]:
    """Every reason why `prices` (parsed JSON) is not a set of unit prices; empty when it is."""
    if not isinstance(prices, dict):
        return [f"must be a JSON object of resource name to price per unit-hour, such as {EXAMPLE}"]
    problems = []
    for resource, price in prices.items():
        if (problem := resource_name_problem(str(resource))) is not None:
            problems.append(problem)
            continue
        what = f"the price of {resource!r} ({unit_name(resource)})"
        if isinstance(price, bool) or not isinstance(price, int | float):
            problems.append(f"{what} is {json.dumps(price)}: it must be a number, 0 or more")
        elif not math.isfinite(price) or price < 0:
            problems.append(f"{what} is {price}: it must be a finite number, 0 or more")
    return problems


class UnitPrices(BaseModel):
    """The price of one unit of each resource for one hour (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_hour: dict[str, float] = Field(
        description="Price of one unit for one hour, by Kubernetes resource name: cpu per "
        "core, memory, ephemeral-storage and hugepages-<size> per GiB, others per device."
    )

    @field_validator("per_hour", mode="before")
    @classmethod
    def _check(cls, value: Any) -> Any:
        if problems := price_problems(value):
            raise ValueError("; ".join(problems))
        return value

    def price(self, resource: str) -> Decimal:
        """The price of one unit of `resource` for one hour, exactly as given; 0 when unpriced."""
        # repr is the shortest decimal that round-trips: 0.1 stays 0.1, not 0.1000000000000000055.
        return Decimal(repr(self.per_hour.get(resource, 0.0)))


def parse_unit_prices(text: str) -> UnitPrices | None:
    """The setting's value (JSON text) as UnitPrices; None for `{}` (no prices: no costs).

    Raises ValueError saying everything that is wrong, to follow "ROLLOUT_UNIT_PRICES: ".
    """
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as err:  # JSONDecodeError, and NaN/Infinity
        raise ValueError(f"is not JSON: {err}") from None
    if problems := price_problems(data):
        raise ValueError("; ".join(problems))
    return UnitPrices(per_hour=data) if data else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except (ValueError, ArithmeticError):
        return False
    return True
