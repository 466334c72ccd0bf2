"""Vanished series: telemetry that stops is a signal, not silence (a GPU that "detaches")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like


@dataclass
class Vanished(Detector):
    """Flags every missing sample of a series that has reported before; persistence decides how
    long a gap must last (one lost scrape is not an outage). With ``max_age_s`` the values are
    the age of each series' newest sample (PromQL ``time() - timestamp(x)``), and an age beyond
    it counts as missing too: a store's 5-minute lookback no longer hides a vanished series."""

    max_age_s: float | None = None

    name: ClassVar[str] = "vanished"
    reason_template: ClassVar[str] = "series stopped reporting"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        data = values.to_numpy()
        missing = np.isnan(data)
        if self.max_age_s is not None:
            with np.errstate(invalid="ignore"):
                missing = missing | (data > self.max_age_s)
        seen = np.logical_or.accumulate(~missing, axis=0)
        flags = missing & seen
        return Detection(like(values, flags), like(values, flags.astype(np.float32)),
                         like(values, np.nan), None)

    def reason(self, value: float, reference: float, score: float) -> str:
        """How long the series has been silent, when known."""
        if self.max_age_s is not None and np.isfinite(value):
            return f"series stopped reporting ({value:.0f} s since its last sample)"
        return "series stopped reporting"
