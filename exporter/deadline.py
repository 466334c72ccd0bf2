"""Per-GPU reads in parallel under one deadline, so a hung GPU never stalls the others.

NVML calls are blocking C calls that release the GIL; a GPU that has fallen off the bus can
block one for seconds. Each GPU has at most one read in flight: a GPU whose previous read is
still stuck is reported late straight away instead of piling threads up behind it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class DeadlineReader(Generic[K, T]):
    """Runs one call per key concurrently and returns the results that made the deadline."""

    def __init__(self, max_workers: int, thread_name_prefix: str = "oximeter-read") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_workers),
                                        thread_name_prefix=thread_name_prefix)
        self._inflight: dict[K, Future[T]] = {}

    def run(self, calls: Mapping[K, Callable[[], T]],
            timeout_s: float) -> tuple[dict[K, T], dict[K, BaseException]]:
        """(results, exceptions) by key; a key in neither was late (still running)."""
        deadline = time.monotonic() + timeout_s
        futures: dict[K, Future[T]] = {}
        for key, call in calls.items():
            previous = self._inflight.get(key)
            if previous is not None and not previous.done():
                continue  # still stuck from an earlier scrape: late again, no new thread
            future = self._pool.submit(call)
            self._inflight[key] = future
            futures[key] = future
        wait(list(futures.values()), timeout=max(0.0, deadline - time.monotonic()))
        results: dict[K, T] = {}
        failed: dict[K, BaseException] = {}
        for key, future in futures.items():
            if not future.done():
                continue
            exc = future.exception()
            if exc is None:
                results[key] = future.result()
            else:
                failed[key] = exc
        return results, failed

    def close(self) -> None:
        """Stop accepting work; threads stuck in a C call are abandoned, not joined."""
        self._pool.shutdown(wait=False, cancel_futures=True)
