"""The source interface: every source answers "this signal's series on this grid, start to end".

Prometheus, replay frames and tests all return :class:`SeriesFrame` for a signal, so detection
never knows where data came from. :class:`LiveWindow` keeps the trailing live window and asks a
source only for what is new each cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import numpy as np
import pandas as pd

from analyzer.frame import SeriesFrame
from analyzer.signals import SignalSpec


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
    """

    spec: SignalSpec
    window_s: float
    step_s: float
    values: pd.DataFrame = field(default_factory=pd.DataFrame)
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    # The last label mapping merged: a source that returns the same mapping each cycle is not re-read.
    _seen_labels: object = field(default=None, init=False, repr=False)

    def update(self, source: Source, now: datetime) -> SeriesFrame:
        """The window ending at ``now`` (aligned), fetching only new steps."""
        end = align(now, self.step_s)
        start = end - timedelta(seconds=self.window_s)
        if not self.values.empty:
            last = pd.Timestamp(self.values.index[-1]).to_pydatetime()
            start = max(start, last - timedelta(seconds=self.step_s))
        fresh = source.fetch(self.spec, start, end, self.step_s)
        if fresh.labels is not self._seen_labels:
            self.labels.update({k: dict(v) for k, v in fresh.labels.items() if k not in self.labels})
            self._seen_labels = fresh.labels
        if self.values.empty:
            combined = fresh.values
        else:
            cut = fresh.values.index[0] if len(fresh.values) else self.values.index[-1] + pd.Timedelta(1)
            old = self.values.loc[self.values.index < cut]
            combined = pd.concat([old, fresh.values], axis=0, join="outer")
        index = grid_index(end - timedelta(seconds=self.window_s), end, self.step_s)
        self.values = combined.reindex(index).astype(np.float32)
        return SeriesFrame(self.values, self.labels)
