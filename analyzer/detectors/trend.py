"""Trend / leak: a steady rise (process RSS creeping, seed 004 §2–3) with a time-to-full estimate.

Rolling least squares over a trailing window, vectorised by pandas' rolling covariance (numerically
stable, one pass per column in C). Steadiness is the window's R²: a leak rises every minute, a
busy hour does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detectors.base import Detection, Detector, like
from analyzer.detectors.counter import step_seconds
from analyzer.frame import Baseline


@dataclass
class Trend(Detector):
    """Flags series whose least-squares slope over ``window_s`` is positive with R² ≥ ``min_r2``
    and a rise of at least ``min_rise_rel`` of the level per window; when ``capacity`` is known,
    also requires the projected time to reach it to be under ``horizon_s``.
    The score is the relative rise per hour; the reference is the time to full in seconds."""

    window_s: float = 1800.0
    min_r2: float = 0.8
    min_rise_rel: float = 0.05
    capacity: float | None = None
    horizon_s: float = 7 * 86400.0

    name: ClassVar[str] = "trend"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        step = step_seconds(pd.DatetimeIndex(values.index)) or self.window_s
        window = max(3, round(self.window_s / step))
        y = values.astype(np.float64)
        t = pd.Series(np.arange(len(y), dtype=np.float64) * step, index=y.index)
        roll = y.rolling(window, min_periods=window)
        cov = roll.cov(t).to_numpy()
        corr = roll.corr(t).to_numpy()
        var_t = t.rolling(window, min_periods=window).var().to_numpy()[:, None]
        v = y.to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            slope = cov / var_t
            rise_rel = slope * window * step / np.abs(v)
            flags = (slope > 0) & (corr * corr >= self.min_r2) & (rise_rel >= self.min_rise_rel)
            if self.capacity is not None:
                ttf = (self.capacity - v) / slope
                ttf = np.where(slope > 0, np.fmax(ttf, 0.0), np.inf)
                flags &= ttf <= self.horizon_s
            else:
                ttf = np.full(v.shape, np.nan)
            keep = (slope > 0) & (corr * corr >= self.min_r2 / 2)
            score = slope * 3600.0 / np.abs(v)
        return Detection(like(values, flags), like(values, score.astype(np.float32)),
                         like(values, ttf.astype(np.float32)), like(values, keep))

    def reason(self, value: float, reference: float, score: float) -> str:
        """Rising by a share of the level per hour, with time to full when the capacity is known."""
        full = f", full in {reference / 3600:.1f} h" if np.isfinite(reference) else ""
        return f"value {value:.4g} rising steadily, {score:.1%} per hour{full}"
