"""Resource quantities: the project's rule (bare memory/storage numbers are MiB) and Kubernetes'."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from rollout.api.quantity import (
    cpu_millicores,
    mib_quantity,
    normalize_cpus,
    normalize_memory,
    normalize_storage,
    parse_quantity,
    quantity_bytes,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("500m", Decimal("0.5")),
        ("2G", Decimal(2 * 10**9)),
        ("10Gi", Decimal(10 * 2**30)),
        ("512M", Decimal(512 * 10**6)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1k", Decimal(1000)),
        ("1e9", Decimal(10**9)),
        ("1E3", Decimal(1000)),  # an exponent, not exa
        ("1E", Decimal(10**18)),  # exa
        ("100n", Decimal("1e-7")),
        (".5", Decimal("0.5")),
        (" 2Gi ", Decimal(2 * 2**30)),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("value", "canonical", "millicores"),
    [
        (1, "1", 1000),
        (0.5, "500m", 500),
        (2.0, "2", 2000),
        ("1", "1", 1000),
        ("500m", "500m", 500),
        ("2.5", "2500m", 2500),
        ("0.25", "250m", 250),
        (0.1, "100m", 100),
        ("1k", "1000", 1_000_000),
        ("0.0001", "1m", 1),  # finer than a millicore rounds up, as Kubernetes does
    ],
)
def test_cpus(value: Any, canonical: str, millicores: int) -> None:
    assert normalize_cpus(value) == canonical
    assert cpu_millicores(value) == millicores


@pytest.mark.parametrize(
    ("value", "canonical", "size"),
    [
        ("2048", "2048Mi", 2048 * 2**20),  # the seed's own example: a bare number is MiB
        (2048, "2048Mi", 2048 * 2**20),
        ("10240", "10240Mi", 10240 * 2**20),
        (0.5, "512Ki", 2**19),
        ("2G", "2G", 2 * 10**9),
        ("10G", "10G", 10 * 10**9),
        ("10Gi", "10Gi", 10 * 2**30),
        ("512M", "512M", 512 * 10**6),
        ("512Mi", "512Mi", 512 * 2**20),
        ("1e9", "1e9", 10**9),
        ("  4Gi ", "4Gi", 4 * 2**30),
    ],
)
def test_memory_and_storage(value: Any, canonical: str, size: int) -> None:
    assert normalize_memory(value) == canonical
    assert normalize_storage(value) == canonical
    assert quantity_bytes(value) == size
    # The canonical form means the same amount when read again.
    assert quantity_bytes(canonical) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "'lots' is not a quantity"),
        ("abc", "'abc' is not a quantity"),
        ("", "an empty string is not a quantity"),
        ("   ", "an empty string is not a quantity"),
        ("2 G", "'2 G' is not a quantity"),
        ("2GB", "'2GB' is not a quantity"),
        ("1.2.3", "'1.2.3' is not a quantity"),
        (-1, "-1 is negative"),
        ("-1G", "'-1G' is negative"),
        (0, "0 must be greater than zero"),
        ("0Gi", "'0Gi' must be greater than zero"),
        (True, "True is not a quantity"),
        (None, "None is not a quantity"),
        (["2G"], "['2G'] is not a quantity"),
        (float("nan"), "nan is not a quantity"),
        (float("inf"), "inf is not a quantity"),
        ("512m", "'512m' is a fraction of a byte"),
    ],
)
def test_invalid_memory(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        normalize_memory(value)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        quantity_bytes(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "'abc' is not a quantity"),
        ("", "an empty string is not a quantity"),
        ("-500m", "'-500m' is negative"),
        (-0.5, "-0.5 is negative"),
        (0, "0 must be greater than zero"),
        (False, "False is not a quantity"),
        ("1 core", "'1 core' is not a quantity"),
    ],
)
def test_invalid_cpus(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        normalize_cpus(value)


def test_invalid_messages_say_what_is_expected() -> None:
    with pytest.raises(ValueError, match=r"number of MiB such as 2048, or a quantity such as"):
        normalize_memory("lots")
    with pytest.raises(ValueError, match=r"number of cores such as 1, 0.5, '2' or '500m'"):
        normalize_cpus("abc")
    with pytest.raises(ValueError, match=r"did you mean M \(megabytes\) or Mi"):
        quantity_bytes("512m")


def test_mib_quantity() -> None:
    assert mib_quantity(2048) == "2048Mi"
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="positive whole number"):
            mib_quantity(bad)
