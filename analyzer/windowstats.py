"""Rolling median and quantiles at chosen rows, vectorised across every series at once.

pandas' rolling median walks one column at a time; at fleet scale (thousands of series) the
per-column overhead dominates. Here the windows of the requested rows are gathered as a strided
view (time × series × window), sorted once (NaN sorts last) and read at the quantile positions
with the same linear interpolation as pandas, in blocks to bound memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

# Values per block (rows × series × window float32, ≈ 63 MB, with as much again for the sort and
# a quarter for the missing mask): as many rows as fit, and fewer series at a time where one row of
# every series would not.
BLOCK_VALUES = 8 * 8192 * 241


def window_quantiles(data: np.ndarray, starts: np.ndarray, window: int, qs: Sequence[float],
                     min_count: int) -> list[np.ndarray]:
    """For each row r of the result, quantiles ``qs`` of ``data[starts[r] : starts[r] + window]``
    (per column; rows outside ``data`` count as missing). NaN where fewer than ``min_count``
    values are present. Returns one (len(starts) × columns) array per quantile."""
    rows, cols = data.shape
    starts = np.asarray(starts, dtype=np.int64)
    out = [np.full((len(starts), cols), np.nan, dtype=np.float32) for _ in qs]
    if len(starts) == 0:
        return out
    # Only the rows the requested windows span are copied, NaN-padded where they leave ``data``.
    lo, hi = int(starts.min()), int(starts.max()) + window
    padded = np.full((hi - lo, cols), np.nan, dtype=np.float32)
    src_lo, src_hi = max(lo, 0), min(hi, rows)
    if src_hi > src_lo:
        padded[src_lo - lo:src_hi - lo] = data[src_lo:src_hi]
    view = sliding_window_view(padded, window, axis=0)  # (positions, cols, window), no copy
    offsets = starts - lo
    block_cols = max(1, min(cols, BLOCK_VALUES // window))
    block_rows = max(1, BLOCK_VALUES // (block_cols * window))
    for first_col in range(0, cols, block_cols):
        part = slice(first_col, first_col + block_cols)
        for first in range(0, len(offsets), block_rows):
            _block_quantiles(view[offsets[first:first + block_rows], part], window, qs, min_count,
                             [target[first:first + block_rows, part] for target in out])
    return out


def _block_quantiles(block: np.ndarray, window: int, qs: Sequence[float], min_count: int,
                     targets: Sequence[np.ndarray]) -> None:
    """Quantiles ``qs`` of each window of ``block`` (rows × series × window) into ``targets``."""
    missing = np.isnan(block)
    count = window - np.count_nonzero(missing, axis=-1)
    if missing.any():
        block = np.sort(block, axis=-1)  # NaN sorts last: positions below count are values
    else:
        # Every window full: a partial sort around the few positions needed is enough (the
        # values there are the sorted ones, so either way gives the same numbers).
        needed = sorted({int(np.floor((window - 1) * q)) for q in qs}
                        | {min(int(np.floor((window - 1) * q)) + 1, window - 1) for q in qs})
        block = np.partition(block, needed, axis=-1)
    for q, target in zip(qs, targets, strict=True):
        pos = (np.maximum(count, 1) - 1) * q
        below = np.floor(pos).astype(np.int64)
        above = np.minimum(below + 1, np.maximum(count - 1, 0))
        v_lo = np.take_along_axis(block, below[..., None], axis=-1)[..., 0]
        v_hi = np.take_along_axis(block, above[..., None], axis=-1)[..., 0]
        value = v_lo + (v_hi - v_lo) * (pos - below).astype(np.float32)
        target[...] = np.where(count >= min_count, value, np.nan)


def same_time_quantiles(window: pd.DataFrame, lag_s: float, rows: pd.DatetimeIndex, columns: pd.Index,
                        half_window_s: float, qs: Sequence[float]) -> list[pd.DataFrame]:
    """Quantiles ``qs`` of ``window`` (a regular grid) over ±``half_window_s`` around each of
    ``rows`` − ``lag_s``, per column (NaN outside the window): the same time on an earlier day."""
    win = window.reindex(columns=columns)
    index = pd.DatetimeIndex(win.index)
    if len(index) < 2:
        return [pd.DataFrame(np.nan, index=rows, columns=columns, dtype=np.float32) for _ in qs]
    step = (index[1] - index[0]).total_seconds() or 1.0
    half = max(0, round(half_window_s / step))
    targets = rows - pd.Timedelta(seconds=lag_s)
    centre = np.rint((targets.as_unit("ns").asi8 - index[0].as_unit("ns").value) / (step * 1e9))
    found = window_quantiles(win.to_numpy(np.float32), centre.astype(np.int64) - half, 2 * half + 1, qs,
                             max(1, half))
    return [pd.DataFrame(q, index=rows, columns=columns) for q in found]
