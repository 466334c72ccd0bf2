"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` each request carries.

A valid ``traceparent`` from the client is passed upstream unchanged: the gateway records no span
of its own, so the client's span stays the engine's parent. A missing or invalid one (the spec
says to restart the trace then) is replaced by a new one, so every request reaching the engine and
every request log line carries a trace id. Parsing is a regular expression rather than the
OpenTelemetry SDK: the gateway only reads and writes one header, on the hot path, without spans.
"""

from __future__ import annotations

import random
import re

# version-trace_id-parent_id-flags, lower-case hex; a later version may append fields after a dash.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_INVALID_VERSION = "ff"
_ZERO_TRACE_ID = "0" * 32
_ZERO_PARENT_ID = "0" * 16
# "sampled": the gateway logs every request with its trace id, so the trace is worth keeping
# downstream too (an engine with a parent-based sampler then records its spans).
_SAMPLED = "01"
# Mersenne Twister seeded from the OS at start-up: unpredictable enough for ids that carry no
# authority, and far cheaper per request than os.urandom (see gateway.app._RequestIds).
_random = random.Random()


class TraceContext:
    """One request's ``traceparent`` header and its trace id; ``received``: the client sent it."""

    __slots__ = ("received", "trace_id", "traceparent")

    def __init__(self, traceparent: str, trace_id: str, received: bool) -> None:
        self.traceparent = traceparent
        self.trace_id = trace_id
        self.received = received


def parse_traceparent(value: str | None) -> TraceContext | None:
    """The context of a valid ``traceparent`` header value, else ``None``."""
    if value is None:
        return None
    value = value.strip(" \t")
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == _INVALID_VERSION or trace_id == _ZERO_TRACE_ID or parent_id == _ZERO_PARENT_ID:
        return None
    if version == "00" and rest is not None:
        return None  # version 00 has exactly four fields
    return TraceContext(value, trace_id, received=True)


def new_trace() -> TraceContext:
    """A new version-00 ``traceparent`` with random, never all-zero trace and parent ids."""
    trace_id = f"{_random.getrandbits(128) or 1:032x}"
    parent_id = f"{_random.getrandbits(64) or 1:016x}"
    return TraceContext(f"00-{trace_id}-{parent_id}-{_SAMPLED}", trace_id, received=False)


def trace_of(value: str | None) -> TraceContext:
    """The request's trace: the client's ``traceparent`` when valid, a new one otherwise."""
    return parse_traceparent(value) or new_trace()
