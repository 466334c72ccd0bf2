"""Peer outlier: one GPU or node far from its same-model peers at the same moment.

A robust z per timestamp across each peer group (median and MAD of the row): a slow GPU stands
out against its peers whatever the time of day, so this needs no history.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, Self

import numpy as np
import pandas as pd

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.signals.frame import Baseline
from analyzer.signals.rolling import like

# Scales a MAD to a standard deviation for normal data.
MAD_TO_SIGMA = 1.4826


@dataclass
class PeerOutlier(Detector):
    """Flags series more than ``z`` robust scales from their peer group's median and at least
    ``min_rel_delta`` of it away; groups with fewer than ``min_peers`` reporting series are
    skipped. ``groups`` maps column → group (e.g. gpu_model); unmapped columns share one group.
    ``min_delta`` is an absolute margin too, so a fleet idling at 0 does not make 1 % an outlier."""

    z: float = 5.0
    direction: Literal["up", "down", "both"] = "both"
    min_peers: int = 4
    min_rel_delta: float = 0.1
    min_delta: float = 0.0
    groups: Mapping[str, str] = field(default_factory=dict)

    name: ClassVar[str] = "peer_outlier"
    relative: ClassVar[bool] = True
    reason_template: ClassVar[str] = (
        "value {value:.4g} is {score:.1f} robust σ from the peer median {reference:.4g}"
    )

    def with_peer_groups(self, groups: Mapping[str, str]) -> Self:
        return replace(self, groups=groups)

    def _detect(self, values: pd.DataFrame, baseline: Baseline | None) -> Detection:
        v = values.to_numpy()
        med = np.full(v.shape, np.nan, dtype=np.float32)
        scale = np.full(v.shape, np.nan, dtype=np.float32)
        keys = np.array([self.groups.get(str(c), "") for c in values.columns])
        # One pass per peer group (a handful of GPU models), never per series.
        for key in np.unique(keys):
            cols = np.flatnonzero(keys == key)
            sub = v[:, cols]
            enough = (np.count_nonzero(~np.isnan(sub), axis=1) >= self.min_peers)[:, None]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                m = np.nanmedian(sub, axis=1, keepdims=True)
                mad = np.nanmedian(np.abs(sub - m), axis=1, keepdims=True) * MAD_TO_SIGMA
            med[:, cols] = np.where(enough, m, np.nan)
            scale[:, cols] = np.where(enough, mad, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            floor = np.fmax(self.min_rel_delta * np.abs(med) / 3, 1e-9)
            z = (v - med) / np.fmax(scale, floor)
            oriented = {"up": z, "down": -z, "both": np.abs(z)}[self.direction]
            big = (np.abs(v - med) >= self.min_rel_delta * np.abs(med)) & (np.abs(v - med) >= self.min_delta)
            flags = (oriented >= self.z) & big
            keep = (oriented >= self.z / 2) & big
        return Detection(like(values, flags), like(values, z), like(values, med), like(values, keep))
