"""Replay a scenario through the analyzer in accelerated time: history → signals → detection →
the daemon's cycles (correlation, diagnosis, incident lifecycle), without Prometheus or a clock.

Used by ``oximeter drill --replay`` and ``bench/attribution_eval.py``. Histories are generated
in-process (Parquet and the truth only: replay needs no OpenMetrics) and cached under a key
that covers the scenario, the window, the step and the simulator's own source, so an edited
scenario or simulator never replays a stale history.

A drill replays *windows* around the faults rather than whole days, because generating history
is the expensive part (the simulator plays every request): the recent hour and the 30-minute
trend are filled after ``warmup_s``, and the seasonal baseline reads a fault-free window one day
earlier (``same_time_window``), just as the live daemon reads same-time windows from a backfill.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.baselines import BaselinePolicy
from analyzer.case import Labels, Snapshot
from analyzer.catalogue import CATALOGUE
from analyzer.daemon import CONTEXT, topology_from_frames
from analyzer.evaluate import evaluate_signal
from analyzer.events import AnomalyEvent
from analyzer.frame import SeriesFrame
from analyzer.incidents import Change, Incident, IncidentSettings, IncidentTracker, findings
from analyzer.settings import AnalyzerSettings
from analyzer.signals import SignalSpec
from analyzer.sources.frames import FrameSource
from analyzer.sources.raw import RawStore
from analyzer.sources.stock import with_stock_translated
from analyzer.topology import Topology
from simulator.scenario import Scenario, ScenarioFault

# A fixed present for drill histories: the simulated traffic follows the time of day, so a
# fixed anchor makes a drill's verdict reproducible (a Wednesday, 18:00 UTC).
DRILL_END_S = 1767808800.0
DAY_S = 86400.0
# Baselines without a day of history need the recent hour (and the 30-min trend) filled first.
WARMUP_S = 3600.0
# After a fault ends: its anomalies clear, then 10 min of quiet resolve the incident.
TAIL_S = 1800.0
# How long a fault without a duration is simulated (the leak's 30-min trend, then 10 min `for`).
OPEN_ENDED_S = 2 * 3600.0
# Where a history's code starts: the digest covers it and every module of ours it imports.
_HISTORY_ENTRY = "simulator/history.py"
_OUR_PACKAGES = ("simulator", "gateway", "exporter", "oximeter")


@dataclass(frozen=True)
class HistoryWindow:
    """One stretch of a scenario to simulate: its faults re-timed to count back from ``end_s``."""

    scenario: Scenario
    days: float
    end_s: float


def _history_sources(root: Path) -> list[Path]:
    """``simulator/history.py`` and every module of ours it imports, transitively (by reading the
    imports, so every process computes the same set, whatever it has imported itself)."""
    seen: set[Path] = set()
    todo = [root / _HISTORY_ENTRY]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                if name.split(".")[0] in _OUR_PACKAGES:
                    base = root.joinpath(*name.split("."))
                    todo += [base.with_suffix(".py"), base / "__init__.py"]
    return sorted(seen)


def _sim_code_digest() -> str:
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for file in _history_sources(root):
        digest.update(str(file.relative_to(root)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _end(fault: ScenarioFault, end_s: float, origin_s: float) -> float:
    start = end_s + fault.start if fault.start < 0 else origin_s + fault.start
    # A fault that never ends (a leak) is watched for OPEN_ENDED_S, long enough for its trend.
    return min(end_s, start + OPEN_ENDED_S) if fault.duration is None else start + fault.duration


def drill_windows(sc: Scenario, *, end_s: float = DRILL_END_S, step_s: float = 60.0,
                  warmup_s: float = WARMUP_S, tail_s: float = TAIL_S) -> list[HistoryWindow]:
    """The windows that cover every fault of ``sc`` with ``warmup_s`` before it.

    Negative fault starts count back from the history's end, so they share the window that ends
    at ``end_s``. Positive starts count from the start of a history just long enough to hold
    them plus a day (a week-long scenario's nuisance on its day and hour), each windowed alone.
    """
    later = [f for f in sc.faults if f.start >= 0]
    horizon_s = max((f.start + (f.duration or 0.0) for f in later), default=0.0)
    days_full = math.ceil(horizon_s / 86400.0) + 1 if later else 1
    origin_s = end_s - days_full * 86400.0
    spans: list[tuple[float, float, list[ScenarioFault]]] = []
    for fault in sc.faults:
        start = end_s + fault.start if fault.start < 0 else origin_s + fault.start
        stop = _end(fault, end_s, origin_s) + (tail_s if fault.duration is not None else 0.0)
        spans.append((start - warmup_s, min(end_s, stop), [fault]))
    if not spans:
        spans = [(end_s - warmup_s - tail_s, end_s, [])]
    spans.sort(key=lambda s: s[0])
    merged: list[tuple[float, float, list[ScenarioFault]]] = []
    for lo, hi, faults in spans:
        if merged and lo <= merged[-1][1]:
            plo, phi, pfaults = merged[-1]
            merged[-1] = (plo, max(phi, hi), [*pfaults, *faults])
        else:
            merged.append((lo, hi, faults))
    windows = []
    for lo, hi, faults in merged:
        hi = math.ceil(hi / step_s) * step_s
        steps = math.ceil((hi - lo) / step_s)
        abs_start = {id(f): (end_s + f.start if f.start < 0 else origin_s + f.start) for f in faults}
        timed = [f.model_copy(update={"start": abs_start[id(f)] - hi}) for f in faults]
        windows.append(HistoryWindow(sc.model_copy(update={"faults": timed}), steps * step_s / 86400.0, hi))
    return windows


def cache_key(window: HistoryWindow, step_s: float) -> str:
    """What a history depends on: the fleet, traffic and faults (not the truth), the window, the
    step, the simulator's source and the trace file's content."""
    from simulator.trace import file_digest

    sc = window.scenario
    model = sc.model_dump(mode="json", exclude={"name", "description", "truth", "also"})
    trace = None if sc.trace is None else file_digest(sc.trace.file)
    key = json.dumps({"scenario": model, "days": window.days, "step_s": step_s, "end_s": window.end_s,
                      "code": _sim_code_digest(), "trace": trace}, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def history_dir(window: HistoryWindow, cache_dir: Path, step_s: float) -> Path:
    """The window's history (``series.parquet``, ``samples.parquet``, ``truth.json``), cached."""
    from simulator.history import generate, write_truth

    out = cache_dir / f"{window.scenario.name}-{cache_key(window, step_s)}"
    if (out / "truth.json").exists():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    store, fleet = generate(window.scenario, window.days, step_s, window.end_s)
    # Written aside and renamed, so a drill killed mid-write never leaves a half history cached.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=cache_dir))
    try:
        store.write_parquet(tmp)
        write_truth(window.scenario, fleet, store.timestamps[0] - step_s, tmp)
        tmp.rename(out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "truth.json").exists():
            raise
    return out


def prepare(windows: Sequence[HistoryWindow], cache_dir: Path, step_s: float, jobs: int = 1) -> list[Path]:
    """Every window's history, generated ``jobs`` at a time (generation is CPU-bound Python)."""
    if jobs <= 1 or len(windows) <= 1:
        return [history_dir(w, cache_dir, step_s) for w in windows]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(history_dir, windows, [cache_dir] * len(windows), [step_s] * len(windows)))


