"""Builders shared by the incident tests: events at minute offsets from a fixed start."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from analyzer.detection.events import AnomalyEvent
from analyzer.signals.catalogue import CATALOGUE

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    """T0 plus ``minutes``."""
    return T0 + timedelta(minutes=minutes)


def ev(signal: str, value: float, baseline: float | None = None, *, onset: float = 0.0,
       cleared: float | None = None, layer: str | None = None, on: Mapping[str, str] | None = None,
       **labels: str) -> AnomalyEvent:
    """An event of catalogue ``signal`` (its layer) on ``on`` + ``labels``, detected a minute after onset."""
    return AnomalyEvent(
        signal=signal, layer=layer or CATALOGUE[signal].layer,
        labels=AnomalyEvent.labels_from({**(on or {}), **labels}),
        onset=at(onset), detected_at=at(onset + 1), cleared_at=None if cleared is None else at(cleared),
        value=value, baseline=baseline, score=value / baseline if baseline else 1.0, reason=f"{signal} test",
    )


def gpu(node: str = "node-0", index: str = "0") -> tuple[tuple[str, str], ...]:
    """Snapshot labels of one GPU."""
    return (("gpu", index), ("node", node))
