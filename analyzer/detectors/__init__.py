"""Detectors, one per file, registered by name (explicit dict: no scanning, no import-time work)."""

from __future__ import annotations

from analyzer.detectors.base import Detection, Detector
from analyzer.detectors.counter import CounterGrowth
from analyzer.detectors.deviation import RobustDeviation
from analyzer.detectors.drop import Drop
from analyzer.detectors.neighbours import NeighbourSurprise
from analyzer.detectors.peer import PeerOutlier
from analyzer.detectors.ratio import BaselineRatio
from analyzer.detectors.threshold import AbsoluteThreshold
from analyzer.detectors.trend import Trend
from analyzer.detectors.vanished import Vanished

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
]
