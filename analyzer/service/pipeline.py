"""One detection cycle over a source: a :class:`~analyzer.detection.cycle.SignalCycle` per catalogue signal
(live window fetched incrementally, 1 d / 7 d same-time windows cached, baselines computed for new
rows only) plus the context series the diagnosis rules read.

What the daemon already knows is kept out of the baselines: each signal's events of the previous
cycle (onset to clearing, or to now while active), the open incidents' evidence from its onset
for as long as the incident is open (handed to :meth:`CyclePipeline.remember` every cycle) and
the declared change events (deploys, restarts, maintenance) for a settling time after each, so
that neither a persisting fault nor a deploy becomes "normal" within the hour the recent baseline
spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

import numpy as np
import pandas as pd

from analyzer.detection.baselines import BaselinePolicy, ChangeWindow
from analyzer.detection.cycle import SignalCycle
from analyzer.detection.evaluate import needs_history
from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import (
    ENGINE_PREEMPTED,
    ENGINE_WAITING,
    THERMAL_REASON,
    THROTTLE_REASON,
    Labels,
    Snapshot,
)
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import NOT_DECLARED, ChangeEvent
from analyzer.signals import query as q
from analyzer.signals.catalogue import THROTTLED
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.sources.base import LiveWindow, Source, WindowPool, grid_index, window_key
from analyzer.signals.spec import SignalSpec, traffic_name

TARGET_INFO = "target_info"
# Context the rules read but that is not itself judged (analyzer/diagnosis/rules.py "Snapshot").
CONTEXT: dict[str, SignalSpec] = {s.name: s for s in (
    SignalSpec.of(name=THERMAL_REASON, layer="infrastructure", kind="gauge", entity_labels=("node", "gpu"),
                  expr=q.gauge("oximeter_gpu_clock_event_active", {"reason": "~hw_thermal|sw_thermal"},
                               drop=("reason",))),
    SignalSpec.of(name=THROTTLE_REASON, layer="infrastructure", kind="gauge", entity_labels=("node", "gpu"),
                  expr=THROTTLED),
    SignalSpec.of(name=ENGINE_WAITING, layer="engine", kind="gauge", entity_labels=("node",),
                  expr=q.Aggregate(q.OverTime(q.select("vllm:num_requests_waiting"), 900),
                                   drop=("engine", "model_name"))),
    SignalSpec.of(name=ENGINE_PREEMPTED, layer="engine", kind="gauge", entity_labels=("node",),
                  expr=q.increase("vllm:num_preemptions_total", 900, drop=("engine", "model_name"))),
    # Every label kept: the instance names the node a scrape target runs on.
    SignalSpec.of(name=TARGET_INFO, layer="platform", kind="gauge",
                  entity_labels=("service", "model", "node"), expr=q.select("oximeter_target_info")),
)}
# How long after a declared change its effects (restart, warm-up, cache refill) stay out of baselines.
CHANGE_SETTLE_S = 600.0


def snapshot_from_frames(frames: Mapping[str, SeriesFrame]) -> Snapshot:
    """The latest finite value of every series, keyed by signal then entity labels."""
    out: dict[str, dict[Labels, float]] = {}
    for name, frame in frames.items():
        if frame.values.empty:
            continue
        data = frame.values.to_numpy()
        present = ~np.isnan(data)
        # Per column, its last row holding a value (what a forward fill leaves in the last row).
        last = data[len(data) - 1 - np.argmax(present[::-1], axis=0), np.arange(data.shape[1])]
        out[name] = {AnomalyEvent.labels_from(frame.labels_of(str(col))): float(v)
                     for col, v in zip(frame.values.columns, last, strict=True) if math.isfinite(float(v))}
    return out


def topology_from_frames(frames: Mapping[str, SeriesFrame], base: Topology) -> Topology:
    """``base`` (the config's map) merged with what ``oximeter_target_info`` says now."""
    frame = frames.get(TARGET_INFO)
    if frame is None or frame.values.empty:
        return base
    return base.merged(Topology.from_target_info(frame.labels_of(str(c)) for c in frame.values.columns))


def change_windows(events: Sequence[ChangeEvent], settle_s: float = CHANGE_SETTLE_S) -> list[ChangeWindow]:
    """Declared changes as the windows baselines leave out: [at, at + ``settle_s``]."""
    settle = timedelta(seconds=settle_s)
    return [(e.at, e.at + settle) for e in events if e.source not in NOT_DECLARED]


class Span(Protocol):
    """What a mask needs of an anomaly (an AnomalyEvent, or an incident's Evidence)."""

    @property
    def signal(self) -> str: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def onset(self) -> datetime: ...
    @property
    def cleared_at(self) -> datetime | None: ...


def anomalous_mask(events: Sequence[Span], frame: SeriesFrame, index: pd.DatetimeIndex,
                   ) -> pd.DataFrame | None:
    """Where ``events`` (one signal's, from the last cycle) held, on ``index`` × the frame's columns:
    onset to clearing, or to the end of ``index`` while active. None when nothing is marked."""
    if not events or frame.values.columns.empty:
        return None
    columns = frame.values.columns
    column = {AnomalyEvent.labels_from(frame.labels_of(str(c))): i for i, c in enumerate(columns)}
    mask = np.zeros((len(index), len(column)), dtype=bool)
    for event in events:
        col = column.get(event.labels)
        if col is None:
            continue
        lo = int(index.searchsorted(pd.Timestamp(event.onset), side="left"))
        hi = len(index) if event.cleared_at is None else \
            int(index.searchsorted(pd.Timestamp(event.cleared_at), side="left"))
        mask[lo:hi, col] = True
    if not mask.any():
        return None
    return pd.DataFrame(mask, index=index, columns=columns)


class Pipeline(Protocol):
    """One cycle of detection: the anomaly events and the frames they were found in."""

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        """Events and frames as of ``now``."""
        ...

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        """The diagnosis rules' context as of ``now``, from the frames :meth:`run` returned."""
        ...

    def remember(self, spans: Iterable[Span]) -> None:
        """The open incidents' evidence, to keep out of baselines while they are open."""
        ...


@dataclass(frozen=True)
class Held:
    """An open incident's evidence as a mask sees it: from its onset, still open."""

    signal: str
    labels: tuple[tuple[str, str], ...]
    onset: datetime
    cleared_at: datetime | None = None


def _no_changes(start: datetime, end: datetime) -> list[ChangeEvent]:
    return []


@dataclass
class CyclePipeline:
    """Every catalogue signal through its own :class:`SignalCycle`, and the context series.

    ``change_events(start, end)`` lists the declared changes in a span (the incident store's);
    the span covers the live window and the same-time windows, so yesterday's deploy is left out
    of yesterday's window too.
    """

    source: Source
    catalogue: Mapping[str, SignalSpec]
    step_s: float
    live_s: float
    policy: BaselinePolicy = field(default_factory=BaselinePolicy)
    change_events: Callable[[datetime, datetime], Sequence[ChangeEvent]] = _no_changes
    # First cycle: baselines for at most this many newest rows per signal (a restart costs seconds).
    cold_rows: int | None = 40
    # The series the rules and the severity read beside the signals (the SLOs' burn counts too).
    context_specs: Mapping[str, SignalSpec] = field(default_factory=lambda: CONTEXT)
    cycles: dict[str, SignalCycle] = field(init=False, default_factory=dict)
    context: dict[str, LiveWindow] = field(init=False, default_factory=dict)
    previous: dict[str, list[Span]] = field(init=False, default_factory=dict)
    held: dict[str, list[Span]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        # Signals (and traffic guards) that read one query share its windows: one fetch a cycle.
        pool = WindowPool(partial(window_key, self.source))
        self.cycles = {name: SignalCycle(spec, policy=self.policy, live_s=self.live_s, step_s=self.step_s,
                                         cold_rows=self.cold_rows, pool=pool)
                       for name, spec in self.catalogue.items()}
        self.context = {name: LiveWindow(spec, self.live_s, self.step_s)
                        for name, spec in self.context_specs.items()}

    def learning(self) -> dict[str, int]:
        """Per signal, how many of its series are still learning (no same-time baseline yet)."""
        return {name: count for name, cycle in self.cycles.items()
                if (count := max((t.learning() for t in cycle.trackers.values()), default=0))}

    def remember(self, spans: Iterable[Span]) -> None:
        """The open incidents' evidence (the caller's, every cycle; after a restart, before the
        first): each stays out of its signal's baselines from its onset for as long as its
        incident is open, even while the anomaly itself has cleared, so a fault that lasts is
        never learnt as the new normal and its incident does not resolve while it runs."""
        held: dict[str, list[Span]] = {}
        for span in spans:
            if span.signal in self.cycles:
                held.setdefault(span.signal, []).append(Held(span.signal, span.labels, span.onset))
        self.held = held

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        """The latest value of every series of this cycle's frames."""
        return snapshot_from_frames(frames)

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        """Fetch what is new, evaluate every catalogue signal, fetch the context series."""
        reach = self.live_s + max(self.policy.lags_s, default=0.0) + self.policy.seasonal_half_window_s
        changes = change_windows(self.change_events(now - timedelta(seconds=reach), now))
        index = grid_index(now - timedelta(seconds=self.live_s), now, self.step_s)
        events: list[AnomalyEvent] = []
        frames: dict[str, SeriesFrame] = {}
        for name, cycle in self.cycles.items():
            known = [*self.previous.get(name, []), *self.held.get(name, [])]
            mask = None
            if known and needs_history(cycle.spec):
                # First cycle (remembered evidence): the live window's columns, fetched now; the
                # cycle's own update below then only fetches the overlap step.
                frame = cycle.last_frame or cycle.live.update(self.source, now)
                mask = anomalous_mask(known, frame, index)
            found = cycle.run(self.source, now, anomalous=mask, changes=changes)
            self.previous[name] = list(found)
            events += found
            if cycle.last_frame is not None:
                frames[name] = cycle.last_frame
            if cycle.last_traffic is not None and not cycle.last_traffic.values.columns.empty:
                frames[traffic_name(name)] = cycle.last_traffic
        for name, window in self.context.items():
            frames[name] = window.update(self.source, now)
        return events, frames
