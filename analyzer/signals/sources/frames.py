"""The frame source: replay recorded data — the simulator's Parquet history or exported signal
frames — in accelerated time, with the same ``fetch`` as the Prometheus source.

A step-aligned grid is sampled the way a PromQL range query evaluates: the latest sample at or
before each step within the 5-minute lookback, so both sources give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.signals.frame import SeriesFrame, series_key
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.base import ReplayClock, grid_index
from analyzer.signals.spec import SignalSpec
from analyzer.signals.tables import InputError, parse_table, read_table
from oximeter.promql import labels_match, parse_matchers

LOOKBACK_S = 300.0  # Prometheus's default lookback delta
_LOOKBACK_NS = int(LOOKBACK_S * 1e9)


@dataclass(frozen=True)
class Rows:
    """A recorded frame prepared for sampling: its times (ns), its values, and per row and column
    the latest row at or before it that holds a sample (-1: none yet)."""

    frame: pd.DataFrame
    times_ns: np.ndarray
    values: np.ndarray
    latest: np.ndarray
    # The forward-fill limit in rows when the frame's steps are all equal (None: irregular frame).
    regular_limit: int | None

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Rows:
        """``frame`` (time-sorted) prepared once."""
        times_ns = pd.DatetimeIndex(frame.index).as_unit("ns").asi8
        values = frame.to_numpy()
        positions = np.arange(len(times_ns), dtype=np.int64)[:, None]
        latest = np.maximum.accumulate(np.where(np.isnan(values), -1, positions), axis=0)
        steps = np.diff(times_ns)
        regular = len(steps) > 0 and bool((steps == steps[0]).all())
        return cls(frame, times_ns, values, latest,
                   _fill_limit(pd.Timedelta(int(steps[0]), unit="ns")) if regular else None)

    def _limit(self, lo: int, hi: int) -> int | None:
        """The forward-fill limit (rows) of the window ``[lo, hi)``: the lookback in its median step."""
        if hi - lo < 2:
            return None
        if self.regular_limit is not None:
            return self.regular_limit
        native = pd.Series(pd.DatetimeIndex(self.frame.index[lo:hi])).diff().median()
        return _fill_limit(native) if pd.notna(native) else None

    def sample(self, grid: pd.DatetimeIndex) -> pd.DataFrame:
        """The frame sampled on ``grid`` (float32), all-empty columns left out."""
        columns = self.frame.columns
        if not len(grid):
            return pd.DataFrame(index=grid, columns=columns[:0], dtype=np.float32)
        at = grid.as_unit("ns").asi8
        # The window a query reads: samples after the first step's lookback, up to the last step.
        lo = int(np.searchsorted(self.times_ns, at[0] - _LOOKBACK_NS, side="right"))
        hi = int(np.searchsorted(self.times_ns, at[-1], side="right"))
        if hi <= lo:
            return pd.DataFrame(index=grid, columns=columns[:0], dtype=np.float32)
        row = np.searchsorted(self.times_ns, at, side="right") - 1
        near = (row >= lo) & (at - self.times_ns[np.maximum(row, 0)] <= _LOOKBACK_NS)
        held = self.latest[np.maximum(row, 0)]
        found = near[:, None] & (held >= lo)
        limit = self._limit(lo, hi)
        if limit is not None:
            found &= (row[:, None] - held) <= limit
        keep = found.any(axis=0)
        if keep.all():  # every series has a sample on the grid (the usual case): no column left out
            picked = np.take_along_axis(self.values, np.maximum(held, 0), axis=0)
            out = np.where(found, picked, np.nan).astype(np.float32)
            return pd.DataFrame(out, index=grid, columns=columns, copy=False)
        picked = self.values[np.maximum(held[:, keep], 0), np.flatnonzero(keep)[None, :]]
        out = np.where(found[:, keep], picked, np.nan).astype(np.float32)
        return pd.DataFrame(out, index=grid, columns=columns[keep], copy=False)


def _fill_limit(native: pd.Timedelta) -> int:
    return max(1, int(pd.Timedelta(seconds=LOOKBACK_S) / native))


class FrameSource:
    """Signals from frames: given directly, read from a signal file, or derived from raw history
    by evaluating each signal's query expression (``SignalSpec.expr``)."""

    def __init__(self, signals: Mapping[str, SeriesFrame] | None = None, raw: RawStore | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self._signals: dict[str, SeriesFrame] = dict(signals or {})
        self._given = frozenset(self._signals)
        self._raw = raw
        # Per signal, its recorded frame as arrays a fetch reads positions in.
        self._rows: dict[str, Rows] = {}
        first = self._first_timestamp()
        self._clock = clock or ReplayClock(first).now

    @classmethod
    def from_history(cls, directory: str | Path, *, speed: float = 60.0,
                     start: datetime | None = None) -> FrameSource:
        """Replay ``oximeter sim history`` output (``series.parquet`` + ``samples.parquet``)."""
        raw = RawStore.from_history(directory)
        clock = ReplayClock(start or raw.index[0].to_pydatetime(), speed).now
        return cls(raw=raw, clock=clock)

    @classmethod
    def from_signal_file(cls, path: str | Path, *, speed: float = 60.0, start: datetime | None = None,
                         selector: str = "") -> FrameSource:
        """Replay a long signal file: ``timestamp, signal, <labels…>, value`` (CSV or Parquet);
        ``selector``: only the series a shard's PromQL label matchers select."""
        table = read_table(path)
        if "signal" not in table.columns:
            raise InputError(path, "a signal file needs a 'signal' column")
        matchers = parse_matchers(selector)
        signals: dict[str, SeriesFrame] = {}
        for name, part in table.groupby("signal", sort=True):
            part = part.drop(columns=["signal"]).dropna(axis=1, how="all")
            loaded = parse_table(Path(path), part)
            frame = SeriesFrame(loaded.values, loaded.labels)
            keep = [c for c in frame.values.columns if labels_match(frame.labels_of(c), matchers)]
            signals[str(name)] = SeriesFrame(frame.values[keep], {c: frame.labels_of(c) for c in keep})
        source = cls(signals)
        first = source._first_timestamp()
        source._clock = ReplayClock(start or first, speed).now
        return source

    def _first_timestamp(self) -> datetime:
        if self._raw is not None:
            return pd.Timestamp(self._raw.index[0]).to_pydatetime()
        starts = [f.values.index[0] for f in self._signals.values() if len(f.values.index)]
        return pd.Timestamp(min(starts) if starts else pd.Timestamp.now(tz="UTC")).to_pydatetime()

    def now(self) -> datetime:
        """The replayed present."""
        return self._clock()

    def query_key(self, spec: SignalSpec) -> Hashable:
        """What ``spec``'s frame depends on: a frame given by name is the name's; one derived from
        raw history is its query's, the same for every signal that asks that query."""
        if spec.name in self._given or self._raw is None or spec.expr is None:
            return spec.name
        return ("query", spec.promql)

    def signal_frame(self, spec: SignalSpec) -> SeriesFrame:
        """The whole recorded frame of ``spec`` (derived once from raw history, then cached)."""
        found = self._signals.get(spec.name)
        if found is not None:
            return found
        if self._raw is None or spec.expr is None:
            return SeriesFrame(pd.DataFrame(index=pd.DatetimeIndex([], tz="UTC"), dtype=np.float32), {})
        data = spec.expr.evaluate(self._raw)
        keys = [series_key(lab) for lab in data.labels]
        values = pd.DataFrame(data.values, index=self._raw.index, columns=keys)
        values = values.loc[:, ~values.columns.duplicated()]
        frame = SeriesFrame(values, {k: dict(lab) for k, lab in zip(keys, data.labels, strict=True)})
        self._signals[spec.name] = frame
        return frame

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        """``spec`` on the aligned grid [start, end]: the latest sample within the lookback.

        Sampled as a backfilled Prometheus without staleness markers answers: NaN means "no
        sample", each series carries its latest sample forward for the lookback (counted in the
        recorded frame's native steps, from the first sample after ``start`` − lookback), and each
        grid step takes the latest such row within the lookback. Columns with no sample on the grid
        are left out. A replay fetches a few steps every cycle, so this reads positions in arrays
        prepared once per frame rather than filtering the whole recorded frame.
        """
        frame = self.signal_frame(spec)
        grid = grid_index(start, end, step_s)
        values = frame.values
        if values.empty:  # no series, or no samples: every step missing
            missing = np.full((len(grid), len(values.columns)), np.nan, dtype=np.float32)
            return SeriesFrame(pd.DataFrame(missing, index=grid, columns=values.columns, copy=False), {})
        rows = self._rows.get(spec.name)
        if rows is None or rows.frame is not values:
            rows = self._rows[spec.name] = Rows.of(values)
        return SeriesFrame(rows.sample(grid), frame.labels)


def write_signal_file(frames: Mapping[str, SeriesFrame], path: str | Path) -> None:
    """Export signal frames in the long format :meth:`FrameSource.from_signal_file` reads."""
    parts = []
    for name, frame in frames.items():
        long = frame.values.rename_axis("timestamp").reset_index().melt(
            id_vars="timestamp", var_name="_key", value_name="value").dropna(subset=["value"])
        keys = [str(c) for c in frame.values.columns]
        labels = pd.DataFrame([frame.labels_of(k) for k in keys]).assign(_key=keys)
        merged = long.merge(labels, on="_key", how="left").drop(columns=["_key"])
        parts.append(merged.assign(signal=name))
    columns = ["timestamp", "signal", "value"]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    path = Path(path)
    if path.suffix.lower() == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
