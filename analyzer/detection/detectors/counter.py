"""Counter growth: reset-safe increase over a window, absolute (ECC +100 in 5 min) or relative to
the counter's own baseline rate (×100) — "not one cosmic ray"."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Self

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline, time_index
from analyzer.signals.rolling import counter_increase, like, step_seconds, trailing_sum

# Series per block of the detection's working arrays (under 8 MB of float64 for a live hour at 15 s).
BLOCK_SERIES = 4096


@dataclass
class CounterGrowth(Detector):
    """Flags a counter whose increase over ``window_s`` reaches ``min_increase``, or ``ratio`` ×
    its baseline rate (the increase per window it averaged before, see :meth:`baseline_rate`).

    The ratio compares with the real rate, however small: a card at 0.05 corrected errors per
    5 min that starts producing 5 has grown ×100. A rate of exactly nothing makes any error an
    infinite ratio, so the ratio criterion also needs ``ratio_min_increase`` in the window: one
    cosmic ray is not growth.
    """

    window_s: float = 300.0
    min_increase: float | None = 100.0
    ratio: float | None = 100.0
    ratio_min_increase: float = 5.0
    # The baseline rate is the mean increase per window over ``baseline_s`` ending ``baseline_lag_s``
    # ago, so the first hour of a storm is judged against the card's behaviour before it began.
    baseline_s: float = 86400.0
    baseline_lag_s: float = 3600.0
    # Fewer seconds of history than this and the rate is not trusted (the given baseline is used).
    min_baseline_s: float = 3600.0
    # False: the values are already increases over the window (PromQL ``increase()``, a rule).
    cumulative: bool = True

    name: ClassVar[str] = "counter_growth"
    uses_baseline: ClassVar[bool] = True
    reason_template: ClassVar[str] = "increase {value:.4g} in the window (baseline {reference:.4g})"

    def for_input(self, *, cumulative: bool) -> Self:
        return replace(self, cumulative=cumulative)

    def transform(self, values: pd.DataFrame) -> pd.DataFrame:
        """The reset-safe increase over ``window_s``; baselines are formed on it too."""
        return counter_increase(values, self.window_s) if self.cumulative else values

    def baseline_rate(self, inc: pd.DataFrame) -> np.ndarray:
        """Mean of the window increases over the trailing ``baseline_s`` that ended
        ``baseline_lag_s`` ago (the mean of a sliding window's increase is the rate × window, so
        sparse counts keep their true, fractional rate where a median would say 0). NaN where
        less than ``min_baseline_s`` of that span holds data."""
        step = step_seconds(time_index(inc.index)) or self.window_s
        rows = max(1, round(self.baseline_s / step))
        lag = max(0, round(self.baseline_lag_s / step))
        if (len(inc) - lag) * step < self.min_baseline_s:
            # No row has that much of the span before its lag (a live window shorter than the
            # lag and the minimum together): nothing to add up.
            return np.full(inc.shape, np.nan)
        data = inc.to_numpy(np.float64)
        total = trailing_sum(data, rows)
        count = trailing_sum(~np.isnan(data), rows).astype(np.float64)
        if lag:
            total = np.vstack([np.full((lag, data.shape[1]), np.nan), total[:-lag]])[: len(data)]
            count = np.vstack([np.zeros((lag, data.shape[1])), count[:-lag]])[: len(data)]
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = total / count
        return np.where(count * step >= self.min_baseline_s, rate, np.nan)

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        flags, keep = np.empty(values.shape, dtype=bool), np.empty(values.shape, dtype=bool)
        score, ref = np.empty(values.shape, dtype=np.float32), np.empty(values.shape, dtype=np.float32)
        center = None if baseline is None else baseline.center
        # Each series on its own, a block of them at a time: the float64 working arrays of a whole
        # fleet (126 MB apiece at 65,536 GPUs, a dozen of them) would each be fresh pages the
        # kernel has to hand over every cycle; a block's are reused.
        for first in range(0, values.shape[1], BLOCK_SERIES):
            part = slice(first, first + BLOCK_SERIES)
            found = self._detect_block(values.iloc[:, part], None if center is None else center.iloc[:, part])
            for target, block in zip((flags, score, ref, keep), found, strict=True):
                target[:, part] = block
        return Detection(like(values, flags), like(values, score), like(values, ref), like(values, keep))

    def _detect_block(self, values: pd.DataFrame, center: pd.DataFrame | None) -> tuple[np.ndarray, ...]:
        inc = values.to_numpy(np.float64)
        # The score is the share of the nearest criterion's threshold reached (≥ 1 fires); the
        # reference is the baseline rate where one is known, else the absolute threshold.
        score = np.zeros(inc.shape)
        ref = np.full(inc.shape, np.nan if self.min_increase is None else self.min_increase)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.min_increase is not None:
                score = np.fmax(score, inc / self.min_increase)
            if self.ratio is not None:
                rate = self.baseline_rate(values)
                if center is not None:
                    # Too little of its own history (a short live window): the seasonal baseline.
                    rate = np.where(np.isnan(rate), center.to_numpy(np.float64), rate)
                # No rate known at all (no history, no baseline): only the absolute criterion.
                against = np.where(np.isnan(rate), np.inf,
                                   np.fmax(self.ratio * rate, self.ratio_min_increase))
                # At the frame's own precision: a rate of 0.05 read from float32 is 0.0500000007.
                against = against.astype(np.float32).astype(np.float64)
                score = np.fmax(score, inc / against)
                ref = np.where(np.isnan(rate), ref, rate)
            score = np.where(np.isnan(inc), np.nan, score)
            # Hysteresis: an event stays open while growth is at least half of what opened it.
            return score >= 1.0, score.astype(np.float32), ref.astype(np.float32), score >= 0.5
