"""Vanished series: telemetry that stops is a signal, not silence (a GPU that "detaches")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from analyzer.detectors.base import Detection, Detector, like
from analyzer.frame import Baseline


@dataclass
class Vanished(Detector):
    """Flags every missing sample of a series that has reported before; persistence decides how
    long a gap must last (one lost scrape is not an outage)."""

    name: ClassVar[str] = "vanished"
    reason_template: ClassVar[str] = "series stopped reporting"

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        missing = np.isnan(values.to_numpy())
        seen = np.logical_or.accumulate(~missing, axis=0)
        flags = missing & seen
        return Detection(like(values, flags), like(values, flags.astype(np.float32)),
                         like(values, np.nan), None)
