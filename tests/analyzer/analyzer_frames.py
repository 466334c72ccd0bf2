"""Frames for analyzer tests: a regular UTC grid, one column per series."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
