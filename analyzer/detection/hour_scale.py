"""A signal's upward spread at this time of day on the baseline days (its hour scale), floored by
its like nodes' spread at that hour.

Each row's value reads only the same-time windows around that row's own time on the baseline days
and, for the floor, that row across the columns. A row's hour scale therefore never changes once
those days are fetched, and a caller that keeps rows between cycles (``BaselineTracker``) computes
each row once rather than the whole live window every cycle.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from analyzer.detection.baselines import BaselinePolicy
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.windowstats import same_time_quantiles

# The upper decile of a normal distribution in standard deviations above its median.
DECILE_TO_SIGMA = 1.2816
# The fewest like series (the node's own included) whose median spread is trusted as a floor: with
# fewer, one bursty neighbour would set it.
MIN_LIKE_NODES = 4


def hour_scale(rows: pd.DatetimeIndex, columns: pd.Index, older: Mapping[float, pd.DataFrame],
               policy: BaselinePolicy, like_nodes: Mapping[str, str] | None = None) -> np.ndarray | None:
    """At each of ``rows``, the signal's upward spread around the same time on the baseline days
    as a σ ((upper decile − median) / 1.28 over the seasonal half window), the widest of them: it
    grows with the bursts a daily peak brings. Only from same-time windows a source fetched; None
    where there are none (rows × columns, float32, otherwise).

    ``like_nodes`` (column → the series' labels but its node) puts a floor under it: the median
    spread of the column's like series, its own included, where there are ``MIN_LIKE_NODES``. In
    a fleet of like nodes, bursts most of them had at this hour are their usual behaviour, and one
    node that happened to have none then is no reason to page when it does."""
    hour_scales = []
    for lag, window in older.items():
        if lag not in policy.lags_s or window.empty:
            continue
        med, high = same_time_quantiles(window, lag, rows, columns, policy.seasonal_half_window_s,
                                        (0.5, 0.9))
        hour_scales.append((high - med).to_numpy(np.float32) / DECILE_TO_SIGMA)
    if not hour_scales:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: no spread known
        widest = np.nanmax(np.stack(hour_scales), axis=0)
    if like_nodes:
        widest = floored_by_like_nodes(widest, [like_nodes.get(str(c)) for c in columns])
    return widest


def like_nodes_of(frame: SeriesFrame) -> dict[str, str]:
    """Column → its labels without ``node``, for the columns that have a node."""
    out = {}
    for column in frame.values.columns:
        labels = frame.labels_of(str(column))
        if "node" in labels:
            out[str(column)] = "|".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "node")
    return out


def floored_by_like_nodes(scale: np.ndarray, keys: Sequence[str | None]) -> np.ndarray:
    """``scale`` (rows × columns) floored, per column, by the median of its like columns (the same
    key, itself included), where there are at least ``MIN_LIKE_NODES`` of them."""
    out = scale.copy()
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            by_key.setdefault(key, []).append(i)
    for cols in by_key.values():
        if len(cols) < MIN_LIKE_NODES:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: nothing known
            floor = np.nanmedian(scale[:, cols], axis=1, keepdims=True)
        out[:, cols] = np.fmax(scale[:, cols], floor)
    return out
