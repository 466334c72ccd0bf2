"""Quiet on real traffic: a fault-free history driven by an arrival trace, replayed through the analyzer.

Generates a fault-free fleet history whose traffic is the trace (``simulator/trace.py``: scaled so
the busiest hour runs at ``--peak-utilisation`` of the fleet's capacity, tiled over the days,
thinned by the daily shape, round-robin over the nodes), replays it through detection,
correlation and the incident lifecycle (``drills/replay.py``, as ``oximeter drill`` does) and
prints what the traffic did and every incident opened. Ends with ``incidents on a fault-free
trace-driven history: N``; exits 1 when N > 0.

    .venv/bin/python bench/trace_quiet.py [--trace FILE] [--days 2] [--peak-utilisation 0.6]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analyzer.incidents.store import parse_duration
from drills.cli import DEFAULT_CACHE
from drills.history import DRILL_END_S, HistoryWindow, history_dir
from drills.replay import replay_history
from oximeter.errors import ConfigError
from simulator.scenario import Scenario, Truth, with_trace
from simulator.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_code_2023.csv"


def traffic_summary(directory: Path) -> str:
    """Requests and answers by status over the history, per node, from the gateway's counters."""
    samples = pd.read_parquet(directory / "samples.parquet")
    series = pd.read_parquet(directory / "series.parquet")
    counter = series[series["name"] == "oximeter_requests_total"]
    last = samples[samples["series_id"].isin(counter["series_id"])].groupby("series_id")["value"].max()
    lines = []
    for node, rows in counter.groupby("node"):
        codes: Counter[str] = Counter()
        for sid, labels in zip(rows["series_id"], rows["labels"], strict=True):
            codes[json.loads(labels)["code"]] += int(last.get(sid, 0))
        codes = Counter({code: n for code, n in sorted(codes.items()) if n})
        lines.append(f"  {node}: {sum(codes.values())} requests, by status {dict(codes)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate (or reuse) the history, replay it, print the verdict."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="arrival trace CSV")
    parser.add_argument("--peak-utilisation", type=float, default=0.6)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--step", default="60s")
    parser.add_argument("--interval", default="60s", help="daemon cycle interval replayed")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="history cache (shared with drills)")
    args = parser.parse_args(argv)
    step_s = parse_duration(args.step, "--step").total_seconds()
    interval_s = parse_duration(args.interval, "--interval").total_seconds()
    quiet = Scenario(name="trace_quiet", nodes=args.nodes, truth=Truth(layer="none", rule="none"))
    try:
        sc = with_trace(quiet, args.trace, args.peak_utilisation)
        load_trace(args.trace)
    except ConfigError as exc:
        print(f"trace_quiet: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    directory = history_dir(HistoryWindow(sc, args.days, DRILL_END_S), Path(args.cache), step_s)
    generated = time.perf_counter() - started
    outcome = replay_history(directory, interval_s)
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z: {Path(args.trace).name}, {args.nodes} nodes, "
          f"peak utilisation {args.peak_utilisation:g}, {args.days:g} d at {args.step}, cycles every "
          f"{args.interval} (history {generated:.0f} s, "
          f"replay {time.perf_counter() - started - generated:.0f} s)")
    print(traffic_summary(directory))
    for inc in outcome.incidents:
        rc = inc.root_cause
        print(f"  incident {inc.id}: {inc.layer}/{inc.rule} {rc.signal} {dict(rc.labels)} "
              f"from {inc.first_onset:%Y-%m-%d %H:%M}Z")
    print(f"incidents on a fault-free trace-driven history: {len(outcome.incidents)}")
    return 1 if outcome.incidents else 0


if __name__ == "__main__":
    sys.exit(main())
