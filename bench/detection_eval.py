"""Detection quality on every simulator scenario: per fault, detected or not and how late;
per scenario, the false alarms; and false alarms per simulated day over the fault-free week.

Affordable because only what detection reads is simulated, through ``drills/history.py``'s cached
history windows (shared with ``oximeter drill``): for each scenario, the window around its faults
(an hour of warm-up for the recent baseline, the fault, half an hour of tail) and the fault-free
same-time window a day earlier that the seasonal baselines read, as the live daemon reads them
from a backfill. The fault-free week is simulated whole (its baselines are its own earlier days,
as a daemon running all week would have them). Every catalogue signal is evaluated with its
minimum-traffic guard (``drills.detected.detect``, the daemon's path); generation is timed apart.

A fault is detected when an event on its node (and GPU, for a GPU fault) has ``detected_at`` in
[start, end + 5 min]; delay = that ``detected_at`` − start, against the target: the detecting
signal's persistence window + 2 steps (``onset +N s`` shows how much of the delay was persistence,
the rest being the time the signal took to cross its limit). A false alarm is an event on a node
that no fault touches, or whose active span is more than 10 min away from every fault on its node.

    .venv/bin/python bench/detection_eval.py [--only NAME ...] [--step 15s] [--jobs 2] [--no-week]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.detection.events import AnomalyEvent
from analyzer.detection.judges import persistence_of
from analyzer.incidents.store import parse_duration
from analyzer.signals.catalogue import CATALOGUE, build_catalogue
from analyzer.signals.spec import SignalSpec
from drills.cli import DEFAULT_CACHE
from drills.detected import detect, signal_frames
from drills.history import (
    DAY_S,
    DRILL_END_S,
    HistoryWindow,
    cache_key,
    drill_windows,
    prepare,
    same_time_window,
)
from simulator.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "simulator" / "scenarios"
WEEK = "fault_free_week"
SLACK = timedelta(minutes=10)  # effects (a queue draining, a 5-min rate window) outlast a fault
LATE = timedelta(minutes=5)  # a detection this long after a fault ends still counts for it
FOREVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Fault:
    """One injected fault, in absolute time."""

    kind: str
    node: str
    gpu: str | None
    start: datetime
    end: datetime

    @classmethod
    def from_truth(cls, item: dict[str, object], until: datetime) -> Fault:
        """From one entry of ``truth.json``'s ``faults``; a fault without an end lasts ``until``."""
        start = datetime.fromtimestamp(float(item["start_epoch_s"]), UTC)  # type: ignore[arg-type]
        stop = item.get("end_epoch_s")
        end = datetime.fromtimestamp(float(stop), UTC) if stop is not None else until  # type: ignore[arg-type]
        gpu = item.get("gpu")
        return cls(str(item["kind"]), str(item["node"]), None if gpu is None else str(gpu), start, end)


@dataclass(frozen=True)
class Verdict:
    """One fault's detection."""

    fault: Fault
    delay_s: float | None
    signal: str
    target_s: float | None
    confirm_s: float | None = None  # detected_at − the event's onset: the persistence part of the delay

    @property
    def in_target(self) -> bool:
        """Detected within the detecting signal's persistence window + 2 steps."""
        return self.delay_s is not None and self.target_s is not None and self.delay_s <= self.target_s


# The catalogue evaluated: the shipped one, or with ``--signals`` overrides (as the config's
# ``analyzer.signals`` section would apply them), to measure a proposed threshold before shipping it.
SIGNALS: dict[str, SignalSpec] = dict(CATALOGUE)


def target_s(signal: str, step_s: float) -> float:
    """The signal's persistence window on this grid, plus two steps."""
    persistence = persistence_of(SIGNALS[signal], step_s)
    return (persistence.n + 2) * step_s


def on_fault(event: AnomalyEvent, fault: Fault) -> bool:
    """The event is on the fault's node (and GPU when both name one)."""
    entity = event.entity
    return entity.get("node") == fault.node and (
        fault.gpu is None or entity.get("gpu") in (None, fault.gpu))


