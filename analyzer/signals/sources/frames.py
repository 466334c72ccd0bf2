"""The frame source: replay recorded data — the simulator's Parquet history or exported signal
frames — in accelerated time, with the same ``fetch`` as the Prometheus source.

A step-aligned grid is sampled the way a PromQL range query evaluates: the latest sample at or
before each step within the 5-minute lookback, so both sources give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
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


class FrameSource:
    """Signals from frames: given directly, read from a signal file, or derived from raw history
    by evaluating each signal's query expression (``SignalSpec.expr``)."""

    def __init__(self, signals: Mapping[str, SeriesFrame] | None = None, raw: RawStore | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self._signals: dict[str, SeriesFrame] = dict(signals or {})
        self._given = frozenset(self._signals)
        self._raw = raw
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
        """``spec`` on the aligned grid [start, end]: the latest sample within the lookback."""
        frame = self.signal_frame(spec)
        grid = grid_index(start, end, step_s)
        values = frame.values
        if values.empty:
            return SeriesFrame(pd.DataFrame(index=grid, columns=values.columns, dtype=np.float32), {})
        window = values.loc[(values.index > grid[0] - pd.Timedelta(seconds=LOOKBACK_S))
                            & (values.index <= grid[-1])] if len(grid) else values.iloc[:0]
        # NaN means "no sample": each series carries its latest sample forward for the lookback
        # (as a backfilled Prometheus without staleness markers answers), then the grid samples it.
        native = pd.Series(window.index).diff().median()
        limit = max(1, int(pd.Timedelta(seconds=LOOKBACK_S) / native)) if pd.notna(native) else None
        window = window.ffill(limit=limit)
        sampled = window.reindex(grid, method="ffill", tolerance=pd.Timedelta(seconds=LOOKBACK_S))
        sampled = sampled.dropna(axis=1, how="all").astype(np.float32)
        # The recorded frame's labels cover every column (keys not in it parse themselves).
        return SeriesFrame(sampled, frame.labels)


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
