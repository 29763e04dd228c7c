"""Resource quantities for `environment.cpus`, `environment.memory` and `environment.storage`.

The seed says these are Kubernetes quantities, yet its own example writes `memory = "2048"` and
Terminal-Bench writes `cpus = 1`. This project's rule (see the tasks README):

- memory and storage: a bare number (`2048`, `"2048"`, `0.5`) means MiB, as Harbor's
  `memory_mb`/`storage_mb` do; anything with a unit (`"2G"`, `"10Gi"`, `"512M"`, `"1e9"`) is a
  Kubernetes quantity in bytes.
- cpus: a number (`1`, `0.5`) or a quantity string (`"1"`, `"500m"`), in cores.

Parsing is done here with a small regex instead of `kubernetes.utils.parse_quantity`, because the
API package must not import the Kubernetes client.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Annotated

from pydantic import Field

QuantityInput = str | int | float

QUANTITY_PATTERN = r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
"""A non-negative Kubernetes quantity ("1", "500m", "2G", "10Gi"), as a regex for the CRD."""

IntOrQuantity = Annotated[int | str, Field(json_schema_extra={"pattern": QUANTITY_PATTERN})]
"""An int or a quantity string; the CRD marks it x-kubernetes-int-or-string."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# The exponent form comes first so that "1E3" is 1000 and a lone "1E" is one exa.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?"
)
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
_MIB = 2**20
_EXAMPLES = {
    "cpus": "expected a number of cores such as 1, 0.5, '2' or '500m'",
    "bytes": "expected a number of MiB such as 2048, or a quantity such as '2G', '512Mi'",
}


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity string in base units (cores or bytes), exactly."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number.scaleb(int(suffix[1:]))


def normalize_cpus(value: QuantityInput) -> str:
    """Canonical Kubernetes CPU quantity: 1 -> "1", 0.5 -> "500m", "2.5" -> "2500m"."""
    millicores = cpu_millicores(value)
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def cpu_millicores(value: QuantityInput) -> int:
    """CPU in millicores; finer precision rounds up to 1m, as Kubernetes itself does."""
    cores = _positive(value, "cpus", _decimal(value, "cpus"))
    return int((cores * 1000).to_integral_value(rounding=ROUND_CEILING))


def normalize_memory(value: QuantityInput) -> str:
    """Canonical quantity for memory or storage: "2048" -> "2048Mi", "2G" stays "2G"."""
    total = quantity_bytes(value)
    if _is_bare_number(value):
        mib = Decimal(total) / _MIB
        if mib == mib.to_integral_value():
            return f"{int(mib)}Mi"
        return _binary_string(total)
    return str(value).strip()


# Storage follows exactly the same rule as memory.
normalize_storage = normalize_memory


def quantity_bytes(value: QuantityInput) -> int:
    """Memory or storage in bytes: a bare number is MiB, a quantity with a unit is bytes.

    A fraction of a byte is refused rather than rounded: `memory = "512m"` is 0.512 bytes in
    Kubernetes, which is never what the author meant.
    """
    if _is_bare_number(value):
        amount = _positive(value, "bytes", _decimal(value, "bytes")) * _MIB
        return int(amount.to_integral_value(rounding=ROUND_CEILING))
    amount = _positive(value, "bytes", _decimal(value, "bytes"))
    if amount != amount.to_integral_value():
        raise ValueError(
            f"{value!r} is a fraction of a byte ({amount.normalize()} bytes); "
            "did you mean M (megabytes) or Mi (mebibytes) rather than m (milli)?"
        )
    return int(amount)


def mib_quantity(mib: int) -> str:
    """The quantity for a whole number of MiB, as Harbor's `memory_mb`/`storage_mb` give it."""
    if isinstance(mib, bool) or mib <= 0:
        raise ValueError(f"{mib!r} MiB must be a positive whole number")
    return f"{mib}Mi"


def _decimal(value: QuantityInput, kind: str) -> Decimal:
    """A number or quantity string as an exact Decimal of base units, with a clear error."""
    hint = _EXAMPLES[kind]
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity ({hint})")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a quantity ({hint})")
        # repr is the shortest decimal that round-trips: 0.1 stays 0.1, not 0.1000000000000000055.
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a quantity ({hint})")
    if not value.strip():
        raise ValueError(f"an empty string is not a quantity ({hint})")
    try:
        return parse_quantity(value)
    except (ValueError, InvalidOperation):
        raise ValueError(f"{value!r} is not a quantity ({hint})") from None


def _positive(value: QuantityInput, kind: str, amount: Decimal) -> Decimal:
    if amount < 0:
        raise ValueError(f"{value!r} is negative ({_EXAMPLES[kind]})")
    if amount == 0:
        raise ValueError(f"{value!r} must be greater than zero ({_EXAMPLES[kind]})")
    return amount


def _is_bare_number(value: QuantityInput) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and _BARE_NUMBER.fullmatch(value.strip()) is not None


def _binary_string(total: int) -> str:
    """Bytes with the largest binary suffix that divides them exactly (1536 -> "1536", ...)."""
    for suffix, size in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if total % size == 0:
            return f"{total // size}{suffix}"
    return str(total)
