"""Waiting for a condition with a deadline (no sleeps in tests)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def wait_for(
    predicate: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str | None = ...,
    checks: Iterable[Callable[[], None]] = ...,
) -> T: ...


@overload
async def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str | None = ...,
    checks: Iterable[Callable[[], None]] = ...,
) -> T: ...


async def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - polling with a deadline is the point
    interval: float = 0.02,
    what: str | None = None,
    checks: Iterable[Callable[[], None]] = (),
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy, and return that.

    Raises TimeoutError naming `what` and the last value once `timeout` seconds have passed.
    `checks` run before every poll and may raise to fail fast (e.g. "the operator crashed").
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        for check in checks:
            check()
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            description = what or getattr(predicate, "__name__", repr(predicate))
            raise TimeoutError(f"{description}: not true within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)
