"""Unit prices: which resource names they take, in which unit each is priced, what is refused."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from rollout.controller.prices import (
    GIB,
    UnitPrices,
    parse_unit_prices,
    resource_name_problem,
    unit_name,
    unit_size,
)


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-2Mi",
        "hugepages-1Gi",
        "nvidia.com/gpu",
        "amd.com/gpu",
        "example.com/foo_bar.baz",
    ],
)
def test_resource_names_a_container_requests_are_taken(name: str) -> None:
    assert resource_name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "cpus",
        "gpu",
        "storage",  # a PersistentVolumeClaim's, never a container's: ephemeral-storage
        "Memory",
        "hugepages-lots",
        "/gpu",
        "NVIDIA.com/gpu",
        "nvidia.com/",
        "nvidia.com/-gpu",
        "a/b/c",
        "requests.example.com/foo",
        "example.com/" + "g" * 64,
    ],
)
def test_other_names_are_refused(name: str) -> None:
    problem = resource_name_problem(name)
    assert problem is not None
    assert problem.startswith(f"{name!r} is not a Kubernetes resource name")


def test_units_are_cores_gib_and_devices() -> None:
    assert (unit_size("cpu"), unit_name("cpu")) == (1, "core-hour")
    for resource in ("memory", "ephemeral-storage", "hugepages-2Mi"):
        assert (unit_size(resource), unit_name(resource)) == (GIB, "GiB-hour")
    assert GIB == 1024**3
    for resource in ("nvidia.com/gpu", "amd.com/gpu"):
        assert (unit_size(resource), unit_name(resource)) == (1, "device-hour")


def test_prices_are_read_exactly_and_an_unpriced_resource_is_free() -> None:
    prices = parse_unit_prices('{"cpu": 0.1, "nvidia.com/gpu": 2, "memory": 0}')
    assert prices == UnitPrices(per_hour={"cpu": 0.1, "nvidia.com/gpu": 2.0, "memory": 0.0})
    assert prices.price("cpu") == Decimal("0.1")  # not 0.1000000000000000055...
    assert prices.price("nvidia.com/gpu") == Decimal(2)
    assert prices.price("ephemeral-storage") == 0


def test_no_prices_is_none() -> None:
    assert parse_unit_prices("{}") is None
    assert parse_unit_prices(" { } ") is None


def test_the_model_refuses_what_the_setting_refuses() -> None:
    # Built in code rather than from the setting, the same rules hold.
    with pytest.raises(ValidationError, match="'gpu' is not a Kubernetes resource name"):
        UnitPrices(per_hour={"gpu": 1.0})
    with pytest.raises(ValidationError, match=r"is -1\.0: it must be a finite number, 0 or more"):
        UnitPrices(per_hour={"cpu": -1.0})
    with pytest.raises(ValidationError, match="is inf"):
        UnitPrices(per_hour={"cpu": float("inf")})
    prices = UnitPrices(per_hour={"cpu": 1.0})
    with pytest.raises(ValidationError):
        prices.per_hour = {}  # type: ignore[misc]