def verdicts(events: Sequence[AnomalyEvent], faults: Sequence[Fault], step_s: float) -> list[Verdict]:
    """The first detection of each fault."""
    out = []
    for fault in faults:
        hits = [e for e in events if on_fault(e, fault) and fault.start <= e.detected_at <= fault.end + LATE]
        first = min(hits, key=lambda e: e.detected_at, default=None)
        if first is None:
            out.append(Verdict(fault, None, "", None))
        else:
            out.append(Verdict(fault, (first.detected_at - fault.start).total_seconds(), first.signal,
                               target_s(first.signal, step_s),
                               (first.detected_at - first.onset).total_seconds()))
    return out


def false_alarms(events: Sequence[AnomalyEvent], faults: Sequence[Fault]) -> list[AnomalyEvent]:
    """Events no fault explains: on an untouched node, or away from every fault on their node."""
    def explained(e: AnomalyEvent) -> bool:
        return any(e.entity.get("node") == f.node and e.onset <= f.end + SLACK
                   and (e.cleared_at or FOREVER) >= f.start - SLACK for f in faults)
    return [e for e in events if not explained(e)]


def paging(events: Sequence[AnomalyEvent]) -> list[AnomalyEvent]:
    """The events of signals that may open an incident (not the context-only evidence such as
    the end-to-end request_p99, which the analyzer attaches to an incident but never pages on)."""
    return [e for e in events if SIGNALS[e.signal].opens_incident]


def events_of(directory: Path, yesterday: Path | None) -> tuple[list[AnomalyEvent], float, datetime]:
    """Every catalogue signal's events over one history window (the daemon's detection path),
    the step and the window's last timestamp."""
    frames, step_s = signal_frames(directory, SIGNALS)
    same_time = None if yesterday is None else {DAY_S: signal_frames(yesterday, SIGNALS)[0]}
    end = max(f.values.index[-1] for f in frames.values() if len(f.values.index)).to_pydatetime()
    return detect(frames, step_s, SIGNALS, same_time=same_time), step_s, end


def faults_of(directory: Path, until: datetime) -> list[Fault]:
    """The window's faults from its ``truth.json`` (open-ended ones last ``until``)."""
    truth = json.loads((directory / "truth.json").read_text(encoding="utf-8"))
    return [Fault.from_truth(f, until) for f in truth["faults"]]


def generate(windows: Sequence[HistoryWindow], cache: Path, step_s: float, jobs: int,
             ) -> tuple[list[Path], float, float]:
    """The windows' histories; (paths, simulated hours generated now, wall seconds spent)."""
    missing = [w for w in windows if not (cache / f"{w.scenario.name}-{cache_key(w, step_s)}" /
                                          "truth.json").exists()]
    started = time.perf_counter()
    paths = prepare(windows, cache, step_s, jobs)
    return paths, sum(w.days for w in missing) * 24.0, time.perf_counter() - started


def _gen_text(hours: float, wall_s: float) -> str:
    return "cached" if hours == 0 else f"{hours:.1f} h in {wall_s:.0f} s"


def scenario_row(sc: Scenario, cache: Path, step_s: float, jobs: int,
                 ) -> tuple[str, list[Verdict], list[AnomalyEvent]]:
    """One scenario's Markdown row, its verdicts and its false alarms."""
    windows = drill_windows(sc, step_s=step_s)
    quiet = [same_time_window(w) for w in windows]
    paths, hours, gen_s = generate([*windows, *quiet], cache, step_s, jobs)
    found: list[Verdict] = []
    false: list[AnomalyEvent] = []
    total = 0
    started = time.perf_counter()
    for directory, yesterday in zip(paths[:len(windows)], paths[len(windows):], strict=True):
        events, step, end = events_of(directory, yesterday)
        faults = faults_of(directory, end)
        found += verdicts(events, faults, step)
        false += false_alarms(events, faults)
        total += len(events)
    detect_s = time.perf_counter() - started
    shown = ", ".join("missed" if v.delay_s is None else
                      f"{v.delay_s:.0f} s {'≤' if v.in_target else '>'} {v.target_s:.0f} s "
                      f"(onset +{v.confirm_s:.0f} s, {v.signal})"
                      for v in found) or "—"
    kinds = Counter(e.signal for e in false)
    fa = f"{len(false)}" + (f" ({', '.join(f'{k} ×{n}' for k, n in sorted(kinds.items()))}; "
                            f"{len(paging(false))} may page)" if false else "")
    detected = sum(v.delay_s is not None for v in found)
    row = (f"| {sc.name} | {len(found)} | {detected} | {shown} | {fa} | {total} | "
           f"{_gen_text(hours, gen_s)} | {detect_s:.0f} s |")
    return row, found, false


