"""Detectors, one per file, registered by name (explicit dict: no scanning, no import-time work).

A new detector is one file (a :class:`Detector` dataclass whose fields are its parameters) and one
line in ``DETECTORS``; a signal then names it: ``detectors: [{type: <name>, <parameter>: ...}]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analyzer.detection.detectors.base import Detection, Detector
from analyzer.detection.detectors.counter import CounterGrowth
from analyzer.detection.detectors.deviation import RobustDeviation
from analyzer.detection.detectors.drop import Drop
from analyzer.detection.detectors.neighbours import NeighbourSurprise
from analyzer.detection.detectors.peer import PeerOutlier
from analyzer.detection.detectors.ratio import BaselineRatio
from analyzer.detection.detectors.threshold import AbsoluteThreshold
from analyzer.detection.detectors.trend import Trend
from analyzer.detection.detectors.vanished import Vanished

DETECTORS: dict[str, type[Detector]] = {
    "threshold": AbsoluteThreshold,
    "baseline_ratio": BaselineRatio,
    "robust_deviation": RobustDeviation,
    "neighbour_surprise": NeighbourSurprise,
    "counter_growth": CounterGrowth,
    "drop": Drop,
    "trend": Trend,
    "peer_outlier": PeerOutlier,
    "vanished": Vanished,
}



def build_detector(type_name: str, params: Mapping[str, Any]) -> Detector:
    """The registered detector ``type_name`` with ``params`` (its fields); a ValueError names an
    unknown type or a parameter it does not take."""
    cls = DETECTORS.get(type_name)
    if cls is None:
        raise ValueError(f"unknown detector type {type_name!r} (known: {', '.join(sorted(DETECTORS))})")
    try:
        return cls(**params)
    except TypeError as exc:  # an unknown or missing field
        raise ValueError(f"detector {type_name!r}: {exc}") from None


__all__ = [
    "DETECTORS",
    "AbsoluteThreshold",
    "BaselineRatio",
    "CounterGrowth",
    "Detection",
    "Detector",
    "Drop",
    "NeighbourSurprise",
    "PeerOutlier",
    "RobustDeviation",
    "Trend",
    "Vanished",
    "build_detector",
]
