"""The source interface: every source answers "this signal's series on this grid, start to end".

Prometheus, replay frames and tests all return :class:`SeriesFrame` for a signal, so detection
never knows where data came from. :class:`LiveWindow` keeps the trailing live window and asks a
source only for what is new each cycle.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import numpy as np
import pandas as pd

from analyzer.signals.frame import SeriesFrame, all_float32, time_index
from analyzer.signals.spec import SignalSpec


class Source(Protocol):
    """Anything that can return a signal's series on a step-aligned grid."""

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        """Samples of ``spec`` at every multiple of ``step_s`` in [start, end] (NaN where missing)."""
        ...

    def now(self) -> datetime:
        """The source's present (wall time, or replay time)."""
        ...


def align(moment: datetime, step_s: float) -> datetime:
    """``moment`` rounded down to a multiple of ``step_s`` since the epoch (step-aligned queries
    let Prometheus and caches reuse results and make every source agree on timestamps)."""
    seconds = moment.timestamp()
    return datetime.fromtimestamp(seconds - seconds % step_s, tz=UTC)


# An index is immutable, and in one cycle every signal's window asks for the same few grids.
@functools.lru_cache(maxsize=512)
def grid_index(start: datetime, end: datetime, step_s: float) -> pd.DatetimeIndex:
    """The aligned grid covering [start, end]."""
    first = align(start, step_s)
    if first < start:
        first += timedelta(seconds=step_s)
    return pd.date_range(first, align(end, step_s), freq=pd.Timedelta(seconds=step_s))


@dataclass
class ReplayClock:
    """Replay time: ``start`` plus wall time elapsed since creation × ``speed``."""

    start: datetime
    speed: float = 60.0
    monotonic: Callable[[], float] = time.monotonic
    _origin: float = field(default=-1.0, init=False)

    def __post_init__(self) -> None:
        self._origin = self.monotonic()

    def now(self) -> datetime:
        """The replayed present."""
        return self.start + timedelta(seconds=(self.monotonic() - self._origin) * self.speed)


@dataclass
class LiveWindow:
    """The trailing ``window_s`` of one signal, extended incrementally from a source.

    Each :meth:`update` fetches only the steps after the last one held (plus one step of overlap,
    since a store's most recent point may still change), then drops what fell out of the window.
    A window that lies in the past (the same time a day or a week ago) may read ``ahead_s`` beyond
    its end in one query, up to what the caller says has settled: those steps will not change, and
    one query per ``ahead_s`` replaces one per cycle (the same-time windows were a third of the
    analyzer's queries).
    """

    spec: SignalSpec
    window_s: float
    step_s: float
    ahead_s: float = 0.0
    values: pd.DataFrame = field(default_factory=pd.DataFrame)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # The last label mapping merged: a source that returns the same mapping each cycle is not re-read.
    _seen_labels: object = field(default=None, init=False, repr=False)
    # What is held: ``values`` plus, with ``ahead_s``, the settled steps after its end; and its rows'
    # times in epoch nanoseconds (compared as integers: a cycle reads them a dozen times).
    _held: pd.DataFrame = field(default_factory=pd.DataFrame, init=False, repr=False)
    _times: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64), init=False, repr=False)

    def update(self, source: Source, now: datetime, *, settled: datetime | None = None) -> SeriesFrame:
        """The window ending at ``now`` (aligned), fetching only new steps (and, with ``ahead_s``,
        up to ``ahead_s`` more of them, none after ``settled``)."""
        end = align(now, self.step_s)
        first = end - timedelta(seconds=self.window_s)
        end_ns = _epoch_ns(end)
        if self._held.empty or self._times[-1] < end_ns:
            until = end
            if self.ahead_s > 0 and settled is not None:
                until = max(end, min(end + timedelta(seconds=self.ahead_s), align(settled, self.step_s)))
            self._held = self._read(source, first, until)
            self._times = grid_ns(first, until, self.step_s)
        index = grid_index(first, end, self.step_s)
        grid, held = grid_ns(first, end, self.step_s), self._times
        if held[0] == grid[0] and held[-1] == end_ns:  # what is held is the window
            self.values = self._held
            return SeriesFrame(self.values, self.labels)
        # Read ahead: the window is a part of what is held, a slice of it (not a copy) where what is
        # held is on the window's grid.
        lo = int(held.searchsorted(grid[0]))
        hi = int(held.searchsorted(end_ns, side="right"))
        part = self._held.iloc[lo:hi]
        self._held, self._times = self._held.iloc[lo:], held[lo:]
        self.values = (part.set_axis(index, axis=0) if np.array_equal(held[lo:hi], grid)
                       else self._held.reindex(index))
        return SeriesFrame(self.values, self.labels)

    def _read(self, source: Source, first: datetime, until: datetime) -> pd.DataFrame:
        """What is held, extended to ``until`` by what is new (one step of overlap), on the grid
        [first, until]."""
        held = self._held
        start = first
        if not held.empty:
            start = max(first, _from_epoch_ns(int(self._times[-1])) - timedelta(seconds=self.step_s))
        fresh = source.fetch(self.spec, start, until, self.step_s)
        if fresh.labels is not self._seen_labels:
            self.labels.update({k: dict(v) for k, v in fresh.labels.items() if k not in self.labels})
            self._seen_labels = fresh.labels
        grid = grid_index(first, until, self.step_s)
        new = fresh.values
        if held.empty:
            combined = new
        else:
            new_ns = time_index(new.index).as_unit("ns").asi8
            cut = new_ns[0] if len(new_ns) else self._times[-1] + 1
            kept = int(self._times.searchsorted(cut))
            stacked = _stacked(held, self._times, kept, new, new_ns, grid, grid_ns(first, until, self.step_s))
            if stacked is not None:
                return stacked
            combined = pd.concat([held.iloc[:kept], new], axis=0, join="outer")
        if combined.index.equals(grid) and all_float32(combined):
            return combined
        return combined.reindex(grid).astype(np.float32)