def signal_frames(directory: Path, catalogue: Mapping[str, SignalSpec] = CATALOGUE, *, stock: bool = False,
                  ) -> tuple[dict[str, SeriesFrame], float]:
    """Every catalogue signal, its traffic guard and the rules' context over the whole history
    (``stock``: a stock fleet's history, read through the adapters as Prometheus would)."""
    raw = RawStore.from_history(directory)
    if stock:
        raw = with_stock_translated(raw)
    source = FrameSource(raw=raw)
    specs: dict[str, SignalSpec] = {**catalogue, **CONTEXT}
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
                                  history=history or None, hold_s=hold_s)
    return events


def as_of(events: Sequence[AnomalyEvent], now: datetime) -> list[AnomalyEvent]:
    """What a live cycle at ``now`` would have seen: detected by then, cleared only if by then."""
    out = []
    for e in events:
        if e.detected_at > now:
            continue
        out.append(e if e.cleared_at is None or e.cleared_at <= now else replace(e, cleared_at=None))
    return out


class Snapshots:
    """The context snapshot (``analyzer.daemon.snapshot_from_frames``) of any moment, from frames
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


@dataclass(frozen=True)
class ReplayOutcome:
    """Every incident the replayed daemon opened (in its last state) and every notify-worthy change."""

    incidents: tuple[Incident, ...]
    changes: tuple[Change, ...]


def replay_cycles(frames: Mapping[str, SeriesFrame], events: Sequence[AnomalyEvent], interval_s: float,
                  settings: IncidentSettings | None = None,
                  topology: Topology | None = None,
                  catalogue: Mapping[str, SignalSpec] = CATALOGUE,
                  unreadable: frozenset[str] = frozenset(), not_judged: Sequence[str] = ()) -> ReplayOutcome:
    """The daemon's cycles every ``interval_s`` over the whole history (``catalogue``: the one the
    events were detected with, which also says which signals open incidents; ``unreadable`` and
    ``not_judged``: what the inputs cannot feed, as the daemon is told)."""
    settings = settings or IncidentSettings()
    indexes = [f.values.index for f in frames.values() if len(f.values.index)]
    if not indexes:
        return ReplayOutcome((), ())
    start, end = indexes[0][0].to_pydatetime(), indexes[0][-1].to_pydatetime()
    tracker, seen, changes = IncidentTracker(settings, not_judged=not_judged), {}, []
    # oximeter_target_info's series are the same every cycle: the topology once, like the snapshots.
    joined, snapshots = topology_from_frames(frames, topology or Topology()), Snapshots(frames)
    now = start + timedelta(seconds=interval_s)
    while now <= end:
        found = findings(as_of(events, now), joined, now=now, snapshot=snapshots.at(now), settings=settings,
                         catalogue=catalogue, unreadable=unreadable)
        step_changes, touched = tracker.step(found, now)
        changes += step_changes
        seen.update({i.id: i for i in touched})
        now += timedelta(seconds=interval_s)
    return ReplayOutcome(tuple(sorted(seen.values(), key=lambda i: i.first_onset)), tuple(changes))


def replay_history(directory: Path, interval_s: float, settings: IncidentSettings | None = None,
                   catalogue: Mapping[str, SignalSpec] = CATALOGUE, policy: BaselinePolicy | None = None,
                   same_time: Mapping[float, Path] | None = None, *, stock: bool = False) -> ReplayOutcome:
    """One history directory, end to end (``same_time``: lag_s → the history that long before;
    ``stock``: a stock fleet's history, see :func:`signal_frames`)."""
    frames, step_s = signal_frames(directory, catalogue, stock=stock)
    lagged = {lag: signal_frames(d, catalogue, stock=stock)[0] for lag, d in (same_time or {}).items()}
    hold_s = (settings or IncidentSettings()).resolve_after_s
    inputs = AnalyzerSettings(inputs="stock" if stock else "oximeter")
    return replay_cycles(frames, detect(frames, step_s, catalogue, policy, lagged, hold_s), interval_s,
                         settings, catalogue=catalogue, unreadable=inputs.unreadable_context(),
                         not_judged=inputs.not_judged())


def same_time_window(window: HistoryWindow, lag_s: float = 86400.0,
                     half_window_s: float = BaselinePolicy().seasonal_half_window_s) -> HistoryWindow:
    """The fault-free window ``lag_s`` earlier that a seasonal baseline reads (widened by its
    centred median's half window on both sides), as the live daemon fetches from a backfill."""
    quiet = window.scenario.model_copy(update={"faults": []})
    return HistoryWindow(quiet, window.days + 2 * half_window_s / DAY_S, window.end_s - lag_s + half_window_s)


def truth_matches(incident: Incident | Mapping[str, Any], truth: Mapping[str, Any]) -> bool:
    """Layer, rule and every truth entity label on the root cause (an Incident or its JSON)."""
    if isinstance(incident, Incident):
        layer, rule, labels = incident.layer, incident.rule, dict(incident.root_cause.labels)
    else:
        layer, rule = str(incident.get("layer")), str(incident.get("rule"))
        labels = {str(k): str(v) for k, v in ((incident.get("root_cause") or {}).get("labels") or {}).items()}
    entity = truth.get("entity") or {}
    return (layer == truth["layer"] and rule == truth["rule"]
            and all(str(labels.get(k)) == str(v) for k, v in entity.items()))
