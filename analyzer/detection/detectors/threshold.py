"""Absolute threshold: fixed limits (temperature > 85 °C, queue_wait p99 > 1 s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector, Direction, signed
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like


@dataclass
class AbsoluteThreshold(Detector):
    """Flags values beyond ``threshold``; clears only once back past ``threshold`` by ``hysteresis``
    (a fraction of the threshold), so a value hovering at the limit does not flap."""

    threshold: float
    direction: Direction = "up"
    hysteresis: float = 0.05

    name: ClassVar[str] = "threshold"
    reason_template: ClassVar[str] = "value {value:.4g} beyond the threshold {reference:.4g}"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        v = values.to_numpy()
        margin = abs(self.threshold) * self.hysteresis
        oriented = signed(v, self.direction)
        limit = self.threshold if self.direction == "up" else -self.threshold
        with np.errstate(invalid="ignore", divide="ignore"):
            score = v / self.threshold if self.threshold else v
        return Detection(
            flags=like(values, oriented > limit),
            score=like(values, score),
            reference=like(values, float(self.threshold)),
            keep=like(values, oriented > limit - margin),
        )
