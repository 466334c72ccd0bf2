"""Arithmetic over a frame's rows that the queries and the detectors share: a frame shaped like
another, trailing sums, a counter's reset-safe increase, a rolling least-squares slope.

Vectorised over every series at once; nothing here knows a signal or a detector.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


def like(values: pd.DataFrame, data: np.ndarray | float) -> pd.DataFrame:
    """A frame with ``values``' index and columns holding ``data``."""
    if np.isscalar(data):
        data = np.full(values.shape, data, dtype=np.float32)
    # Not copied (pandas would): a detector hands over its own results, or read-only views.
    return pd.DataFrame(data, index=values.index, columns=values.columns, copy=False)


def trailing_sum(data: np.ndarray, window: int) -> np.ndarray:
    """Sum of the last ``window`` rows (current included) along time, NaN counted as 0."""
    if data.dtype == np.bool_:
        filled: np.ndarray = data.astype(np.int32)
    else:
        filled = np.nan_to_num(data.astype(np.float64, copy=False), nan=0.0)
    csum = np.cumsum(filled, axis=0)
    out = csum.copy()
    out[window:] -= csum[:-window]
    return out


def step_seconds(index: pd.DatetimeIndex) -> float:
    """The grid step of ``index`` (median spacing; 0 for fewer than two rows)."""
    if len(index) < 2:
        return 0.0
    return float(np.median(np.diff(index.as_unit("ns").asi8)) / 1e9)


def counter_steps(values: np.ndarray) -> np.ndarray:
    """What each sample (along axis 0) adds to its counter, as Prometheus's ``increase()`` reads a
    reset: a drop means the counter restarted from 0, so the new value is all increase. The first
    sample adds 0. Summed, a counter's exact increase over its samples."""
    diff = np.diff(values, axis=0, prepend=values[:1])
    return np.where(diff < 0, values, diff)


def counter_increase(values: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Increase of each counter over the trailing ``window_s`` (reset-safe, :func:`counter_steps`).
    Gaps are bridged (the increase lands when the series comes back)."""
    step = step_seconds(pd.DatetimeIndex(values.index)) or window_s
    window = max(1, round(window_s / step))
    inc = trailing_sum(counter_steps(values.ffill().to_numpy(dtype=np.float64)), window)
    inc[np.isnan(values.to_numpy())] = np.nan
    return like(values, inc.astype(np.float32))


def rolling_ols(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares slope (per row) and R² over the trailing ``window`` rows of every column at
    once, from running sums; NaN unless the window is complete. Each column is centred on its
    mean first so the sums stay small enough for float64 to subtract them exactly."""
    rows = values.shape[0]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = values - np.nanmean(values, axis=0, keepdims=True)
    present = ~np.isnan(y)
    y = np.where(present, y, 0.0)
    t = np.arange(rows, dtype=np.float64)[:, None]

    def trailing(a: np.ndarray) -> np.ndarray:
        c = np.cumsum(a, axis=0)
        out = c.copy()
        out[window:] -= c[:-window]
        return out

    n = trailing(present.astype(np.float64))
    sy, syy, sty = trailing(y), trailing(y * y), trailing(t * y)
    # t within the window is start..start+window-1; shift it to 0..window-1.
    start = np.maximum(t - window + 1, 0)
    sty = sty - start * sy
    k = np.arange(window, dtype=np.float64)
    st, stt = k.sum(), (k * k).sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = window * sty - st * sy
        var_t = window * stt - st * st
        var_y = window * syy - sy * sy
        slope = cov / var_t
        r2 = cov * cov / (var_t * var_y)
    complete = n == window
    return np.where(complete, slope, np.nan), np.where(complete, r2, np.nan)
