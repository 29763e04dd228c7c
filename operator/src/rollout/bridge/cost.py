"""What a try on the bridge costs: the trial's resources for as long as its sandbox lived, at the
unit prices the bridge's settings give its provider (ROLLOUT_BRIDGE_UNIT_PRICES), or what the
provider itself reports where it does.

The prices are the operator's format (`rollout.controller.prices`: per core-hour for `cpu`,
per GiB-hour for `memory` and `ephemeral-storage`, per device-hour for a GPU resource), one
object per provider, e.g. `{"modal": {"cpu": 0.047, "memory": 0.008, "nvidia.com/gpu": 3.95}}`
from the provider's published price list (seed 000: "Modal pricing for Modal environments"). A
trial's GPUs are priced as `nvidia.com/gpu`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime
from decimal import Decimal

from rollout.api.quantity import parse_quantity
from rollout.api.resources import TrialResources
from rollout.controller.cost import COST_DECIMALS, running_cost
from rollout.controller.prices import UnitPrices, parse_unit_prices

GPU_RESOURCE = "nvidia.com/gpu"
"""The resource name a trial's GPUs are priced under."""


def trial_requests(resources: TrialResources) -> dict[str, Decimal]:
    """A trial's resources in base units by resource name, as a Pod would request them."""
    requests = {
        "cpu": parse_quantity(resources.cpus),
        "memory": parse_quantity(resources.memory),
        "ephemeral-storage": parse_quantity(resources.storage),
    }
    if resources.gpus:
        requests[GPU_RESOURCE] = Decimal(resources.gpus)
    return requests


def try_cost(
    resources: TrialResources,
    prices: UnitPrices | None,
    *,
    started: datetime,
    ended: datetime,
    reported: float | None = None,
) -> float | None:
    """One try's cost: what the provider reported, else the prices applied; None without
    either (the trial's cost stays unknown)."""
    if reported is not None:
        return float(Decimal(repr(reported)).quantize(COST_DECIMALS))
    if prices is None:
        return None
    return running_cost(trial_requests(resources), prices, started=started, ended=ended)


def add_costs(earlier: float | None, this: float | None) -> float | None:
    """The trial's cost over its tries: unknown only when no try's is known."""
    if earlier is None and this is None:
        return None
    total = Decimal(repr(earlier or 0.0)) + Decimal(repr(this or 0.0))
    return float(total.quantize(COST_DECIMALS))


def parse_provider_prices(text: str, providers: Collection[str]) -> dict[str, UnitPrices]:
    """ROLLOUT_BRIDGE_UNIT_PRICES: `{provider: {resource: price}}`; ValueError saying what is
    wrong (a key not among `providers`, a price the operator's setting would refuse)."""
    try:
        data = json.loads(text)
    except ValueError as err:
        raise ValueError(f"is not JSON: {err}") from None
    if not isinstance(data, Mapping):
        raise ValueError('must be a JSON object by provider, e.g. {"docker": {"cpu": 0.03}}')
    if unknown := sorted(set(map(str, data)) - set(providers)):
        names = ", ".join(sorted(providers))
        raise ValueError(f"{', '.join(unknown)}: not a provider (the providers: {names})")
    prices: dict[str, UnitPrices] = {}
    for provider, per_hour in data.items():
        try:
            parsed = parse_unit_prices(json.dumps(per_hour))
        except ValueError as err:
            raise ValueError(f"{provider}: {err}") from None
        if parsed is not None:
            prices[str(provider)] = parsed
    return prices
