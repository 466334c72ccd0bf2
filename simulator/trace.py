"""Arrival traces: real request timestamps and token counts, replayed as the fleet's traffic.

A trace is a CSV file with a header naming a timestamp column (ISO 8601 or epoch seconds) and a
prompt and an output token column (``TIMESTAMP,ContextTokens,GeneratedTokens`` as the Azure LLM
inference traces publish them, or ``timestamp,prompt_tokens,output_tokens``). Both traffic
generators replay it the same way (``oximeter traffic --trace`` live, ``oximeter sim history``
and scenarios with a ``trace:`` key in virtual time):

- **rate**: the trace's time axis is stretched (or compressed) so that its busiest minute, at
  the busiest hour, carries ``peak_utilisation`` × the fleet's capacity (``capacity_rps``);
  shorter bursts keep their shape;
- **days**: the stretched trace is tiled end to end, anchored to the clock, and thinned by the
  daily and weekly shape (an arrival at a quieter hour is kept with probability level / peak);
- **nodes**: arrivals go round-robin over the nodes, as a load balancer in front of them would.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from oximeter.errors import ConfigError
from simulator.load_shape import day_multiplier

if TYPE_CHECKING:
    from simulator.scenario import Scenario

# Accepted header names (case-insensitive) of each column, the Azure traces' first.
_TIME = ("timestamp", "time", "arrival_time")
_PROMPT = ("contexttokens", "prompt_tokens", "input_tokens", "context_tokens")
_OUTPUT = ("generatedtokens", "output_tokens", "completion_tokens", "generated_tokens")
# "Peak" load is the busiest minute's: what a fleet is provisioned for, since real arrivals burst
# far above their hourly mean (3× in the Azure code trace) and a minute at 2× capacity is an overload.
PEAK_WINDOW_S = 60.0


class TraceError(ConfigError):
    """A trace file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    """One trace: arrival offsets (seconds from the first, sorted) and each request's tokens."""

    path: str
    offsets_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def period_s(self) -> float:
        """How long one pass lasts: first to last arrival plus one mean gap, so tiles join evenly."""
        n = len(self.offsets_s)
        span = float(self.offsets_s[-1])
        return span + span / max(1, n - 1) if span > 0 else float(n)

    @property
    def mean_rps(self) -> float:
        """Arrivals per second over one pass."""
        return len(self.offsets_s) / self.period_s

    def peak_rps(self, speed: float, window_s: float = PEAK_WINDOW_S) -> float:
        """The busiest ``window_s`` of the trace tiled end to end and played ``speed`` times faster,
        in arrivals per second."""
        n, span = len(self.offsets_s), window_s * speed  # the window in the trace's own seconds
        whole, rest = divmod(span, self.period_s)
        at = np.concatenate([self.offsets_s, self.offsets_s + self.period_s])
        most = int((np.searchsorted(at, self.offsets_s + rest) - np.arange(n)).max())
        return (whole * n + most) / window_s

    def speed_for(self, peak_rps: float) -> float:
        """How much faster to play the trace so that its busiest window carries ``peak_rps``."""
        lo, hi = 1e-6, 1e6  # the windowed peak grows with the speed: bisect (geometrically)
        for _ in range(100):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if self.peak_rps(mid) < peak_rps else (lo, mid)
        return math.sqrt(lo * hi)


