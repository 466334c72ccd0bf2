"""Baselines: same time of day 1 d and 7 d back, and the robust recent past.

Seasonal candidates are centred rolling medians of the history shifted forward by the lag (as
Merlion's WindStats compares like with like); for each sample the candidate *least* deviating
from the value wins, so a day that differed for a good reason (a holiday, last week's deploy)
does not raise an alarm. The recent baseline is a trailing median with an IQR scale over the
window *before* the current sample. Samples inside known anomalies and declared change events
are removed first, so one spike does not blind the baseline for a day. With less than
``min_history_s`` of history (the first day after install) there is no seasonal baseline yet: the
recent window stands alone, beside the signal's static threshold, and the baseline marks those
samples *provisional* so that the events and incidents they raise say what they were judged
against. Anomalies are kept out of the recent window (``exclude``; the daemon and the replay keep
open incidents out too), so a fault that lasts is not learnt as the new normal within the hour.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

import numpy as np
import pandas as pd

from analyzer.signals.frame import Baseline, time_index
from analyzer.signals.rolling import step_seconds

# IQR of a normal distribution in standard deviations.
IQR_TO_SIGMA = 1.349

ChangeWindow = tuple[datetime | pd.Timestamp, datetime | pd.Timestamp]


@dataclass(frozen=True)
class BaselinePolicy:
    """How baselines are formed (the ``analyzer.baseline`` config section)."""

    lags_s: tuple[float, ...] = (86400.0, 7 * 86400.0)
    seasonal_half_window_s: float = 1800.0
    recent_window_s: float = 3600.0
    min_history_s: float = 86400.0
    margin_abs: float = 0.0
    margin_rel: float = 0.05


def exclude(history: pd.DataFrame, anomalous: pd.DataFrame | None = None,
            changes: Sequence[ChangeWindow] = ()) -> pd.DataFrame:
    """``history`` with samples inside anomalies (a boolean frame) and change windows set to NaN."""
    out = history
    if anomalous is not None:
        mask = anomalous.reindex(index=history.index, columns=history.columns, fill_value=False)
        out = out.mask(mask.to_numpy(dtype=bool))
    if changes:
        index = pd.DatetimeIndex(history.index)
        hit = np.zeros(len(index), dtype=bool)
        for start, end in changes:
            hit |= (index >= pd.Timestamp(start)) & (index <= pd.Timestamp(end))
        out = out.mask(np.broadcast_to(hit[:, None], out.shape))
    return out


def seasonal_center(history: pd.DataFrame, lag_s: float, half_window_s: float) -> pd.DataFrame:
    """Centred rolling median of ``history`` over ±``half_window_s``, re-stamped ``lag_s`` later.

    The result at t summarises history around t − lag, which is before t as long as the half
    window is shorter than the lag: still causal.
    """
    if half_window_s >= lag_s:
        raise ValueError("the seasonal half window must be shorter than its lag to stay causal")
    step = step_seconds(pd.DatetimeIndex(history.index)) or half_window_s or 1.0
    half = max(0, round(half_window_s / step))
    med = history.rolling(2 * half + 1, center=True, min_periods=max(1, half)).median()
    return med.set_axis(pd.DatetimeIndex(history.index) + pd.Timedelta(seconds=lag_s), axis=0)


def seasonal_spread(history: pd.DataFrame, lag_s: float, half_window_s: float) -> pd.DataFrame:
    """The IQR-based scale of ``history`` over the same centred ±``half_window_s`` window as
    :func:`seasonal_center`, re-stamped ``lag_s`` later: how much the signal swung at this hour."""
    step = step_seconds(pd.DatetimeIndex(history.index)) or half_window_s or 1.0
    half = max(0, round(half_window_s / step))
    roll = history.rolling(2 * half + 1, center=True, min_periods=max(1, half))
    spread = (roll.quantile(0.75) - roll.quantile(0.25)) / IQR_TO_SIGMA
    return spread.set_axis(pd.DatetimeIndex(history.index) + pd.Timedelta(seconds=lag_s), axis=0)


def recent(values: pd.DataFrame, window_s: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Trailing median and IQR-based scale over ``window_s`` ending one sample before each row."""
    step = step_seconds(pd.DatetimeIndex(values.index)) or window_s
    # At least 12 samples, so that coarse grids (1 h) still get a meaningful median and IQR.
    window = max(12, math.ceil(window_s / step))
    roll = values.shift(1).rolling(window, min_periods=max(3, window // 2))
    center = roll.median()
    scale = (roll.quantile(0.75) - roll.quantile(0.25)) / IQR_TO_SIGMA
    # Where a long anomaly or change window emptied the trailing window, the last good baseline
    # holds (causal: only earlier values are carried forward).
    return center.ffill(), scale.ffill()


def combine(values: pd.DataFrame, candidates: Sequence[pd.DataFrame], recent_center: pd.DataFrame,
            recent_scale: pd.DataFrame, policy: BaselinePolicy,
            history_start: pd.Series | None = None,
            seasonal_spreads: Sequence[pd.DataFrame] = ()) -> Baseline:
    """Per sample, the least-deviating seasonal or recent candidate; scale floored by the margins.

    Where the recent past is too short for a scale (the first half hour of a window), the widest
    same-time spread (``seasonal_spreads``, from :func:`seasonal_spread`) stands in for it.

    Samples less than ``min_history_s`` after their column's ``history_start`` (first timestamp
    with data, per column; NaT = none) take the recent centre alone and are marked provisional:
    a seasonal candidate formed from so little history (a few hours a day back) is not trusted.
    Deciding this per sample keeps it causal.
    """
    step = step_seconds(time_index(values.index)) or 1.0

    def aligned(frame: pd.DataFrame) -> np.ndarray:
        # Nearest within half a step: the history's grid may be phased differently from the live one.
        return (frame.reindex(columns=values.columns)
                .reindex(index=values.index, method="nearest", tolerance=pd.Timedelta(seconds=step / 2))
                .to_numpy(np.float32))

    rc = recent_center.reindex(index=values.index, columns=values.columns).to_numpy(np.float32)
    index = time_index(values.index)
    if history_start is None:
        history_start = first_valid(values)
    starts = history_start.reindex(values.columns).to_numpy(dtype="datetime64[ns]")
    rs = recent_scale.reindex(index=values.index, columns=values.columns).to_numpy(np.float32)
    center, scale, young = combine_arrays(
        values.to_numpy(np.float32), [aligned(c) for c in candidates], rc, rs, policy,
        index.as_unit("ns").asi8.view("datetime64[ns]"), starts, [aligned(s) for s in seasonal_spreads])
    return Baseline(
        center=pd.DataFrame(center, index=values.index, columns=values.columns, copy=False),
        scale=pd.DataFrame(scale, index=values.index, columns=values.columns, copy=False),
        provisional=pd.DataFrame(young, index=values.index, columns=values.columns, copy=False),
    )


def combine_arrays(v: np.ndarray, seasonal: Sequence[np.ndarray], rc: np.ndarray, rs: np.ndarray,
                   policy: BaselinePolicy, stamps: np.ndarray, starts: np.ndarray,
                   spreads: Sequence[np.ndarray] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`combine` on arrays already aligned with the values ``v`` (rows × columns, float32):
    ``stamps`` the rows' and ``starts`` the columns' history starts (datetime64[ns], naive UTC).
    Returns the centre, the scale (float32) and where the rows are provisional."""
    stack = np.stack([*seasonal, rc]) if seasonal else rc[None]
    with np.errstate(invalid="ignore"):
        distance = np.abs(stack - v[None])
    distance = np.where(np.isnan(distance), np.where(np.isnan(stack), np.inf, 0.0), distance)
    best = np.argmin(distance, axis=0)[None]
    center = np.take_along_axis(stack, best, axis=0)[0]
    age_s = (stamps[:, None] - starts[None, :]) / np.timedelta64(1, "s")
    young = ~(np.nan_to_num(age_s, nan=-1.0) >= policy.min_history_s)
    center = np.where(young, rc, center)
    if len(spreads):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: no spread known either
            widest = np.nanmax(np.stack(spreads), axis=0)
        rs = np.where(np.isnan(rs), widest, rs)
    scale = np.fmax(np.fmax(rs, policy.margin_rel * np.abs(center)), policy.margin_abs)
    return center, scale.astype(np.float32), young


History: TypeAlias = pd.DataFrame | Mapping[float, pd.DataFrame]


def compute_baseline(values: pd.DataFrame, history: History | None = None, *,
                     anomalous: pd.DataFrame | None = None, changes: Sequence[ChangeWindow] = (),
                     policy: BaselinePolicy | None = None) -> Baseline:
    """The baseline of every sample of ``values``.

    ``history`` is one long frame covering the lags, or a mapping lag_s → that lag's same-time
    window (what a Prometheus source fetches and caches); by default ``values`` is its own
    history. Everything is cleaned of anomalies and change windows first.
    """
    policy = policy or BaselinePolicy()
    clean_values = exclude(values, anomalous, changes)
    if history is None or isinstance(history, pd.DataFrame):
        whole = clean_values if history is None else exclude(history, anomalous, changes)
        windows = {lag: whole for lag in policy.lags_s}
    else:
        windows = {lag: exclude(win, anomalous, changes) for lag, win in history.items()
                   if lag in policy.lags_s}
    candidates = [seasonal_center(win, lag, policy.seasonal_half_window_s) for lag, win in windows.items()
                  if len(win.index)]
    spreads = [seasonal_spread(win, lag, policy.seasonal_half_window_s) for lag, win in windows.items()
               if len(win.index)]
    rc, rs = recent(clean_values, policy.recent_window_s)
    return combine(values, candidates, rc, rs, policy, history_start([clean_values, *windows.values()]),
                   spreads)


def first_valid(frame: pd.DataFrame) -> pd.Series:
    """Per column, the first timestamp holding a value (NaT for an empty column), naive UTC."""
    return pd.Series(_first_valid(frame), index=frame.columns, dtype="datetime64[ns]")


def _first_valid(frame: pd.DataFrame) -> np.ndarray:
    """:func:`first_valid`'s values (datetime64[ns], one per column)."""
    data = frame.to_numpy()
    if not len(frame.index):
        return np.full(data.shape[1], np.datetime64("NaT"), dtype="datetime64[ns]")
    # Epoch nanoseconds: the naive UTC stamps whatever the index's zone.
    stamps = time_index(frame.index).as_unit("ns").asi8.view("datetime64[ns]")
    # Most series hold a value in the first row: only the others are searched further.
    first = np.zeros(data.shape[1], dtype=np.int64)
    found = ~np.isnan(data[0])
    later = np.flatnonzero(~found)
    if len(later):
        present = ~np.isnan(data[:, later])
        first[later] = np.argmax(present, axis=0)
        found[later] = present.any(axis=0)
    return np.where(found, stamps[first], np.datetime64("NaT"))


def history_start(frames: Sequence[pd.DataFrame]) -> pd.Series:
    """Per column, the earliest timestamp with data in any of ``frames``."""
    firsts = [first_valid(f) for f in frames if len(f.index) and len(f.columns)]
    if not firsts:
        return pd.Series(dtype="datetime64[ns]")
    return pd.concat(firsts, axis=1).min(axis=1)


def history_start_of(columns: pd.Index, frames: Sequence[pd.DataFrame]) -> np.ndarray:
    """:func:`history_start`'s values for ``columns`` (what :func:`combine` reads of it), without
    joining every frame's columns: each frame's first values are placed by position."""
    if not columns.is_unique or not all(f.columns.is_unique for f in frames):
        return history_start(frames).reindex(columns).to_numpy(dtype="datetime64[ns]")
    out = np.full(len(columns), np.datetime64("NaT"), dtype="datetime64[ns]")
    for frame in frames:
        if not len(frame.index) or not len(frame.columns):
            continue
        firsts = _first_valid(frame)
        if frame.columns.equals(columns):
            out = np.fmin(out, firsts)
            continue
        at = frame.columns.get_indexer(columns)  # -1: a column this frame does not hold
        out = np.fmin(out, np.where(at >= 0, firsts[at], np.datetime64("NaT")))
    return out
