"""The stretches of a scenario a drill replays, and their simulated histories, cached.

A drill replays *windows* around the faults rather than whole days, because generating history
is the expensive part (the simulator plays every request): the recent hour and the 30-minute
trend are filled after ``warmup_s``, and the seasonal baseline reads a fault-free window one day
earlier (``same_time_window``), just as the live daemon reads same-time windows from a backfill.

Histories are generated in-process (Parquet and the truth only: replay needs no OpenMetrics) and
cached under a key made of what the history is generated from — the scenario's content, the
window, the step, the trace file's content — and the generator's version
(``simulator.history.HISTORY_VERSION``), so an edited scenario or a new generator never replays
a stale history.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from analyzer.detection.baselines import BaselinePolicy
from analyzer.incidents.maintenance import MaintenanceWindow
from simulator.history import HISTORY_VERSION
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


@dataclass(frozen=True)
class HistoryWindow:
    """One stretch of a scenario to simulate: its faults re-timed to count back from ``end_s``."""

    scenario: Scenario
    days: float
    end_s: float


def _end(fault: ScenarioFault, end_s: float, origin_s: float) -> float:
    start = end_s + fault.start if fault.start < 0 else origin_s + fault.start
    # A fault that never ends (a leak) is watched for OPEN_ENDED_S, long enough for its trend.
    return min(end_s, start + OPEN_ENDED_S) if fault.duration is None else start + fault.duration


def _origin_s(sc: Scenario, end_s: float) -> float:
    """Where positive fault starts count from: a history just long enough to hold them plus a day."""
    later = [f for f in sc.faults if f.start >= 0]
    horizon_s = max((f.start + (f.duration or 0.0) for f in later), default=0.0)
    days_full = math.ceil(horizon_s / DAY_S) + 1 if later else 1
    return end_s - days_full * DAY_S


def maintenance_windows(sc: Scenario, end_s: float = DRILL_END_S) -> list[MaintenanceWindow]:
    """The scenario's maintenance windows in absolute time, their starts counted as its faults' are."""
    origin_s = _origin_s(sc, end_s)
    out = []
    for m in sc.maintenance:
        start_s = end_s + m.start if m.start < 0 else origin_s + m.start
        out.append(MaintenanceWindow(datetime.fromtimestamp(start_s, UTC),
                                     datetime.fromtimestamp(start_s + m.duration, UTC), m.node,
                                     None if m.gpu is None else str(m.gpu), m.service, m.reason, "scenario"))
    return out


def drill_windows(sc: Scenario, *, end_s: float = DRILL_END_S, step_s: float = 60.0,
                  warmup_s: float = WARMUP_S, tail_s: float = TAIL_S) -> list[HistoryWindow]:
    """The windows that cover every fault of ``sc`` with ``warmup_s`` before it.

    Negative fault starts count back from the history's end, so they share the window that ends
    at ``end_s``. Positive starts count from the start of a history just long enough to hold
    them plus a day (a week-long scenario's nuisance on its day and hour), each windowed alone.
    """
    origin_s = _origin_s(sc, end_s)
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
        windows.append(HistoryWindow(sc.model_copy(update={"faults": timed}), steps * step_s / DAY_S, hi))
    return windows


def same_time_window(window: HistoryWindow, lag_s: float = DAY_S,
                     half_window_s: float = BaselinePolicy().seasonal_half_window_s) -> HistoryWindow:
    """The fault-free window ``lag_s`` earlier that a seasonal baseline reads (widened by its
    centred median's half window on both sides), as the live daemon fetches from a backfill."""
    quiet = window.scenario.model_copy(update={"faults": []})
    return HistoryWindow(quiet, window.days + 2 * half_window_s / DAY_S, window.end_s - lag_s + half_window_s)


def cache_key(window: HistoryWindow, step_s: float) -> str:
    """What a history depends on: the fleet, traffic and faults (not the truth nor the maintenance
    the analyzer is told of), the window, the step, the trace file's content and the generator's
    version."""
    from simulator.trace import file_digest

    sc = window.scenario
    model = sc.model_dump(mode="json", exclude={"name", "description", "truth", "also", "maintenance"})
    trace = None if sc.trace is None else file_digest(sc.trace.file)
    key = json.dumps({"scenario": model, "days": window.days, "step_s": step_s, "end_s": window.end_s,
                      "generator": HISTORY_VERSION, "trace": trace}, sort_keys=True)
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
