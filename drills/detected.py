"""Detection once over a whole history, as the replays of drills, sweeps and benches run it: every
catalogue signal read from the history through the frame source (the same query expressions the live
analyzer runs), detected over the whole history with each anomaly held out of its baselines as the
daemon holds out its open incidents, and the pipeline that hands the daemon's cycle what a live cycle
at each moment would have seen."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.detection.baselines import BaselinePolicy
from analyzer.detection.evaluate import evaluate_signal
from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.burn import burn_specs
from analyzer.diagnosis.case import Labels, Snapshot
from analyzer.incidents.lifecycle import IncidentSettings
from analyzer.service.pipeline import CONTEXT
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.raw import RawStore
from analyzer.signals.slo import SloSettings
from analyzer.signals.sources.frames import FrameSource
from analyzer.signals.sources.stock import read_history
from analyzer.signals.spec import SignalSpec

# The objectives a replay's severity follows: the configuration's defaults.
DEFAULT_SLOS = SloSettings()


def signal_frames(history: Path | RawStore, catalogue: Mapping[str, SignalSpec] = CATALOGUE, *,
                  stock: bool = False, slos: SloSettings = DEFAULT_SLOS,
                  ) -> tuple[dict[str, SeriesFrame], float]:
    """Every catalogue signal, its traffic guard, the rules' context and the SLOs' burn counts over
    the whole history (a history directory, or its raw series; ``stock``: a stock fleet's history,
    read through the adapters as Prometheus would)."""
    raw = read_history(history, stock=stock)
    source = FrameSource(raw=raw)
    specs: dict[str, SignalSpec] = {**catalogue, **CONTEXT, **burn_specs(slos)}
    for spec in catalogue.values():
        traffic = spec.traffic_spec()
        if traffic is not None:
            specs[traffic.name] = traffic
    return {name: source.signal_frame(spec) for name, spec in specs.items()}, float(raw.step_s)


def detect(frames: Mapping[str, SeriesFrame], step_s: float,
           catalogue: Mapping[str, SignalSpec] = CATALOGUE, policy: BaselinePolicy | None = None,
           same_time: Mapping[float, Mapping[str, SeriesFrame]] | None = None,
           hold_s: float = IncidentSettings().resolve_after_s) -> list[AnomalyEvent]:
    """Anomaly events of every catalogue signal (minimum-traffic guard applied, as the daemon does).

    ``same_time`` (lag_s → frames) holds the windows a day (or a week) earlier that the seasonal
    baselines compare with, as the daemon's same-time windows do. Each anomaly stays out of its
    signal's baselines until ``hold_s`` after it clears (its incident's quiet time before it
    resolves), as the daemon keeps open incidents out.
    """
    events: list[AnomalyEvent] = []
    for name, spec in catalogue.items():
        frame = frames.get(name)
        if frame is None or frame.values.empty or not len(frame.values.columns):
            continue
        guard = frames.get(f"{name}:traffic")
        traffic = None if guard is None or guard.values.empty else guard.values
        history = {lag: lagged[name].values for lag, lagged in (same_time or {}).items() if name in lagged}
        events += evaluate_signal(spec, frame, step_s=step_s, traffic=traffic, policy=policy,
                                  history=history or None, hold_s=hold_s, peaks=True)
    return events


def as_of(events: Sequence[AnomalyEvent], now: datetime) -> list[AnomalyEvent]:
    """What a live cycle at ``now`` would have seen: detected by then, at the peak it had reached
    by then, cleared only if by then."""
    out = []
    for e in events:
        if e.detected_at > now:
            continue
        e = e.peak_by(now)
        out.append(e if e.cleared_at is None or e.cleared_at <= now else replace(e, cleared_at=None))
    return out


class Snapshots:
    """The context snapshot (``analyzer.service.pipeline.snapshot_from_frames``) of any moment, from frames
    forward-filled once: the latest finite value within the last ``rows`` samples, per series."""

    def __init__(self, frames: Mapping[str, SeriesFrame], rows: int = 20) -> None:
        self._parts = []
        for name, frame in frames.items():
            if frame.values.empty:
                continue
            labels = [AnomalyEvent.labels_from(frame.labels_of(str(c))) for c in frame.values.columns]
            filled = frame.values.ffill(limit=rows - 1)
            self._parts.append((name, pd.DatetimeIndex(filled.index), filled.to_numpy(np.float64), labels))

    def at(self, now: datetime) -> Snapshot:
        """The snapshot a cycle at ``now`` reads."""
        stamp = pd.Timestamp(now)
        out: dict[str, dict[Labels, float]] = {}
        for name, index, values, labels in self._parts:
            row = int(index.searchsorted(stamp, side="right")) - 1
            if row >= 0:
                out[name] = {lab: float(v) for lab, v in zip(labels, values[row], strict=True)
                             if math.isfinite(v)}
        return out


class DetectedPipeline:
    """The analyzer's pipeline for a replay whose detection ran once over the whole history: each
    cycle gets the events a live cycle at ``now`` would have seen and the rules' context then."""

    def __init__(self, frames: Mapping[str, SeriesFrame], events: Sequence[AnomalyEvent]) -> None:
        self.events, self.snapshots = events, Snapshots(frames)

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        """The events as of ``now``; no frames (the topology is joined once, see :func:`replay_cycles`)."""
        return as_of(self.events, now), {}

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        """The context at ``now``."""
        return self.snapshots.at(now)

    def remember(self, spans: Iterable[Any]) -> None:
        """Nothing to do: detection already kept each anomaly out of its baselines (``hold_s``)."""
