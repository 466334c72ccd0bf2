"""Frames for analyzer tests: a regular UTC grid, one column per series."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

T0 = pd.Timestamp("2026-01-01T00:00:00Z")


def grid(rows: int, step_s: float = 60.0) -> pd.DatetimeIndex:
    """``rows`` timestamps from T0 every ``step_s``."""
    return pd.date_range(T0, periods=rows, freq=pd.Timedelta(seconds=step_s))


def frame(columns: dict[str, np.ndarray], step_s: float = 60.0) -> pd.DataFrame:
    """A float32 frame on the test grid."""
    rows = len(next(iter(columns.values())))
    data = {k: np.asarray(v, dtype=np.float32) for k, v in columns.items()}
    return pd.DataFrame(data, index=grid(rows, step_s))


def at(row: int, step_s: float = 60.0) -> pd.Timestamp:
    """The timestamp of ``row``."""
    return T0 + pd.Timedelta(seconds=row * step_s)


def write_history(directory: Path, series: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray],
                  t0: datetime, step_s: float) -> None:
    """The simulator's Parquet layout (simulator/series.py): series.parquet + samples.parquet."""
    ids, names, labels, ts, sid, vals = [], [], [], [], [], []
    for i, ((name, labs), values) in enumerate(series.items()):
        ids.append(i)
        names.append(name)
        labels.append(json.dumps(dict(labs), sort_keys=True))
        for row, v in enumerate(values):
            if v == v:
                ts.append(int((t0.timestamp() + row * step_s) * 1000))
                sid.append(i)
                vals.append(float(v))
    pq.write_table(pa.table({"series_id": pa.array(ids, pa.int32()), "family": names, "name": names,
                             "type": ["gauge"] * len(ids), "labels": labels,
                             "node": [None] * len(ids), "gpu": [None] * len(ids)}),
                   directory / "series.parquet")
    pq.write_table(pa.table({"timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                             "series_id": pa.array(sid, pa.int32()), "value": pa.array(vals, pa.float64())}),
                   directory / "samples.parquet")