def _epoch_ns(moment: datetime) -> int:
    """``moment`` (aware) in nanoseconds since the epoch."""
    return int(pd.Timestamp(moment).value)


def _from_epoch_ns(ns: int) -> datetime:
    """The aware UTC datetime of ``ns`` since the epoch."""
    return pd.Timestamp(ns, unit="ns", tz=UTC).to_pydatetime()


@functools.lru_cache(maxsize=512)
def grid_ns(start: datetime, end: datetime, step_s: float) -> np.ndarray:
    """:func:`grid_index`'s times in epoch nanoseconds (read-only: cached and shared)."""
    out = grid_index(start, end, step_s).as_unit("ns").asi8.copy()
    out.flags.writeable = False
    return out


def _stacked(held: pd.DataFrame, times: np.ndarray, kept: int, new: pd.DataFrame, new_ns: np.ndarray,
             grid: pd.DatetimeIndex, grid_times: np.ndarray) -> pd.DataFrame | None:
    """The steady cycle's window without a concat: the first ``kept`` rows held (at ``times``),
    then what is new (at ``new_ns``), less the oldest rows that fell out of the window, when that
    is ``grid`` row for row and the new steps bring no series that is not held (a fetch leaves out
    the series with no sample in its steps: those are NaN here, as the outer concat would leave
    them). None otherwise."""
    gone = kept + len(new_ns) - len(grid_times)  # the oldest held rows no longer in the window
    if gone < 0 or gone > kept or kept > len(times):
        return None
    if not (np.array_equal(times[gone:kept], grid_times[:kept - gone])
            and np.array_equal(new_ns, grid_times[kept - gone:])):
        return None
    at = None
    if not new.columns.equals(held.columns):
        if not (held.columns.is_unique and new.columns.is_unique):
            return None
        at = held.columns.get_indexer(new.columns)
        if (at < 0).any():
            return None
    out = np.empty((len(grid), len(held.columns)), dtype=np.float32)
    out[:kept - gone] = held.to_numpy(np.float32)[gone:kept]
    if at is None:
        out[kept - gone:] = new.to_numpy(np.float32)
    else:
        out[kept - gone:] = np.nan
        out[kept - gone:, at] = new.to_numpy(np.float32)
    return pd.DataFrame(out, index=grid, columns=held.columns, copy=False)


def window_key(source: Source, spec: SignalSpec) -> Hashable:
    """What ``source``'s answer for ``spec`` depends on: its ``query_key(spec)`` where it has one
    (a store or raw history answers by query, so two signals asking one query get the same data),
    else the signal's name."""
    by_query: Callable[[SignalSpec], Hashable] | None = getattr(source, "query_key", None)
    return spec.name if by_query is None else by_query(spec)


@dataclass
class WindowPool:
    """Live windows shared by the signals that read the same data (the same ``key``, e.g. one query):
    each is fetched once a cycle however many signals (or traffic guards) read it."""

    key: Callable[[SignalSpec], Hashable]
    windows: dict[tuple[Hashable, float, float, float, float], LiveWindow] = field(default_factory=dict)

    def window(self, spec: SignalSpec, window_s: float, step_s: float, *, ahead_s: float = 0.0,
               lag_s: float = 0.0) -> LiveWindow:
        """The window of ``spec``'s data over ``window_s``, ``lag_s`` behind the present (the
        same-time windows a day and a week back are two), the one already held where there is one."""
        key = (self.key(spec), window_s, step_s, ahead_s, lag_s)
        found = self.windows.get(key)
        if found is None:
            found = self.windows[key] = LiveWindow(spec, window_s, step_s, ahead_s=ahead_s)
        return found
