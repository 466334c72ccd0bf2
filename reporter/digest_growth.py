"""The digest's slow growth: every series of a trend signal (a process's share of its host's memory,
a card's memory in use) that rose steadily over the whole day, with its rate and the date it would
be full at that rate.

The analyzer's trend detector judges a half-hour window and opens an incident only when the
resource would be full within its horizon (a week): a leak of a gigabyte an hour on a large host
rises too little in half an hour and fills the host only weeks later, so it opens nothing. Over a
whole day the same leak is plain, and the digest says it with its date, so it is never silent.
The steadiness and the least rise are the trend detector's own (R² and rise per window, here the
day).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from analyzer.detection.detectors.trend import Trend
from analyzer.signals.spec import SignalSpec
from reporter.prom import PromQuery


@dataclass(frozen=True)
class Growth:
    """One series' steady rise over the day."""

    signal: str
    series: str  # its labels, ``k=v`` joined by commas
    level: float  # at the day's end, in the signal's unit (a share of the capacity)
    capacity: float
    per_day: float  # the least-squares slope over the day, in the signal's unit per day
    full_at: float  # epoch seconds at which it reaches its capacity at that rate
    alerted: bool  # full within the trend detector's horizon: the analyzer opens an incident for it


def _fit(t: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Least-squares slope (per second) and R² of ``v`` over ``t``."""
    dt, dv = t - t.mean(), v - v.mean()
    sxx, syy = float(dt @ dt), float(dv @ dv)
    if sxx <= 0 or syy <= 0:
        return 0.0, 0.0
    sxy = float(dt @ dv)
    return sxy / sxx, sxy * sxy / (sxx * syy)


def growth(prom: PromQuery, catalogue: Mapping[str, SignalSpec], start: datetime, end: datetime,
           step_s: float) -> tuple[Growth, ...]:
    """The day's steady rises of every trend signal with a capacity, soonest full first. A series
    needs samples over at least half the day to be judged."""
    rule = Trend()
    day_s = (end - start).total_seconds()
    found = []
    for spec in catalogue.values():
        if spec.kind != "trend" or spec.capacity is None or not spec.promql:
            continue
        for s in prom.range(spec.promql, start, end, step_s):
            points = np.array([(t, v) for t, v in s.points if math.isfinite(v)], dtype=np.float64)
            if len(points) < 3 or points[-1, 0] - points[0, 0] < day_s / 2:
                continue
            t, v = points[:, 0], points[:, 1]
            slope, r2 = _fit(t, v)
            level, first = float(v[-1]), float(v[0])
            rise = slope * (t[-1] - t[0])
            room = min(abs(first), max(spec.capacity - first, 0.0))
            if slope <= 0 or r2 < rule.min_r2 or room <= 0 or rise / room < rule.min_rise_rel:
                continue
            to_full_s = max(spec.capacity - level, 0.0) / slope
            found.append(Growth(spec.name, ",".join(f"{k}={v}" for k, v in s.labels), level, spec.capacity,
                                slope * 86400.0, float(t[-1]) + to_full_s, to_full_s <= rule.horizon_s))
    return tuple(sorted(found, key=lambda g: (g.full_at, g.signal, g.series)))
