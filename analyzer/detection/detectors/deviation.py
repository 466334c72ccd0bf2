"""Robust deviation: |value − baseline| over the baseline's MAD scale, with a margin floor.

The generic detector for a series of unknown meaning (``oximeter detect`` with kind ``gauge``):
it needs no threshold, only the baseline's centre and scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like


@dataclass
class RobustDeviation(Detector):
    """Flags values more than ``z`` robust scales from the baseline; the scale is floored at
    ``min_scale_abs`` and ``min_scale_rel`` × |baseline| so flat lines do not make every wiggle
    infinite. Keeps an event open while beyond ``clear_z``."""

    z: float = 6.0
    direction: Literal["up", "down", "both"] = "both"
    min_scale_abs: float = 1e-6
    min_scale_rel: float = 0.02
    clear_z: float = 3.0

    name: ClassVar[str] = "robust_deviation"
    uses_baseline: ClassVar[bool] = True
    needs_baseline: ClassVar[bool] = True
    relative: ClassVar[bool] = True
    reason_template: ClassVar[str] = "value {value:.4g} is {score:.1f} robust σ from baseline {reference:.4g}"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        assert baseline is not None
        v = values.to_numpy()
        c = baseline.center.to_numpy(dtype=np.float32)
        s = baseline.scale.to_numpy(dtype=np.float32)
        with np.errstate(invalid="ignore"):
            scale = np.fmax(np.fmax(s, self.min_scale_rel * np.abs(c)), self.min_scale_abs)
            z = (v - c) / scale
            oriented = {"up": z, "down": -z, "both": np.abs(z)}[self.direction]
            flags = oriented >= self.z
            keep = oriented >= self.clear_z
        return Detection(like(values, flags), like(values, z), like(values, c), like(values, keep))
