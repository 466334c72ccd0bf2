"""Counter growth: reset-safe increase over a window, absolute (ECC +100 in 5 min) or relative to
the baseline increase (×100) — "not one cosmic ray"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detectors.base import Detection, Detector, like, trailing_sum
from analyzer.frame import Baseline


def step_seconds(index: pd.DatetimeIndex) -> float:
    """The grid step of ``index`` (median spacing; 0 for fewer than two rows)."""
    if len(index) < 2:
        return 0.0
    return float(np.median(np.diff(index.as_unit("ns").asi8)) / 1e9)


def counter_increase(values: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Increase of each counter over the trailing ``window_s``, as Prometheus ``increase()`` does
    on a reset: a drop means the counter restarted from 0, so the new value is the increase.
    Gaps are bridged (the increase lands when the series comes back)."""
    step = step_seconds(pd.DatetimeIndex(values.index)) or window_s
    window = max(1, round(window_s / step))
    filled = values.ffill().to_numpy(dtype=np.float64)
    diff = np.diff(filled, axis=0, prepend=filled[:1])
    diff = np.where(diff < 0, filled, diff)
    inc = trailing_sum(diff, window)
    inc[np.isnan(values.to_numpy())] = np.nan
    return like(values, inc.astype(np.float32))


@dataclass
class CounterGrowth(Detector):
    """Flags a counter whose increase over ``window_s`` reaches ``min_increase``, or ``ratio`` ×
    the baseline increase (floored at ``baseline_floor`` so ×100 of nothing needs real growth)."""

    window_s: float = 300.0
    min_increase: float | None = 100.0
    ratio: float | None = 100.0
    baseline_floor: float = 1.0
    # False: the values are already increases over the window (PromQL ``increase()``, a rule).
    cumulative: bool = True

    name: ClassVar[str] = "counter_growth"
    reason_template: ClassVar[str] = "increase {value:.4g} in the window (baseline {reference:.4g})"

    def transform(self, values: pd.DataFrame) -> pd.DataFrame:
        """The reset-safe increase over ``window_s``; baselines are formed on it too."""
        return counter_increase(values, self.window_s) if self.cumulative else values

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        inc = values.to_numpy()
        flags = np.zeros(inc.shape, dtype=bool)
        ref = np.full(inc.shape, np.nan, dtype=np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.min_increase is not None:
                flags |= inc >= self.min_increase
                ref[:] = self.min_increase
            if self.ratio is not None and baseline is not None:
                c = np.fmax(baseline.center.to_numpy(dtype=np.float32), self.baseline_floor)
                flags |= inc >= self.ratio * c
                ref = np.where(np.isnan(baseline.center.to_numpy()), ref, c)
            score = inc / ref
            # Hysteresis: an event stays open while growth is at least half of what opened it.
            keep = score >= 0.5
        return Detection(like(values, flags), like(values, score), like(values, ref), like(values, keep))
