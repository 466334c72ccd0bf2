"""Incremental baselines for the live loop: a baseline is causal, so a row once computed never
changes; each cycle computes only the new rows (plus one of overlap) from the live window and the
cached same-time windows, with the same definitions as :func:`analyzer.detection.baselines.compute_baseline`
(and, where asked, :func:`analyzer.detection.hour_scale.hour_scale`).

What is held between cycles is arrays on the last live window's rows, not frames: a cycle moves the
rows it keeps and writes the new ones in place, and only the baseline it hands out is a frame.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from analyzer.detection.baselines import (
    IQR_TO_SIGMA,
    BaselinePolicy,
    ChangeWindow,
    combine_arrays,
    exclude,
    history_start_of,
)
from analyzer.detection.hour_scale import hour_scale
from analyzer.signals.frame import Baseline, time_index
from analyzer.signals.rolling import step_seconds
from analyzer.signals.windowstats import window_quantiles

# What each row of the live window holds: centre, scale, recent centre, recent scale, provisional.
_PARTS = ("center", "scale", "recent_center", "recent_scale", "provisional")


class BaselineTracker:
    """The baseline of one signal's live window, kept up to date cycle by cycle."""

    def __init__(self, policy: BaselinePolicy | None = None, overlap_rows: int = 1,
                 max_new_rows: int | None = None) -> None:
        self.policy = policy or BaselinePolicy()
        self.overlap_rows = overlap_rows
        # A cold start computes at most this many of the newest rows (older ones stay NaN, so
        # detection there falls back to static thresholds): a restart costs seconds, not minutes.
        self.max_new_rows = max_new_rows
        # The rows and columns the arrays below are held on (None: nothing computed yet).
        self._index: pd.DatetimeIndex | None = None
        self._columns: pd.Index | None = None
        self._held: dict[str, np.ndarray] = {}
        self._hour: np.ndarray | None = None
        self._like_nodes: Mapping[str, str] | None = None

    def update(self, values: pd.DataFrame, history: Mapping[float, pd.DataFrame], *,
               anomalous: pd.DataFrame | None = None, changes: Sequence[ChangeWindow] = (),
               like_nodes: Mapping[str, str] | None = None) -> Baseline:
        """The baseline for every row of ``values`` (a regular grid); only unseen rows, and
        unseen columns, are computed.

        ``like_nodes`` (column → like-node key, see :func:`analyzer.detection.hour_scale.hour_scale`; may be
        empty) asks for the hour scale as well, from ``history`` as given (anomalies and changes
        are not left out of it), for the same rows."""
        index = time_index(values.index)
        columns = values.columns
        # Where each row of the window was held (-1: not held): a row is known when held with the
        # same columns, all but the newest ``overlap_rows`` of them (the store may still change it).
        known = np.empty(0, dtype=np.int64)
        kept = known
        if self._index is not None and self._columns is not None and self._columns.equals(columns):
            was = self._index.get_indexer(index)
            known = np.flatnonzero(was >= 0)
            known = known[: max(0, len(known) - self.overlap_rows)]
            kept = was[known]
        fresh = np.ones(len(index), dtype=bool)
        fresh[known] = False
        todo = np.flatnonzero(fresh)
        if self.max_new_rows is not None and len(todo) > self.max_new_rows:
            todo = todo[-self.max_new_rows:]
        clean = exclude(values, anomalous, changes)
        windows = {lag: exclude(w, anomalous, changes) for lag, w in history.items()
                   if lag in self.policy.lags_s}
        new = self._rows(clean, values, windows, todo, kept)
        self._held = {part: _extended(self._held.get(part), kept, known, new[part], todo, len(index),
                                      False if part == "provisional" else np.nan)
                      for part in _PARTS}
        hour = None
        if like_nodes is None:
            self._hour = None  # not kept up to date: computed afresh when asked again
        else:
            hour = pd.DataFrame(self._hour_rows(values, history, todo, kept, known, like_nodes),
                                index=index, columns=columns, copy=False)
        self._index, self._columns = index, columns

        def frame(part: str) -> pd.DataFrame:
            return pd.DataFrame(self._held[part], index=index, columns=columns, copy=False)

        return Baseline(frame("center"), frame("scale"), hour_scale=hour, provisional=frame("provisional"))

    def learning(self) -> int:
        """How many series the newest row judged against their recent window alone: too young for
        a same-time baseline (learning their day)."""
        young = self._held.get("provisional")
        if young is None or not young.size:
            return 0
        return int(young[-1].sum())

    def _hour_rows(self, values: pd.DataFrame, history: Mapping[float, pd.DataFrame], todo: np.ndarray,
                   kept: np.ndarray, known: np.ndarray, like_nodes: Mapping[str, str]) -> np.ndarray:
        """The hour scale over ``values``' rows, computed for the rows the centre was (all of them
        where the like nodes changed since the last update: the floor of every row moves)."""
        index = time_index(values.index)
        if len(known) and (self._hour is None or like_nodes != self._like_nodes):
            known, kept, todo = known[:0], kept[:0], np.arange(len(index))
        self._like_nodes = dict(like_nodes)
        fresh = hour_scale(index[todo], values.columns, history, self.policy, like_nodes)
        if fresh is None:
            fresh = np.full((len(todo), len(values.columns)), np.nan, dtype=np.float32)
        self._hour = _extended(self._hour, kept, known, fresh, todo, len(index), np.nan)
        return self._hour

    def _rows(self, clean: pd.DataFrame, values: pd.DataFrame, windows: Mapping[float, pd.DataFrame],
              todo: np.ndarray, kept: np.ndarray) -> dict[str, np.ndarray]:
        """Every part of the baseline at rows ``todo`` of ``values`` (``kept``: where the rows
        still known were held, the last of them carrying the recent baseline forward)."""
        index = time_index(values.index)
        rows = index[todo]
        step = step_seconds(index) or 1.0
        data = clean.to_numpy(np.float32)
        # Recent: the window ending one sample before each row (as baselines.recent does).
        window = max(12, math.ceil(self.policy.recent_window_s / step))
        med, q25, q75 = window_quantiles(data, todo - window, window, (0.5, 0.25, 0.75),
                                         max(3, window // 2))
        rc, rs = med, (q75 - q25) / IQR_TO_SIGMA
        if len(kept):
            # Carry the last good recent baseline through excluded stretches.
            rc = _ffill(np.concatenate([self._held["recent_center"][kept[-1:]], rc]))[1:]
            rs = _ffill(np.concatenate([self._held["recent_scale"][kept[-1:]], rs]))[1:]
        else:
            rc, rs = _ffill(rc), _ffill(rs)
        seasonal = [self._seasonal(win, lag, rows, values.columns) for lag, win in windows.items()
                    if len(win.index)]
        starts = history_start_of(values.columns, [clean, *windows.values()])
        center, scale, young = combine_arrays(
            values.to_numpy(np.float32)[todo], [c for c, _ in seasonal], rc, rs, self.policy,
            rows.as_unit("ns").asi8.view("datetime64[ns]"), starts, [spread for _, spread in seasonal])
        return {"center": center, "scale": scale, "recent_center": rc, "recent_scale": rs,
                "provisional": young}

    def _seasonal(self, window: pd.DataFrame, lag_s: float, rows: pd.DatetimeIndex,
                  columns: pd.Index) -> tuple[np.ndarray, np.ndarray]:
        """Centred ±half-window median and IQR scale of ``window`` around each row − lag (NaN
        outside it), as ``baselines.seasonal_center`` and ``seasonal_spread``."""
        w_index = time_index(window.index)
        step = step_seconds(w_index) or 1.0
        half = max(0, round(self.policy.seasonal_half_window_s / step))
        targets = rows.as_unit("ns").asi8 - pd.Timedelta(seconds=lag_s).value  # ns since the epoch
        centre = np.rint((targets - w_index[0].as_unit("ns").value) / (step * 1e9))
        med, q25, q75 = window_quantiles(_columns_of(window, columns), centre.astype(np.int64) - half,
                                         2 * half + 1, (0.5, 0.25, 0.75), max(1, half))
        return med, (q75 - q25) / IQR_TO_SIGMA


def _columns_of(window: pd.DataFrame, columns: pd.Index) -> np.ndarray:
    """``window``'s values (float32) in ``columns``' order, NaN for a column it does not hold."""
    data = window.to_numpy(np.float32)
    if window.columns.equals(columns):
        return data
    if not (window.columns.is_unique and columns.is_unique):
        return window.reindex(columns=columns).to_numpy(np.float32)
    at = window.columns.get_indexer(columns)
    if not len(window.columns):
        return np.full((len(data), len(columns)), np.nan, dtype=np.float32)
    out = data[:, np.maximum(at, 0)]
    out[:, at < 0] = np.nan
    return out


def _ffill(values: np.ndarray) -> np.ndarray:
    """Each column's last value carried forward over the NaN after it (rows × columns)."""
    if not values.size:
        return values
    at = np.where(np.isnan(values), 0, np.arange(len(values))[:, None])
    np.maximum.accumulate(at, axis=0, out=at)
    return values[at, np.arange(values.shape[1])[None, :]]


def _extended(held: np.ndarray | None, kept: np.ndarray, known: np.ndarray, new: np.ndarray,
              todo: np.ndarray, rows: int, fill: object) -> np.ndarray:
    """The window's ``rows``: at ``known`` the held rows ``kept``, at ``todo`` the ``new`` ones,
    elsewhere (rows a cold start skipped) ``fill``."""
    dtype = new.dtype if held is None or not len(kept) else np.result_type(held, new)
    out = np.full((rows, new.shape[1]), fill, dtype=dtype)
    if held is not None and len(kept):
        out[known] = held[kept]
    out[todo] = new
    return out
