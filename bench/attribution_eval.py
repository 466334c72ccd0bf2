"""Attribution accuracy: every scenario's history replayed through detection, correlation and diagnosis.

For each ``simulator/scenarios/*.yaml``: generate its history (in-process, cached in ``--workdir``
by a hash of the scenario, the window and the generator's version), derive every catalogue signal and the
rules' context from the raw series, detect over the whole history, then replay the daemon's
cycles every ``--interval`` through the incident tracker (``drills/replay.py``, shared with
``oximeter drill``). A scenario is right when it yields exactly one incident per expected root
cause (the truth and its ``also``; none for a fault-free one), each named by layer, rule and
entity. Prints a table and ends with ``attribution accuracy: N %``. By default each history is
6 h long (the first hours after install, before any seasonal baseline) and ends at the drills'
fixed anchor, so the verdict does not depend on the hour it runs.

A whole history holds the daily peaks, and a fleet sized near its capacity really queues there
with no fault at all. The simulator's record says when: its gateway's queue-wait histogram counts
every request's wait for a slot exactly, and the queue-wait SLO (``queue_wait_p99``'s static limit)
is one of its bucket bounds, so the share of requests that waited beyond it is exact. A node is
*overloaded* in a 5-min window when more than 1 % of its requests waited beyond the SLO there with
no fault on it. An incident that names ``scheduling/capacity_exhausted`` on a node while it was
overloaded is about a real condition, named right: it is not the scenario's truth, so it is
counted apart (column ``overload``), neither a miss nor a false incident. Any other extra incident,
an overload named otherwise included, still fails the scenario.

``--windows drill`` replays ``oximeter drill``'s windows instead of one whole history: the faults
with a 1 h warm-up and a 30-min tail, plus the fault-free window a day earlier that the seasonal
baselines read (the daemon's same-time windows). That gives every scenario the day-old baseline
a whole history gets only from ``--days`` ≥ 1.5, at a tenth of the simulated time; the histories
are shared with ``oximeter drill``'s cache.

    .venv/bin/python bench/attribution_eval.py [--days 0.25] [--end 2026-01-07T18:00Z] [--step 60s]
    .venv/bin/python bench/attribution_eval.py --windows drill
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from analyzer.detection.events import parse_iso
from analyzer.incidents.lifecycle import IncidentSettings
from analyzer.incidents.store import parse_duration
from analyzer.signals import query as q
from analyzer.signals.catalogue import CATALOGUE
from drills.cli import DEFAULT_CACHE
from drills.history import DRILL_END_S, HistoryWindow, history_dir
from drills.replay import prepare_drill_windows, replay_drill, replay_history
from drills.score import DrillScore, expected_truths, score, truth_matches
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


Span = tuple[float, float]


def overloaded(directory: Path, faults: list[dict[str, Any]]) -> dict[str, list[Span]]:
    """Per node, the (start, end) epoch spans of the p99's windows in which its requests, with no
    fault on the node, waited beyond the queue-wait SLO (what the SLO's p99 means: more than 1 %
    of them), from the history's exact record of every request's wait."""
    spec = CATALOGUE["queue_wait_p99"]
    assert isinstance(spec.expr, q.HistogramQuantile) and isinstance(spec.expr.buckets, q.Increase)
    share, window_s, slo = 1.0 - spec.expr.q, float(spec.expr.buckets.window_s), spec.threshold
    family = spec.expr.buckets.series.name.removesuffix("_bucket")
    series = pd.read_parquet(directory / "series.parquet", columns=["series_id", "name", "labels", "node"])
    series = series[series["name"].isin([f"{family}_bucket", f"{family}_count"])]
    le = series["labels"].map(lambda text: json.loads(text).get("le"))
    series = series[(series["name"] == f"{family}_count") | (le.astype(float) == slo)]
    if slo is None or (series["name"] == f"{family}_bucket").sum() == 0:
        raise SystemExit(f"{directory}: the queue-wait SLO {slo} s is not a bucket bound of {family}")
    samples = pd.read_parquet(directory / "samples.parquet",
                              filters=[("series_id", "in", series["series_id"].tolist())])
    samples = samples.merge(series[["series_id", "name", "node"]], on="series_id")
    samples["t"] = (samples["timestamp"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    out: dict[str, list[Span]] = {}
    for node, rows in samples.groupby("node"):
        table = rows.pivot_table(index="t", columns="name", values="value", aggfunc="sum").sort_index()
        step = float(pd.Series(table.index).diff().median())
        lag = max(1, round(window_s / step))
        count = table[f"{family}_count"].diff(lag)
        late = count - table[f"{family}_bucket"].diff(lag)
        mine = [f for f in faults if f["node"] == node]
        spans: list[Span] = []
        for t, over in ((t, late[t] > share * count[t]) for t in table.index[lag:]):
            start = t - window_s
            faulty = any(f["start_epoch_s"] < t and (f["end_epoch_s"] or math.inf) > start for f in mine)
            if not over or faulty:
                continue
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], t)
            else:
                spans.append((start, t))
        out[str(node)] = spans
    return out


def _on_overload(incident: dict[str, Any], spans: dict[str, list[Span]], end_s: float) -> bool:
    """Named ``scheduling/capacity_exhausted`` on a node while that node was overloaded."""
    if (incident["layer"], incident["rule"]) != ("scheduling", "capacity_exhausted"):
        return False
    node = str((incident["root_cause"].get("labels") or {}).get("node"))
    opened, resolved = parse_iso(incident["first_onset"]), parse_iso(incident.get("resolved_at"))
    closed = end_s if resolved is None else resolved.timestamp()
    return opened is not None and any(lo < closed and hi > opened.timestamp()
                                      for lo, hi in spans.get(node, []))


def whole_history(window: HistoryWindow, workdir: Path, step_s: float, interval_s: float,
                  settings: IncidentSettings) -> tuple[DrillScore, list[str]]:
    """One scenario's whole history (cached in ``workdir``) replayed through the daemon's cycles,
    scored, and the incidents that named a real overload (kept out of the score), described."""
    sc = window.scenario
    directory = history_dir(window, workdir, step_s)
    faults = json.loads((directory / "truth.json").read_text())["faults"]
    first = min((f["start_epoch_s"] for f in faults), default=None)
    outcome = replay_history(directory, interval_s, settings)
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    incidents = [i.to_dict() for i in outcome.incidents]
    # The truths take their incidents first: an overload is set apart only when it names none.
    named = [next((i for i in incidents if truth_matches(i, t)), None) for t in expected]
    spans = overloaded(directory, faults)
    overloads = [i for i in incidents if i not in named and _on_overload(i, spans, window.end_s)]
    start = None if first is None else datetime.fromtimestamp(first, tz=UTC)
    verdict = score(sc.name, "replay", expected, [i for i in incidents if i not in overloads], start,
                    len(outcome.changes))
    return verdict, [f"{i['root_cause']['signal']}@{(i['root_cause'].get('labels') or {}).get('node')} "
                     f"{i['first_onset'][11:16]}-{(i.get('resolved_at') or 'end')[11:16]}" for i in overloads]


def main(argv: list[str] | None = None) -> int:
    """Run every scenario and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenarios", default=str(ROOT / "simulator" / "scenarios"))
    parser.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    parser.add_argument("--days", type=float, default=0.25,
                        help="history per scenario (default 0.25: the first 6 h after install)")
    parser.add_argument("--end", default=None,
                        help="where each whole history ends, ISO-8601 UTC or 'now' (default: the "
                             "drills' anchor, Wednesday 2026-01-07 18:00Z). The traffic follows the "
                             "time of day, so a fixed end makes the verdict reproducible")
    parser.add_argument("--step", default="60s")
    parser.add_argument("--interval", default="5m", help="daemon cycle interval replayed")
    parser.add_argument("--workdir", default="/tmp/oximeter-attribution")
    parser.add_argument("--windows", choices=("whole", "drill"), default="whole",
                        help="one whole --days history per scenario, or the drill's windows")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="the drill windows' cache")
    parser.add_argument("--jobs", type=int, default=2, help="drill windows generated in parallel")
    args = parser.parse_args(argv)
    settings = IncidentSettings()
    step_s = parse_duration(args.step, "--step").total_seconds()
    interval_s = parse_duration(args.interval, "--interval").total_seconds()
    try:
        end = None if args.end in (None, "now") else parse_iso(args.end)
    except ValueError:
        parser.error(f"--end: not an ISO-8601 time: {args.end!r}")
    end_at = DRILL_END_S if args.end is None else time.time() if end is None else end.timestamp()
    end_s = math.floor(end_at / step_s) * step_s
    rows, right, overloads = [], 0, 0
    scenarios = sorted(Path(args.scenarios).glob("*.yaml"))
    scenarios = [s for s in scenarios if not args.only or s.stem in args.only]
    if args.windows == "drill":
        prepare_drill_windows(scenarios, Path(args.cache), step_s, args.jobs)
    for path in scenarios:
        started = time.perf_counter()
        overload: list[str] = []
        if args.windows == "drill":
            verdict = replay_drill(path, Path(args.cache), step_s, interval_s)
        else:
            window = HistoryWindow(load_scenario(path), args.days, end_s)
            verdict, overload = whole_history(window, Path(args.workdir), step_s, interval_s, settings)
        right += verdict.passed
        overloads += len(overload)
        rows.append((verdict.scenario, verdict.truth_text, str(len(verdict.expected)),
                     str(len(verdict.attributed)), "-" if args.windows == "drill" else str(len(overload)),
                     "yes" if verdict.passed else "NO",
                     "; ".join([verdict.got_text, *(f"overload: {o}" for o in overload)]),
                     f"{time.perf_counter() - started:.0f}s"))
    header = ("scenario", "truth", "expected", "incidents", "overload", "right", "attributed", "time")
    widths = [max(len(r[c]) for r in (header, *rows)) for c in range(len(header))]
    for row in (header, *rows):
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    accuracy = 100.0 * right / len(rows) if rows else 0.0
    history = "drill windows + the day before" if args.windows == "drill" else \
        f"{args.days:g} d history to {datetime.fromtimestamp(end_s, UTC):%Y-%m-%dT%H:%M}Z"
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {history} at {args.step}, "
          f"cycles every {args.interval}")
    if args.windows == "whole":
        print(f"incidents on a real overload (capacity_exhausted, no fault on the node), not scored: "
              f"{overloads}")
    print(f"attribution accuracy: {accuracy:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
