"""Two judges of a detector's score against the series' own history, shared by detectors that
produce a raw anomaly score.

``score_z`` is the anomaly likelihood of Numenta's HTM detector, in z units: the mean of the last
``short`` scores, measured against the mean and spread of such means over the last ``long``
samples before it. A series whose scores are always high (a noisy one) thereby sets its own,
higher bar, and a bar set over thousands of samples does not drift with the last few hours.

``range_breaks`` is HTM's "spatial anomaly": a value beyond everything the series has shown so far
by more than ``tolerance`` of that range. It needs no score at all and catches the level shift
whose first few samples a shape comparison still finds unremarkable.

Both are strictly causal: a sample is judged only against samples before it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def score_z(score: np.ndarray, short: int, long: int, min_history: int, min_spread: float) -> np.ndarray:
    """Per sample: (mean of the last ``short`` scores − mean of the previous ``long`` such means)
    ÷ their standard deviation (at least ``min_spread``); NaN until ``min_history`` means are
    known. NaN scores (a warm-up) count as absent."""
    means = pd.Series(score, dtype=np.float64).rolling(short, min_periods=short).mean()
    past = means.shift(1).rolling(long, min_periods=min_history)
    spread = np.maximum(past.std().to_numpy(), min_spread)
    return (means - past.mean()).to_numpy() / spread


def range_breaks(values: np.ndarray, warmup: int, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Where a value is above (first array) or below (second) every earlier value by more than
    ``tolerance`` × the range of the earlier values; never within the first ``warmup`` values.
    Gaps carry the last value forward."""
    filled = pd.Series(values, dtype=np.float64).ffill()
    before = filled.shift(1).expanding(min_periods=max(warmup, 1))
    high, low = before.max().to_numpy(), before.min().to_numpy()
    margin = tolerance * (high - low)
    now = filled.to_numpy()
    with np.errstate(invalid="ignore"):
        moving = margin > 0  # a series that never moved has no range to leave
        return moving & (now > high + margin), moving & (now < low - margin)
