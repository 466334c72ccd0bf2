"""Prometheus range-query answers (``resultType: matrix``) into one :class:`SeriesFrame`.

A query's answer comes in chunks (one per range request under the point limit), each a list of
``{"metric": {...}, "values": [[t, "v"], ...]}``. All samples are decoded in one numpy pass and
scattered into a preallocated float32 array, so the cost per series is its label key only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from analyzer.signals.frame import SeriesFrame, series_key


def decode_matrix(answers: Iterable[Sequence[Mapping[str, Any]]], grid: pd.DatetimeIndex,
                  step_s: float) -> SeriesFrame:
    """The series of every chunk's ``result`` list on ``grid`` (NaN where no sample landed).

    Columns appear in order of first appearance; a series answered by several chunks (or twice in
    one) keeps the sample that came last for each grid point, as a plain overwrite would. Samples
    off the grid are dropped; ``"NaN"``, ``"+Inf"`` and ``"-Inf"`` are read as floats.
    """
    columns: dict[str, int] = {}
    labels: dict[str, dict[str, str]] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for results in answers:
        metrics = [{k: v for k, v in r.get("metric", {}).items() if k != "__name__"} for r in results]
        keys = [series_key(m) for m in metrics]
        labels.update((k, m) for k, m in zip(keys, metrics, strict=True) if k not in labels)
        cols = np.fromiter((columns.setdefault(k, len(columns)) for k in keys), np.int64, len(keys))
        counts = np.fromiter((len(r.get("values", ())) for r in results), np.int64, len(results))
        pairs = list(chain.from_iterable(r.get("values", ()) for r in results))
        stamps = np.fromiter((p[0] for p in pairs), np.float64, len(pairs))
        # Prometheus writes NaN, +Inf and -Inf as strings; numpy reads str with float() semantics.
        values = np.array([p[1] for p in pairs], dtype=np.float64)
        parts.append((np.repeat(cols, counts), stamps, values))
    if not columns or len(grid) == 0:
        return SeriesFrame(pd.DataFrame(index=grid, dtype=np.float32), {})
    rows_n = len(grid)
    col, stamps, values = (np.concatenate(a) for a in zip(*parts, strict=True))
    rows = np.rint((stamps * 1e9 - grid[0].value) / (step_s * 1e9)).astype(np.int64)
    ok = (rows >= 0) & (rows < rows_n)
    # Column-major slots match pandas' block layout, and make a sorted answer's slots increasing.
    slots = col[ok] * rows_n + rows[ok]
    values = values[ok]
    # Fancy assignment does not promise which duplicate wins, so keep the last one explicitly.
    order = np.argsort(slots, kind="stable")
    slots, values = slots[order], values[order]
    last = np.ones(len(slots), dtype=bool)
    last[:-1] = slots[1:] != slots[:-1]
    block = np.full(len(columns) * rows_n, np.nan, dtype=np.float32)
    block[slots[last]] = values[last]
    frame = pd.DataFrame(block.reshape(len(columns), rows_n).T, index=grid, columns=list(columns),
                         copy=False)
    return SeriesFrame(frame, labels)
