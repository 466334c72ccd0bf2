"""Trend / leak: a steady rise (process RSS or GPU memory creeping) with a time-to-full estimate.

Rolling least squares over a trailing window, vectorised across every series with running sums.
Steadiness is the window's R²: a leak rises every minute, a busy hour does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline, time_index
from analyzer.signals.rolling import like, rolling_ols, step_seconds


@dataclass
class Trend(Detector):
    """Flags series whose least-squares slope over ``window_s`` is positive with R² ≥ ``min_r2``
    and a rise of at least ``min_rise_rel`` per window; when ``capacity`` is known, also requires
    the projected time to reach it to be under ``horizon_s``.

    The rise is relative to the level or, with a capacity, to the headroom the window started
    with if that is smaller: a card preallocated to 90 % that leaks 2 % of itself in half an hour
    eats a fifth of what is left, however small that is next to the level, while a process at 3 %
    of its host's memory matters by how fast it grows against itself.
    The score is the relative rise per hour; the reference is the time to full in seconds."""

    window_s: float = 1800.0
    min_r2: float = 0.8
    min_rise_rel: float = 0.05
    capacity: float | None = None
    horizon_s: float = 7 * 86400.0

    name: ClassVar[str] = "trend"
    reference_is_time_to_full: ClassVar[bool] = True

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        step = step_seconds(time_index(values.index)) or self.window_s
        window = max(3, round(self.window_s / step))
        v = values.to_numpy(np.float64)
        slope, r2 = rolling_ols(v, window)
        slope = slope / step
        with np.errstate(invalid="ignore", divide="ignore"):
            rise = slope * window * step
            room = np.abs(v)
            if self.capacity is not None:
                room = np.fmin(room, np.fmax(self.capacity - v + rise, 0.0))
            rise_rel = rise / room
            flags = (slope > 0) & (r2 >= self.min_r2) & (rise_rel >= self.min_rise_rel)
            if self.capacity is not None:
                ttf = (self.capacity - v) / slope
                ttf = np.where(slope > 0, np.fmax(ttf, 0.0), np.inf)
                flags &= ttf <= self.horizon_s
            else:
                ttf = np.full(v.shape, np.nan)
            keep = (slope > 0) & (r2 >= self.min_r2 / 2)
            score = slope * 3600.0 / np.abs(v)
        return Detection(like(values, flags), like(values, score.astype(np.float32)),
                         like(values, ttf.astype(np.float32)), like(values, keep))

    def reason(self, value: float, reference: float, score: float) -> str:
        """Rising by a share of the level per hour, with time to full when the capacity is known."""
        full = f", full in {reference / 3600:.1f} h" if np.isfinite(reference) else ""
        return f"value {value:.4g} rising steadily, {score:.1%} per hour{full}"


