"""Run ``Outbox.deliver_due`` in a loop: a thread for the analyzer daemon, a coroutine for asyncio.

The step itself never sleeps; the loop waits until the next row is due (or ``interval_s``), so an
idle outbox costs one cheap query per interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable

from loguru import logger

from oximeter.errors import OximeterError
from reporter.outbox import Outbox


def _step(outbox: Outbox, clock: Callable[[], float], interval_s: float) -> float:
    """One delivery step; returns how long to wait before the next."""
    try:
        outbox.deliver_due(clock())
    except (sqlite3.Error, OximeterError) as exc:
        # The store may be briefly locked or unavailable: log and try again next interval.
        logger.error("outbox: delivery step failed: {}", exc)
        return interval_s
    due = outbox.next_due_at()
    if due is None:
        return interval_s
    return min(interval_s, max(due - clock(), 0.0))


class DeliveryWorker:
    """A daemon thread delivering the outbox until ``stop()``."""

    def __init__(self, outbox: Outbox, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.outbox = outbox
        self.interval_s = interval_s
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Deliver until stopped (blocking; ``start()`` runs this in a thread)."""
        while not self._stop.is_set():
            self._stop.wait(_step(self.outbox, self.clock, self.interval_s))

    def start(self) -> DeliveryWorker:
        """Start the background thread."""
        self._thread = threading.Thread(target=self.run, name="outbox-delivery", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the loop to stop and wait for the current step to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


async def deliver_forever(outbox: Outbox, stop: asyncio.Event, interval_s: float = 1.0,
                          clock: Callable[[], float] = time.time) -> None:
    """The same loop for an asyncio daemon; each step runs in a worker thread (it does HTTP)."""
    while not stop.is_set():
        wait_s = await asyncio.to_thread(_step, outbox, clock, interval_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=wait_s)
