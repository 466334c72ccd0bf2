"""Incremental baselines for the live loop: a baseline is causal, so a row once computed never
changes; each cycle computes only the new rows (plus one of overlap) from the live window and the
cached same-time windows, with the same definitions as :func:`analyzer.detection.baselines.compute_baseline`
(and, where asked, :func:`analyzer.detection.hour_scale.hour_scale`).
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
    combine,
    exclude,
    history_start,
)
from analyzer.detection.hour_scale import hour_scale
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import step_seconds
from analyzer.signals.windowstats import window_quantiles


class BaselineTracker:
    """The baseline of one signal's live window, kept up to date cycle by cycle."""

    def __init__(self, policy: BaselinePolicy | None = None, overlap_rows: int = 1,
                 max_new_rows: int | None = None) -> None:
        self.policy = policy or BaselinePolicy()
        self.overlap_rows = overlap_rows
        # A cold start computes at most this many of the newest rows (older ones stay NaN, so
        # detection there falls back to static thresholds): a restart costs seconds, not minutes.
        self.max_new_rows = max_new_rows
        self._center = pd.DataFrame()
        self._scale = pd.DataFrame()
        self._recent_center = pd.DataFrame()
        self._recent_scale = pd.DataFrame()
        self._provisional = pd.DataFrame()
        self._hour_scale = pd.DataFrame()
        self._like_nodes: Mapping[str, str] | None = None

    def update(self, values: pd.DataFrame, history: Mapping[float, pd.DataFrame], *,
               anomalous: pd.DataFrame | None = None, changes: Sequence[ChangeWindow] = (),
               like_nodes: Mapping[str, str] | None = None) -> Baseline:
        """The baseline for every row of ``values`` (a regular grid); only unseen rows, and
        unseen columns, are computed.

        ``like_nodes`` (column → like-node key, see :func:`analyzer.detection.hour_scale.hour_scale`; may be
        empty) asks for the hour scale as well, from ``history`` as given (anomalies and changes
        are not left out of it), for the same rows."""
        index = pd.DatetimeIndex(values.index)
        cached = self._center
        same_columns = not cached.empty and cached.columns.equals(values.columns)
        if same_columns:
            known = index[index.isin(cached.index)]
            known = known[: max(0, len(known) - self.overlap_rows)]
        else:
            known = index[:0]
        todo = np.flatnonzero(~index.isin(known))
        if self.max_new_rows is not None and len(todo) > self.max_new_rows:
            todo = todo[-self.max_new_rows:]
        clean = exclude(values, anomalous, changes)
        windows = {lag: exclude(w, anomalous, changes) for lag, w in history.items()
                   if lag in self.policy.lags_s}
        center, scale, rc, rs, young = self._rows(clean, values, windows, todo, known)
        # The known rows' places in what is held (all held frames share one index).
        kept = cached.index.get_indexer(known) if len(known) else np.empty(0, dtype=np.int64)
        self._center = _extended(cached, kept, center, index)
        self._scale = _extended(self._scale, kept, scale, index)
        self._recent_center = _extended(self._recent_center, kept, rc, index)
        self._recent_scale = _extended(self._recent_scale, kept, rs, index)
        self._provisional = _extended(self._provisional, kept, young, index, fill=False)
        hour = None
        if like_nodes is not None:
            hour = self._hour_rows(values, history, todo, known, like_nodes)
        return Baseline(self._center, self._scale, hour_scale=hour, provisional=self._provisional)

    def learning(self) -> int:
        """How many series the newest row judged against their recent window alone: too young for
        a same-time baseline (learning their day)."""
        if self._provisional.empty:
            return 0
        return int(self._provisional.iloc[-1].to_numpy(bool).sum())

    def _hour_rows(self, values: pd.DataFrame, history: Mapping[float, pd.DataFrame], todo: np.ndarray,
                   known: pd.DatetimeIndex, like_nodes: Mapping[str, str]) -> pd.DataFrame:
        """The hour scale over ``values``' rows, computed for the rows the centre was (all of them
        where the like nodes changed since the last update: the floor of every row moves)."""
        index = pd.DatetimeIndex(values.index)
        if len(known) and (self._hour_scale.empty or like_nodes != self._like_nodes):
            known, todo = index[:0], np.arange(len(index))
        self._like_nodes = dict(like_nodes)
        rows = index[todo]
        fresh = hour_scale(rows, values.columns, history, self.policy, like_nodes)
        if fresh is None:
            fresh = np.full((len(rows), len(values.columns)), np.nan, dtype=np.float32)
        new = pd.DataFrame(fresh, index=rows, columns=values.columns, copy=False)
        self._hour_scale = (pd.concat([self._hour_scale.loc[known], new]) if len(known) else new
                            ).reindex(index)
        return self._hour_scale

    def _rows(self, clean: pd.DataFrame, values: pd.DataFrame, windows: Mapping[float, pd.DataFrame],
              todo: np.ndarray, known: pd.DatetimeIndex) -> tuple[pd.DataFrame, ...]:
        index = pd.DatetimeIndex(values.index)
        rows = index[todo]
        step = step_seconds(index) or 1.0
        data = clean.to_numpy(np.float32)
        # Recent: the window ending one sample before each row (as baselines.recent does).
        window = max(12, math.ceil(self.policy.recent_window_s / step))
        med, q25, q75 = window_quantiles(data, todo - window, window, (0.5, 0.25, 0.75),
                                         max(3, window // 2))
        rc = pd.DataFrame(med, index=rows, columns=values.columns, copy=False)
        rs = pd.DataFrame((q75 - q25) / IQR_TO_SIGMA, index=rows, columns=values.columns, copy=False)
        if len(known):
            # Carry the last good recent baseline through excluded stretches.
            rc = pd.concat([self._recent_center.loc[known[-1:]], rc]).ffill().iloc[1:]
            rs = pd.concat([self._recent_scale.loc[known[-1:]], rs]).ffill().iloc[1:]
        else:
            rc, rs = rc.ffill(), rs.ffill()
        seasonal = [self._seasonal(win, lag, rows, values.columns) for lag, win in windows.items()
                    if len(win.index)]
        starts = history_start([clean, *windows.values()])
        base = combine(values.loc[rows], [c for c, _ in seasonal], rc, rs, self.policy, starts,
                       [spread for _, spread in seasonal])
        assert base.provisional is not None
        return base.center, base.scale, rc, rs, base.provisional

    def _seasonal(self, window: pd.DataFrame, lag_s: float, rows: pd.DatetimeIndex,
                  columns: pd.Index) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Centred ±half-window median and IQR scale of ``window`` around each row − lag (NaN
        outside it), as ``baselines.seasonal_center`` and ``seasonal_spread``."""
        win = window.reindex(columns=columns)
        w_index = pd.DatetimeIndex(win.index)
        step = step_seconds(w_index) or 1.0
        half = max(0, round(self.policy.seasonal_half_window_s / step))
        targets = rows - pd.Timedelta(seconds=lag_s)
        centre = np.rint((targets.as_unit("ns").asi8 - w_index[0].as_unit("ns").value) / (step * 1e9))
        med, q25, q75 = window_quantiles(win.to_numpy(np.float32), centre.astype(np.int64) - half,
                                         2 * half + 1, (0.5, 0.25, 0.75), max(1, half))
        return (pd.DataFrame(med, index=rows, columns=columns, copy=False),
                pd.DataFrame((q75 - q25) / IQR_TO_SIGMA, index=rows, columns=columns, copy=False))


def _extended(held: pd.DataFrame, kept: np.ndarray, new: pd.DataFrame, index: pd.DatetimeIndex,
              fill: object = np.nan) -> pd.DataFrame:
    """Rows ``kept`` (positions) of ``held``, then ``new``, on ``index``: reindexed, so rows
    skipped by ``max_new_rows`` are remembered as ``fill``. Where the kept rows and the new ones
    are the window row for row (every steady cycle) their arrays are stacked instead."""
    if not len(kept):
        return new.reindex(index, fill_value=fill)
    rows = held.index[kept].append(new.index)
    if rows.equals(index) and held.columns.equals(new.columns):
        stacked = np.concatenate([held.to_numpy()[kept], new.to_numpy()])
        return pd.DataFrame(stacked, index=index, columns=new.columns, copy=False)
    return pd.concat([held.iloc[kept], new]).reindex(index, fill_value=fill)
