"""Blocking storage calls off the event loop, in threads that never keep the runner alive.

`asyncio.to_thread` uses the loop's default executor, whose threads the interpreter joins at exit:
a storage call still retrying against a dead endpoint would then hold the runner past its own
upload deadline. A daemon thread is abandoned instead when the runner gives up on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T], name: str = "rollout-storage") -> T:
    """Run `fn` in a new daemon thread and wait for it; cancelling the wait abandons the thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def target() -> None:
        try:
            value = fn()
        except BaseException as exc:  # handed to the waiting coroutine, never lost
            error = exc
            _call_soon(loop, lambda: settle(lambda: future.set_exception(error)))
        else:
            _call_soon(loop, lambda: settle(lambda: future.set_result(value)))

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    # A closed loop raises RuntimeError: nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)
