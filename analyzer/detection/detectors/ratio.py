"""Baseline ratio: "P99 over 1.5 × same time yesterday for 5 minutes"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector, Direction
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like


@dataclass
class BaselineRatio(Detector):
    """Flags values at least ``ratio`` × their baseline (or 1/ratio for ``down``) and at least
    ``min_delta`` away from it in absolute terms, so tiny baselines do not make huge ratios, and
    (``noise_z`` > 0) at least ``noise_z`` × the baseline's robust scale away, so a statistic that
    hour_scales by itself (a p99 over a few hundred requests, read from coarse histogram buckets)
    is judged against its own recent spread, and its spread at this hour on the baseline days
    where the baseline knows it (``Baseline.hour_scale``). Keeps an event open while the ratio stays
    above ``clear_ratio`` (hysteresis)."""

    ratio: float = 1.5
    direction: Direction = "up"
    min_delta: float = 0.0
    clear_ratio: float = 1.2
    noise_z: float = 0.0

    name: ClassVar[str] = "baseline_ratio"
    uses_baseline: ClassVar[bool] = True
    needs_baseline: ClassVar[bool] = True
    relative: ClassVar[bool] = True
    reason_template: ClassVar[str] = "value {value:.4g} = {score:.2f} × baseline {reference:.4g}"

    @property
    def uses_hour_scale(self) -> bool:
        """A ratio with a noise margin judges against the hour's spread as well."""
        return self.noise_z > 0

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        assert baseline is not None
        v = values.to_numpy()
        c = baseline.center.to_numpy(dtype=np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            score = v / c
            if self.direction == "up":
                delta, strength = v - c, score
            else:
                delta, strength = c - v, c / v
            big = delta >= self.min_delta
            if self.noise_z > 0:
                scale = baseline.scale.to_numpy(dtype=np.float32)
                if baseline.hour_scale is not None:
                    # At this hour's spread too: a daily peak's bursts are normal there.
                    scale = np.fmax(scale, baseline.hour_scale.to_numpy(dtype=np.float32))
                big &= delta >= self.noise_z * scale
            flags = (strength >= self.ratio) & big & (delta > 0)
            keep = (strength >= self.clear_ratio) & (delta > 0)
        return Detection(like(values, flags), like(values, score), like(values, c), like(values, keep))
