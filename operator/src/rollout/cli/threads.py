"""Object storage calls on a few threads: one request at a time is slow for thousands of files,
and `ObjectStore` is safe to share between threads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = 16


def parallel_map(fn: Callable[[T], R], items: Sequence[T], workers: int = WORKERS) -> list[R]:
    """`fn` over `items`, results in order; the first exception is raised once all are done."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))
