"""The gateway's logs, cheap enough for four lines per request on the request path.

Measured in ``bench/gateway_overhead.py`` (2 shared cores): loguru with ``enqueue=True`` pickles
every record through a multiprocessing pipe, 173 µs of CPU per call, and alone cut proxied
throughput to 0.42 × direct; even with a plain function sink a loguru call cost ~80 µs under
load, and formatting a line (ISO time + ``json.dumps``) still ~11 µs. So:

* every line leaves the process through ``ThreadedJsonSink``: the caller hands a raw
  ``(epoch seconds, level, message, fields)`` tuple to a writer thread through a C-level
  ``queue.SimpleQueue`` (<1 µs); the thread formats and writes in batches. This keeps what
  ``enqueue=True`` is for: the event loop never blocks on a slow pipe or terminal, and now never
  pays for formatting either.
* occasional lines (start-up, warm-up, warnings) go through loguru into that sink;
* the four per-request lines go through ``RequestLog``, which skips loguru's record building
  (frame inspection, process/thread info).
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
# Lines formatted between two GIL releases of the writer thread: formatting holds the GIL, and an
# event loop waiting for it would otherwise stall up to sys.getswitchinterval() (5 ms).
_FORMAT_SLICE = 32

_Line = tuple[float, str, str, dict[str, Any]]


class ThreadedJsonSink:
    """A loguru sink: one JSON object per line (or a text line), written by a daemon thread in batches."""

    def __init__(self, stream: IO[str] | None = None, *, json_lines: bool = True) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._format = self._format_json if json_lines else self._format_text
        self._queue: queue.SimpleQueue[_Line | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name="log-writer", daemon=True)
        self._thread.start()

    def __call__(self, message: Any) -> None:
        record = message.record
        fields = dict(record["extra"])
        if record["exception"] is not None:
            fields["exception"] = str(message).rstrip()
        self.put(record["time"].timestamp(), record["level"].name, record["message"], fields)

    def put(self, time_s: float, level: str, message: str, fields: dict[str, Any]) -> None:
        """Queue one line (``time_s``: seconds since the epoch); the writer thread formats it."""
        self._queue.put((time_s, level, message, fields))

    @staticmethod
    def _format_json(line: _Line) -> str:
        time_s, level, message, fields = line
        stamp = datetime.fromtimestamp(time_s, UTC).isoformat()
        return json.dumps({"time": stamp, "level": level, "message": message, **fields}, default=str) + "\n"

    @staticmethod
    def _format_text(line: _Line) -> str:
        time_s, level, message, fields = line
        stamp = datetime.fromtimestamp(time_s, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]  # UTC
        component = fields.get("component", "")
        rest = "".join(f" {k}={v}" for k, v in fields.items() if k != "component")
        return f"{stamp} {level:<8} {component}: {message}{rest}\n"

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
            text: list[str] = []
            for i, line in enumerate(batch, 1):
                if line is not None:
                    text.append(self._format(line))
                if i % _FORMAT_SLICE == 0:
                    time.sleep(0)  # let the event loop take the GIL
            try:
                self._stream.write("".join(text))
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
        fields["component"] = self._component
        self._sink.put(time.time(), "INFO", message, fields)


def setup_gateway_logging(
    level: str = "INFO", component: str = "gateway", *, json_lines: bool = True
) -> tuple[ThreadedJsonSink, RequestLog]:
    """Send loguru to the threaded sink; returns the sink (``stop()`` it at exit) and the request log."""
    sink = ThreadedJsonSink(json_lines=json_lines)
    logger.remove()
    logger.configure(extra={"component": component})
    logger.add(sink, level=level.upper(), format="{message}", backtrace=False, diagnose=False, catch=True)
    enabled = logger.level(level.upper()).no <= logger.level("INFO").no
    return sink, RequestLog(sink, enabled=enabled, component=component)
