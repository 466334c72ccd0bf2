"""Attribution accuracy: every scenario's history replayed through detection, correlation and diagnosis.

For each ``simulator/scenarios/*.yaml``: generate its history (``oximeter sim history``, cached in
``--workdir``), derive every catalogue signal and the rules' context from the raw series, detect
over the whole history, then replay the daemon's cycles every ``--interval`` (events visible only
once detected, cleared only once cleared) through the incident tracker. A scenario is right when
it yields exactly one incident per fault (none for a fault-free one), and an incident matches the
truth's layer, rule and entity. Prints a table and ends with ``attribution accuracy: N %``.

    .venv/bin/python bench/attribution_eval.py [--days 1] [--step 60s] [--interval 5m]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from analyzer.daemon import CONTEXT, CONTEXT_RECIPES, snapshot_from_frames, topology_from_frames
from analyzer.evaluate import evaluate_signal
from analyzer.events import AnomalyEvent
from analyzer.frame import SeriesFrame
from analyzer.incident_store import parse_duration
from analyzer.incidents import Incident, IncidentSettings, IncidentTracker, findings
from analyzer.signals import CATALOGUE
from analyzer.sources import recipes
from analyzer.sources.frames import FrameSource
from analyzer.sources.raw import RawStore
from analyzer.topology import Topology
from oximeter.procs import oximeter_argv

ROOT = Path(__file__).resolve().parent.parent


def history(scenario: Path, workdir: Path, days: float, step: str) -> Path:
    """The scenario's history directory, generated unless a newer one is cached."""
    out = workdir / f"{scenario.stem}-{days:g}d-{step}"
    truth = out / "truth.json"
    if not truth.exists() or truth.stat().st_mtime < scenario.stat().st_mtime:
        subprocess.run(oximeter_argv("sim", "history", "--scenario", str(scenario), "--days", f"{days:g}",
                                     "--step", step, "--out", str(out)), check=True, capture_output=True)
    return out


def frames_of(directory: Path) -> tuple[dict[str, SeriesFrame], float]:
    """Every catalogue and context signal over the whole history, and the step."""
    raw = RawStore.from_history(directory)
    source = FrameSource(raw=raw, recipes={**recipes.RECIPES, **CONTEXT_RECIPES})
    frames = {name: source.signal_frame(spec) for name, spec in {**CATALOGUE, **CONTEXT}.items()}
    return frames, float(raw.step_s)


def detect(frames: dict[str, SeriesFrame], step_s: float) -> list[AnomalyEvent]:
    """Anomaly events of every catalogue signal."""
    events: list[AnomalyEvent] = []
    for name, spec in CATALOGUE.items():
        frame = frames[name]
        if not frame.values.empty and len(frame.values.columns):
            events += evaluate_signal(spec, frame, step_s=step_s)
    return events


def as_of(events: list[AnomalyEvent], now: datetime) -> list[AnomalyEvent]:
    """What a live cycle at ``now`` would have seen."""
    out = []
    for e in events:
        if e.detected_at > now:
            continue
        out.append(e if e.cleared_at is None or e.cleared_at <= now else replace(e, cleared_at=None))
    return out


def frames_until(frames: dict[str, SeriesFrame], now: datetime) -> dict[str, SeriesFrame]:
    """Frames cut at ``now`` (for the context snapshot)."""
    stamp = pd.Timestamp(now)
    return {k: SeriesFrame(f.values.loc[:stamp].tail(20), f.labels) for k, f in frames.items()}


def replay(frames: dict[str, SeriesFrame], events: list[AnomalyEvent], interval_s: float,
           settings: IncidentSettings) -> list[Incident]:
    """The daemon's cycles over the whole history; every incident it opened, in its last state."""
    index = next(f.values.index for f in frames.values() if len(f.values.index))
    start, end = index[0].to_pydatetime(), index[-1].to_pydatetime()
    tracker, seen = IncidentTracker(settings), {}
    now = start + timedelta(seconds=interval_s)
    while now <= end:
        cut = frames_until(frames, now)
        topology = topology_from_frames(cut, Topology())
        found = findings(as_of(events, now), topology, now=now, snapshot=snapshot_from_frames(cut),
                         settings=settings)
        _, touched = tracker.step(found, now)
        seen.update({i.id: i for i in touched})
        now += timedelta(seconds=interval_s)
    return sorted(seen.values(), key=lambda i: i.first_onset)


def matches(inc: Incident, truth: dict[str, Any]) -> bool:
    """Layer, rule and every truth entity label on the root cause."""
    labels = dict(inc.root_cause.labels)
    entity = truth.get("entity") or {}
    return (inc.layer == truth["layer"] and inc.rule == truth["rule"]
            and all(labels.get(k) == str(v) for k, v in entity.items()))


def main(argv: list[str] | None = None) -> int:
    """Run every scenario and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=str(ROOT / "simulator" / "scenarios"))
    parser.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--step", default="60s")
    parser.add_argument("--interval", default="5m", help="daemon cycle interval replayed")
    parser.add_argument("--workdir", default="/tmp/oximeter-attribution")
    args = parser.parse_args(argv)
    settings = IncidentSettings()
    interval_s = parse_duration(args.interval).total_seconds()
    rows, right = [], 0
    scenarios = sorted(Path(args.scenarios).glob("*.yaml"))
    scenarios = [s for s in scenarios if not args.only or s.stem in args.only]
    for scenario in scenarios:
        started = time.perf_counter()
        directory = history(scenario, Path(args.workdir), args.days, args.step)
        truth_doc = json.loads((directory / "truth.json").read_text())
        truth = truth_doc["truth"]
        expected = 0 if truth["rule"] == "none" else len(truth_doc["faults"])
        frames, step_s = frames_of(directory)
        incidents = replay(frames, detect(frames, step_s), interval_s, settings)
        ok = len(incidents) == expected and (expected == 0 or any(matches(i, truth) for i in incidents))
        right += ok
        got = "; ".join(f"{i.layer}/{i.rule} {i.root_cause.signal}@{i.root_cause.entity}"
                        for i in incidents) or "none"
        rows.append((scenario.stem, f"{truth['layer']}/{truth['rule']}", str(expected), str(len(incidents)),
                     "yes" if ok else "NO", got, f"{time.perf_counter() - started:.0f}s"))
    header = ("scenario", "truth", "expected", "incidents", "right", "attributed", "time")
    widths = [max(len(r[c]) for r in (header, *rows)) for c in range(len(header))]
    for row in (header, *rows):
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    accuracy = 100.0 * right / len(rows) if rows else 0.0
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {args.days:g} d history at {args.step}, "
          f"cycles every {args.interval}")
    print(f"attribution accuracy: {accuracy:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
