"""Names to addresses, for the NetworkPolicies that cannot match names (`netpolicy`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable

RESOLVE_TIMEOUT_SEC = 10.0
"""How long one name may take: the system resolver has no timeout of its own to pass."""


async def resolve_names(names: Iterable[str]) -> dict[str, list[str]]:
    """Every address (IPv4 and IPv6) of each name, as the operator's resolver has them now;
    an empty list for a name that did not resolve (unknown, or no answer in time)."""
    names = list(names)
    found = await asyncio.gather(*(_addresses(name) for name in names))
    return dict(zip(names, found, strict=True))


async def _addresses(name: str) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_SEC):
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