def _column(header: list[str], names: tuple[str, ...], what: str, path: str) -> int:
    lowered = [h.strip().lower() for h in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    raise TraceError([f"line 1: no {what} column (one of: {', '.join(names)}); header is {header}"], path)


def _when(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        stamp = datetime.fromisoformat(text.strip())
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _tokens(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("negative")
    return value


def load_trace(path: str | Path) -> Trace:
    """Read a trace CSV; ``TraceError`` names the file and the line of the first problem."""
    return _load(str(Path(path).resolve()))


@cache
def _load(path: str) -> Trace:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = csv.reader(fh)
            header = next(rows, None)
            if not header:
                raise TraceError(["line 1: empty file, expected a header"], path)
            cols = (_column(header, _TIME, "timestamp", path), _column(header, _PROMPT, "prompt token", path),
                    _column(header, _OUTPUT, "output token", path))
            times: list[float] = []
            prompts: list[int] = []
            outputs: list[int] = []
            for row in rows:
                line = rows.line_num
                if not row or not any(cell.strip() for cell in row):
                    continue
                try:
                    when, prompt, output = (row[c] for c in cols)
                except IndexError:
                    raise TraceError([f"line {line}: {len(row)} fields, the header has {len(header)}"],
                                     path) from None
                try:
                    times.append(_when(when))
                except ValueError:
                    raise TraceError([f"line {line}: bad timestamp {when!r}"], path) from None
                try:
                    prompts.append(_tokens(prompt))
                    outputs.append(_tokens(output))
                except ValueError:
                    raise TraceError([f"line {line}: token counts must be whole numbers >= 0, "
                                      f"got {prompt!r}, {output!r}"], path) from None
    except OSError as exc:
        raise TraceError([f"cannot read file: {exc.strerror}"], path) from None
    except UnicodeDecodeError as exc:
        raise TraceError([f"not UTF-8 text (byte {exc.start})"], path) from None
    except csv.Error as exc:
        raise TraceError([f"line {rows.line_num}: {exc}"], path) from None
    if len(times) < 2:
        raise TraceError([f"needs at least 2 requests, found {len(times)}"], path)
    at = np.asarray(times, np.float64)
    order = np.argsort(at, kind="stable")
    return Trace(path, at[order] - at[order[0]], np.asarray(prompts, np.int64)[order],
                 np.asarray(outputs, np.int64)[order])


def file_digest(path: str | Path) -> str:
    """The trace file's content hash (history caches key on it)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise TraceError([f"cannot read file: {exc.strerror}"], str(path)) from None


@dataclass(frozen=True)
class Capacity:
    """What bounds one node's throughput (the engine model's saturated batch)."""

    max_num_seqs: int
    max_concurrency: int
    kv_blocks: int
    block_tokens: int
    prefill_s_per_token: float
    decode_s_per_token: float
    decode_batch_factor: float
    prefix_hit_rate: float

    @classmethod
    def of(cls, engine: Any, max_concurrency: int) -> Capacity:
        """From engine settings (a scenario's ``engine:`` or the ``sim`` section: same field names)."""
        fields = {f: getattr(engine, f) for f in cls.__dataclass_fields__ if f != "max_concurrency"}
        return cls(max_concurrency=max_concurrency, **fields)

    def rps(self, prompt_tokens: float, output_tokens: float) -> float:
        """Requests per second one node completes when every request has these (mean) lengths,
        batch full.

        The batch is as large as the engine, the gateway's concurrency and the KV pool (at the mean
        request's size) allow; each request then costs its uncached prefill plus its output tokens
        at the full batch's per-token decode time shared by the batch.
        """
        blocks = max(1.0, math.ceil((prompt_tokens + output_tokens) / self.block_tokens))
        batch = max(1, min(self.max_num_seqs, self.max_concurrency, int(self.kv_blocks // blocks)))
        per_token_s = self.decode_s_per_token * (1 + self.decode_batch_factor * (batch - 1)) / batch
        prefill_s = prompt_tokens * (1 - self.prefix_hit_rate) * self.prefill_s_per_token
        return 1.0 / (output_tokens * per_token_s + prefill_s)


def capacity_rps(trace: Trace, cap: Capacity, max_prompt: int, max_output: int) -> float:
    """Requests per second one node completes with the trace's mean request (``Capacity.rps``)."""
    prompt = float(np.minimum(trace.prompt_tokens, max_prompt).mean())
    output = float(np.clip(trace.output_tokens, 1, max_output).mean())
    return cap.rps(prompt, output)


Arrivals = tuple[np.ndarray, np.ndarray, np.ndarray]  # times, prompt tokens, output tokens


def schedule(trace: Trace, peak_rps: float, start_s: float, end_s: float,
             level: Callable[[np.ndarray], np.ndarray], seed: int) -> Arrivals:
    """Arrival times in ``[start_s, end_s)`` and their prompt and output tokens, whole fleet.

    The trace runs fast (or slow) enough that its busiest minute carries ``peak_rps``, tiled from
    clock zero (so any window of the same clock sees the same traffic), and each arrival is kept
    with probability ``level(t)`` (0-1: the hour's traffic relative to the busiest hour).
    """
    scale = trace.speed_for(peak_rps)
    period = trace.period_s / scale
    first, last = math.floor(start_s / period), math.floor(end_s / period)
    tiles = np.arange(first, last + 1, dtype=np.float64)
    at = (tiles[:, None] * period + trace.offsets_s[None, :] / scale).ravel()
    index = np.tile(np.arange(len(trace.offsets_s)), len(tiles))
    # Each tile thins with its own draws, so every window over the same clock times keeps the same arrivals.
    n = len(trace.offsets_s)
    draws = np.concatenate([np.random.default_rng([seed, int(tile) % 2**32]).random(n) for tile in tiles])
    inside = (at >= start_s) & (at < end_s)
    at, index, draws = at[inside], index[inside], draws[inside]
    keep = draws < level(at)
    return at[keep], trace.prompt_tokens[index[keep]], trace.output_tokens[index[keep]]


_MINUTES = np.arange(24 * 60 + 1) / 60.0
_DAY_TABLE = np.array([day_multiplier(h) for h in _MINUTES])


def clock_level(day_s: float, *, daily_shape: bool = True, weekend_factor: float = 1.0,
                start_hour: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    """Traffic at clock time t (seconds; days of ``day_s`` from the epoch, a Thursday) relative to the
    busiest hour of the week, 0-1: the daily shape of ``simulator.load_shape`` and the weekend factor."""
    peak = (float(_DAY_TABLE.max()) if daily_shape else 1.0) * max(1.0, weekend_factor)

    def level(t: np.ndarray) -> np.ndarray:
        days = t / day_s + start_hour / 24.0
        shape = np.interp((days % 1.0) * 24.0, _MINUTES, _DAY_TABLE) if daily_shape else np.ones_like(t)
        weekend = ((np.floor(days).astype(np.int64) + 3) % 7) >= 5
        return np.asarray(shape * np.where(weekend, weekend_factor, 1.0) / peak)

    return level


def scenario_arrivals(sc: Scenario, origin_s: float, horizon_s: float, node_index: int,
                      max_prompt: int, max_output: int) -> Arrivals:
    """One node's share (round-robin) of scenario ``sc``'s trace traffic over ``horizon_s`` seconds
    from clock time ``origin_s``; times count from ``origin_s``."""
    assert sc.trace is not None
    trace = load_trace(sc.trace.file)
    cap = Capacity.of(sc.engine, max_concurrency=sc.gateway.max_concurrency)
    peak = sc.trace.peak_utilisation * capacity_rps(trace, cap, max_prompt, max_output) * sc.nodes
    level = clock_level(86400.0, daily_shape=sc.daily_shape, weekend_factor=sc.weekend_factor)
    at, prompt, output = schedule(trace, peak, origin_s, origin_s + horizon_s, level, sc.seed)
    share = slice(node_index, None, sc.nodes)
    return at[share] - origin_s, np.minimum(prompt[share], max_prompt), np.minimum(output[share], max_output)
