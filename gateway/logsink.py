"""JSON request logs that cost the event loop ~20 µs a line instead of ~170 µs.

loguru's ``enqueue=True`` pickles every record through a multiprocessing pipe (measured 173 µs of
CPU per call here, serialize=True), and the gateway writes four lines per request (seed 000 §3.1):
that alone cut proxied throughput to 0.42 × direct in ``bench/gateway_overhead.py``. This sink
keeps what ``enqueue=True`` is for — the event loop never blocks on a slow pipe or terminal — by
formatting one compact JSON object in the caller and handing the line to a writer thread through
a C-level ``queue.SimpleQueue``.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from typing import IO, Any

from loguru import logger

_STOP = None
_BATCH_S = 0.05


class ThreadedJsonSink:
    """A loguru sink: one JSON object per line, written by a daemon thread in batches."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name="log-writer", daemon=True)
        self._thread.start()

    def __call__(self, message: Any) -> None:
        record = message.record
        line = {
            "time": record["time"].isoformat(),
            "level": record["level"].name,
            "message": record["message"],
            **record["extra"],
        }
        if record["exception"] is not None:
            line["exception"] = str(message).rstrip()
        self._queue.put(json.dumps(line, default=str) + "\n")

    def _write_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is not _STOP:
                # Let lines gather: waking this thread per line would bounce the GIL off the event
                # loop (measured 40 µs per put under load); 20 writes a second at most.
                time.sleep(_BATCH_S)
            batch = [first]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = _STOP in batch
            try:
                self._stream.write("".join(line for line in batch if line is not None))
                self._stream.flush()
            except (OSError, ValueError):
                pass  # stderr closed under us (shutdown): nothing useful left to do with the lines
            if stop:
                return

    def stop(self, timeout_s: float = 5.0) -> None:
        """Write what is queued and end the writer thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout_s)


def setup_gateway_logging(level: str = "INFO", component: str = "gateway") -> ThreadedJsonSink:
    """Replace loguru's handlers with the threaded JSON sink; call ``stop()`` on the result at exit."""
    sink = ThreadedJsonSink()
    logger.remove()
    logger.configure(extra={"component": component})
    logger.add(sink, level=level.upper(), format="{message}", backtrace=False, diagnose=False, catch=True)
    return sink
