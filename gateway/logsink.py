"""The gateway's JSON logs, cheap enough for four lines per request (seed 000 §3.1).

Measured in ``bench/gateway_overhead.py`` (2 shared cores): loguru with ``enqueue=True`` pickles
every record through a multiprocessing pipe, 173 µs of CPU per call, and alone cut proxied
throughput to 0.42 × direct; even with a plain function sink a loguru call cost ~80 µs under
load. So:

* every line leaves the process through ``ThreadedJsonSink``: formatted in the caller, handed to
  a writer thread through a C-level ``queue.SimpleQueue`` and written in batches. This keeps what
  ``enqueue=True`` is for: the event loop never blocks on a slow pipe or terminal.
* occasional lines (start-up, warm-up, warnings) go through loguru into that sink;
* the four per-request lines go through ``RequestLog``, which writes the same JSON shape straight
  to the sink and skips loguru's record building (frame inspection, process/thread info).
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from datetime import UTC, datetime
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
            "time": record["time"].astimezone(UTC).isoformat(),
            "level": record["level"].name,
            "message": record["message"],
            **record["extra"],
        }
        if record["exception"] is not None:
            line["exception"] = str(message).rstrip()
        self.put(line)

    def put(self, line: dict[str, Any]) -> None:
        """Queue one JSON object for writing."""
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


class RequestLog:
    """The per-request log points: ``log("request received", request_id=..., body_bytes=...)``.

    Without a sink (library use, tests in-process) lines go through loguru as usual.
    """

    def __init__(
        self, sink: ThreadedJsonSink | None = None, *, enabled: bool = True, component: str = "gateway"
    ) -> None:
        self._sink = sink
        self._enabled = enabled
        self._component = component

    def __call__(self, message: str, **fields: Any) -> None:
        if not self._enabled:
            return
        if self._sink is None:
            logger.info(message, **fields)
            return
        self._sink.put(
            {
                "time": datetime.now(UTC).isoformat(),
                "level": "INFO",
                "message": message,
                "component": self._component,
                **fields,
            }
        )


def setup_gateway_logging(
    level: str = "INFO", component: str = "gateway"
) -> tuple[ThreadedJsonSink, RequestLog]:
    """Send loguru to the threaded JSON sink; returns the sink (``stop()`` it at exit) and the request log."""
    sink = ThreadedJsonSink()
    logger.remove()
    logger.configure(extra={"component": component})
    logger.add(sink, level=level.upper(), format="{message}", backtrace=False, diagnose=False, catch=True)
    enabled = logger.level(level.upper()).no <= logger.level("INFO").no
    return sink, RequestLog(sink, enabled=enabled, component=component)