def week_report(sc: Scenario, cache: Path, step_s: float, days: float) -> list[str]:
    """False alarms per simulated day over the fault-free week, each placed against the nuisance."""
    window = HistoryWindow(sc, days, DRILL_END_S)
    [directory], hours, gen_s = generate([window], cache, step_s, 1)
    started = time.perf_counter()
    events, _, end = events_of(directory, None)
    detect_s = time.perf_counter() - started
    nuisance = faults_of(directory, end)
    first = datetime.fromtimestamp(DRILL_END_S - days * DAY_S, UTC)
    pages = len(paging(events))
    lines = [f"fault-free week: {days:g} simulated days ({_gen_text(hours, gen_s)}; detection "
             f"{detect_s:.0f} s), {len(events)} false alarm(s), {len(events) / days:.2f} per simulated day; "
             f"{pages} on signals that may open an incident, {pages / days:.2f} per simulated day"]
    per_day = Counter(int((e.detected_at - first).total_seconds() // DAY_S) for e in events)
    lines.append("per day: " + ", ".join(f"d{d}={per_day.get(d, 0)}" for d in range(int(days))))
    for e in events:
        near = [f.kind for f in nuisance if e.entity.get("node") == f.node
                and e.onset <= f.end + SLACK and (e.cleared_at or FOREVER) >= f.start - SLACK]
        where = ",".join(f"{k}={v}" for k, v in e.labels)
        lines.append(f"  {e.detected_at:%a %H:%M} {e.signal} {where} {e.reason}"
                     + (f" (nuisance: {', '.join(near)})" if near else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the per-scenario table, then the week."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: every scenario)")
    parser.add_argument("--step", default="15s", help="history step (default 15s, the scrape interval)")
    parser.add_argument("--jobs", type=int, default=2, help="histories generated in parallel")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--week-days", type=float, default=7.0)
    parser.add_argument("--no-week", action="store_true", help="skip the fault-free week")
    parser.add_argument("--signals", type=Path, default=None,
                        help="YAML: signal name -> fields to override (as the config's analyzer.signals)")
    args = parser.parse_args(argv)
    if args.signals is not None:
        SIGNALS.update(build_catalogue(yaml.safe_load(args.signals.read_text(encoding="utf-8")) or {}))
        print(f"signal overrides from {args.signals}")
    step_s = parse_duration(args.step, "--step").total_seconds()
    paths = sorted(SCENARIOS.glob("*.yaml"))
    names = [p.stem for p in paths if not args.only or p.stem in args.only]
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z, step {step_s:g} s, cache {args.cache}")
    print("| scenario | faults | detected | delay vs target (first signal) | false alarms | events "
          "| generated | detection |")
    print("|---|---:|---:|---|---|---:|---|---:|")
    verdict_all: list[Verdict] = []
    false_all: list[AnomalyEvent] = []
    for name in names:
        if name == WEEK:
            continue
        sc = load_scenario(SCENARIOS / f"{name}.yaml")
        row, found, false = scenario_row(sc, args.cache, step_s, args.jobs)
        verdict_all += found
        false_all += false
        print(row, flush=True)
    met = sum(v.in_target for v in verdict_all)
    seen = sum(v.delay_s is not None for v in verdict_all)
    print(f"faults detected {seen}/{len(verdict_all)}, within persistence + 2 steps "
          f"{met}/{len(verdict_all)}, false alarms {len(false_all)} ({len(paging(false_all))} on signals "
          "that may open an incident)")
    if WEEK in names and not args.no_week:
        week = load_scenario(SCENARIOS / f"{WEEK}.yaml")
        for line in week_report(week, args.cache, step_s, args.week_days):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
