"""Attribution accuracy: every scenario's history replayed through detection, correlation and diagnosis.

For each ``simulator/scenarios/*.yaml``: generate its history (in-process, cached in ``--workdir``
by a hash of the scenario, the window and the generator's version), derive every catalogue signal and the
rules' context from the raw series, detect over the whole history, then replay the daemon's
cycles every ``--interval`` through the incident tracker (``drills/replay.py``, shared with
``oximeter drill``). A scenario is right when it yields exactly one incident per expected root
cause (the truth and its ``also``; none for a fault-free one), each named by layer, rule and
entity. Prints a table and ends with ``attribution accuracy: N %``.

``--windows drill`` replays ``oximeter drill``'s windows instead of one whole history: the faults
with a 1 h warm-up and a 30-min tail, plus the fault-free window a day earlier that the seasonal
baselines read (the daemon's same-time windows). That gives every scenario the day-old baseline
a whole history gets only from ``--days`` ≥ 1.5, at a tenth of the simulated time; the histories
are shared with ``oximeter drill``'s cache.

    .venv/bin/python bench/attribution_eval.py [--days 1] [--end 2026-01-07T18:00Z] [--step 60s]
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

from analyzer.events import parse_iso
from analyzer.incident_store import parse_duration
from analyzer.incidents import IncidentSettings
from drills.cli import DEFAULT_CACHE
from drills.history import HistoryWindow, history_dir
from drills.replay import prepare_drill_windows, replay_drill, replay_history
from drills.score import DrillScore, expected_truths, score
from simulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def whole_history(window: HistoryWindow, workdir: Path, step_s: float, interval_s: float,
                  settings: IncidentSettings) -> DrillScore:
    """One scenario's whole history (cached in ``workdir``) replayed through the daemon's cycles, scored."""
    sc = window.scenario
    directory = history_dir(window, workdir, step_s)
    faults = json.loads((directory / "truth.json").read_text())["faults"]
    first = min((f["start_epoch_s"] for f in faults), default=None)
    outcome = replay_history(directory, interval_s, settings)
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    start = None if first is None else datetime.fromtimestamp(first, tz=UTC)
    return score(sc.name, "replay", expected, [i.to_dict() for i in outcome.incidents], start,
                 len(outcome.changes))


def main(argv: list[str] | None = None) -> int:
    """Run every scenario and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenarios", default=str(ROOT / "simulator" / "scenarios"))
    parser.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--end", default=None,
                        help="where each whole history ends, ISO-8601 UTC (default: now). The traffic "
                             "follows the time of day, so a fixed end makes the verdict reproducible")
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
        end = parse_iso(args.end) if args.end else None
    except ValueError:
        parser.error(f"--end: not an ISO-8601 time: {args.end!r}")
    end_s = math.floor((end.timestamp() if end else time.time()) / step_s) * step_s
    rows, right = [], 0
    scenarios = sorted(Path(args.scenarios).glob("*.yaml"))
    scenarios = [s for s in scenarios if not args.only or s.stem in args.only]
    if args.windows == "drill":
        prepare_drill_windows(scenarios, Path(args.cache), step_s, args.jobs)
    for path in scenarios:
        started = time.perf_counter()
        if args.windows == "drill":
            verdict = replay_drill(path, Path(args.cache), step_s, interval_s)
        else:
            window = HistoryWindow(load_scenario(path), args.days, end_s)
            verdict = whole_history(window, Path(args.workdir), step_s, interval_s, settings)
        right += verdict.passed
        rows.append((verdict.scenario, verdict.truth_text, str(len(verdict.expected)),
                     str(len(verdict.attributed)), "yes" if verdict.passed else "NO", verdict.got_text,
                     f"{time.perf_counter() - started:.0f}s"))
    header = ("scenario", "truth", "expected", "incidents", "right", "attributed", "time")
    widths = [max(len(r[c]) for r in (header, *rows)) for c in range(len(header))]
    for row in (header, *rows):
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    accuracy = 100.0 * right / len(rows) if rows else 0.0
    history = "drill windows + the day before" if args.windows == "drill" else f"{args.days:g} d history"
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {history} at {args.step}, "
          f"cycles every {args.interval}")
    print(f"attribution accuracy: {accuracy:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
