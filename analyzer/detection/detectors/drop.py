"""Drop: a ratio that should stay high falls (a cache hit rate going from 95 % to 60 %)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like


@dataclass
class Drop(Detector):
    """Flags values that lost at least ``min_drop`` (absolute) *and* ``min_fraction`` of their
    baseline; with no baseline, ``expected`` (e.g. 0.95) stands in for it. Keeps an event open
    while still ``clear_drop`` below."""

    min_drop: float = 0.15
    min_fraction: float = 0.2
    expected: float | None = None
    clear_drop: float = 0.05

    name: ClassVar[str] = "drop"
    uses_baseline: ClassVar[bool] = True
    relative: ClassVar[bool] = True
    reason_template: ClassVar[str] = (
        "value {value:.3g} dropped from baseline {reference:.3g} ({score:.0%} lost)"
    )

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        v = values.to_numpy()
        if baseline is not None:
            c = baseline.center.to_numpy(dtype=np.float32)
            if self.expected is not None:
                c = np.where(np.isnan(c), np.float32(self.expected), c)
        else:
            c = np.full(v.shape, np.nan if self.expected is None else self.expected, dtype=np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            lost = c - v
            fraction = lost / np.abs(c)
            flags = (lost >= self.min_drop) & (fraction >= self.min_fraction)
            keep = lost >= self.clear_drop
        return Detection(like(values, flags), like(values, fraction), like(values, c), like(values, keep))
