"""What a trial's Pod cost: the resources it holds on a node, for as long as it holds them, at the
operator's unit prices (`rollout.controller.prices`, ROLLOUT_UNIT_PRICES).

- What it holds: the Pod's requests, what the scheduler reserves on the node for it, summed over
  its containers (the task's `environment` container and the `runner` sidecar), plus the Pod's
  `spec.overhead` (set by a RuntimeClass such as Kata). A container's limit without a request
  counts as its request, as the API server defaults it. Trial Pods have no init containers.
- For how long: from `status.startTime`, when the kubelet accepted the Pod (the node's resources
  are held from then, image pulls included), to the end the caller gives: the runner's end
  (`runner_finished_at`) when the Pod shows one. A Pod that never started (unschedulable) cost
  nothing.
- At what price: `UnitPrices`; a resource without a price costs nothing. No prices, no cost: None.

Pure functions of the Pod as the API returns it, or as the index keeps it (`index.slim_pod`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from rollout.api.quantity import parse_quantity
from rollout.controller.podfields import runner_state, timestamp
from rollout.controller.prices import UnitPrices, unit_size

COST_DECIMALS = Decimal("0.000001")
"""Costs are rounded to 6 decimals: a millionth of the currency unit, finer than any bill."""

_SECONDS_PER_HOUR = Decimal(3600)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the Pod asks a node for, by resource name, in base units (cores, bytes, devices).

    Raises ValueError for an amount that is not a Kubernetes quantity (the API server refuses
    such a Pod, so only a hand-made body has one).
    """
    spec: Mapping[str, Any] = pod.get("spec") or {}
    totals: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        if not isinstance(container, Mapping):
            continue
        where = f"container {container.get('name')!r}"
        for resource, amount in _container_requests(container).items():
            totals[resource] = totals.get(resource, Decimal(0)) + _amount(amount, where, resource)
    for resource, amount in (spec.get("overhead") or {}).items():
        totals[resource] = totals.get(resource, Decimal(0)) + _amount(amount, "overhead", resource)
    return totals


def hourly_rate(requests: Mapping[str, Decimal], prices: UnitPrices) -> float:
    """What holding `requests` (as `pod_requests` gives them) costs for one hour."""
    return float(_rate(requests, prices))


def pod_cost(
    pod: Mapping[str, Any], prices: UnitPrices | None, *, ended_at: datetime
) -> float | None:
    """What the Pod cost from its start on a node to `ended_at`, rounded to 6 decimals.

    None when there are no prices; 0 for a Pod that never started (no `status.startTime`) or an
    `ended_at` before its start. `ended_at` must be timezone-aware, as the API's times are UTC.
    """
    if ended_at.tzinfo is None:
        raise ValueError("pod_cost needs a timezone-aware `ended_at`, e.g. datetime.now(UTC)")
    if prices is None:
        return None
    started = pod_started_at(pod)
    if started is None or ended_at <= started:
        return 0.0
    return running_cost(pod_requests(pod), prices, started=started, ended=ended_at)


def running_cost(
    requests: Mapping[str, Decimal], prices: UnitPrices, *, started: datetime, ended: datetime
) -> float:
    """What `requests` (base units by resource name: cores, bytes, devices) cost from `started`
    to `ended` at `prices`, rounded to 6 decimals; 0 when `ended` is not after `started`."""
    if ended <= started:
        return 0.0
    hours = Decimal(repr((ended - started).total_seconds())) / _SECONDS_PER_HOUR
    cost = _rate(requests, prices) * hours
    return float(cost.quantize(COST_DECIMALS, rounding=ROUND_HALF_EVEN))


def pod_started_at(pod: Mapping[str, Any]) -> datetime | None:
    """`status.startTime`: when the kubelet accepted the Pod; None until a node has it."""
    return _utc(timestamp((pod.get("status") or {}).get("startTime")))


def runner_finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the runner container ended (its `state.terminated.finishedAt`); None before that."""
    ended = runner_state(pod).get("terminated")
    return _utc(timestamp(ended.get("finishedAt"))) if isinstance(ended, Mapping) else None


def pod_end(pod: Mapping[str, Any], *, now: datetime) -> datetime:
    """The end of the Pod's cost: the runner's end when the Pod shows it, else `now` (the Pod
    holds its node until it is deleted, e.g. after an image that would not pull)."""
    return runner_finished_at(pod) or now


def trial_cost(
    earlier: float | None,
    pod: Mapping[str, Any] | None,
    prices: UnitPrices | None,
    *,
    now: datetime,
) -> float | None:
    """A trial's cost so far: its earlier tries' (`earlier`, as its status keeps it) and its
    current Pod's, to the runner's end or `now`. None without prices; a Pod the operator never
    saw (gone before its watch showed it) adds nothing, as nothing is known of it."""
    if prices is None:
        return None
    this = pod_cost(pod, prices, ended_at=pod_end(pod, now=now)) if pod is not None else None
    total = Decimal(repr(earlier or 0.0)) + Decimal(repr(this or 0.0))
    return float(total.quantize(COST_DECIMALS, rounding=ROUND_HALF_EVEN))


# --- helpers --------------------------------------------------------------------------------------


def _container_requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests, each missing one taken from its limit (the API server's default)."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _amount(amount: Any, where: str, resource: str) -> Decimal:
    try:
        if isinstance(amount, bool) or not isinstance(amount, int | str):
            raise ValueError
        value = parse_quantity(str(amount))
    except (ValueError, InvalidOperation):
        value = None
    if value is None or value < 0:
        raise ValueError(
            f"the {resource} of {where} is {amount!r}, which is not a Kubernetes quantity of 0 "
            "or more"
        )
    return value


def _rate(requests: Mapping[str, Decimal], prices: UnitPrices) -> Decimal:
    per_unit = (
        amount / unit_size(resource) * prices.price(resource)
        for resource, amount in requests.items()
    )
    return sum(per_unit, Decimal(0))


def _utc(moment: datetime | None) -> datetime | None:
    """An API time; one without a zone is UTC, as every time the API writes is."""
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment
