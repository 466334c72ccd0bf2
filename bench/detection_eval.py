"""Detection quality on the simulator's scenarios (issue 5): per scenario, was each fault
detected, how late, and how many events fall outside every fault window (false alarms).

Each scenario's history is generated with ``oximeter sim history`` (or reused from --reuse DIR,
one sub-folder per scenario) and replayed through the frame source; every catalogue signal is
evaluated over the whole history. A fault counts as detected when an event on its node (and GPU,
for GPU faults) has ``detected_at`` inside [start, end + 5 min]; an event is a false alarm when
its active span overlaps no fault window (± 10 min) at all.

    .venv/bin/python bench/detection_eval.py [--scenarios NAME ...] [--days 0.5] [--reuse DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.evaluate import evaluate_signal
from analyzer.events import AnomalyEvent
from analyzer.signals import CATALOGUE
from analyzer.sources.frames import FrameSource
from oximeter.procs import oximeter_argv

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "simulator" / "scenarios"
STEP_S = 15.0
SLACK = timedelta(minutes=10)


def history(name: str, days: float, reuse: Path) -> Path:
    """The scenario's history folder, generated when missing."""
    out = reuse / name
    if not (out / "samples.parquet").exists():
        subprocess.run(oximeter_argv("sim", "history", "--scenario", str(SCENARIOS / f"{name}.yaml"),
                                     "--days", f"{days:g}", "--step", f"{STEP_S:g}s", "--out", str(out)),
                       check=True, capture_output=True)
    return out


def events_of(directory: Path) -> list[AnomalyEvent]:
    """Every catalogue signal's events over the whole history."""
    source = FrameSource.from_history(directory)
    index = source.signal_frame(CATALOGUE["gpu_temperature"]).values.index
    start, end = index[0].to_pydatetime(), index[-1].to_pydatetime()
    found: list[AnomalyEvent] = []
    for spec in CATALOGUE.values():
        frame = source.fetch(spec, start, end, STEP_S)
        if not frame.values.columns.empty:
            found += evaluate_signal(spec, frame, step_s=STEP_S)
    return found


def judge(directory: Path, events: list[AnomalyEvent]) -> dict[str, object]:
    """Detections, delays and false alarms against ``truth.json``."""
    truth = json.loads((directory / "truth.json").read_text())
    windows = []
    delays = []
    for fault in truth["faults"]:
        start = datetime.fromtimestamp(fault["start_epoch_s"], UTC)
        end = datetime.fromtimestamp(fault["end_epoch_s"], UTC) if fault["end_epoch_s"] else start
        windows.append((start, end))
        hits = [e for e in events if e.entity.get("node") == fault["node"]
                and (fault.get("gpu") is None or e.entity.get("gpu") in (None, str(fault["gpu"])))
                and start <= e.detected_at <= end + timedelta(minutes=5)]
        first = min(hits, key=lambda e: e.detected_at, default=None)
        delays.append(None if first is None else ((first.detected_at - start).total_seconds(), first.signal))
    forever = datetime.max.replace(tzinfo=UTC)
    false = [e for e in events
             if not any(e.onset <= end + SLACK and (e.cleared_at or forever) >= start - SLACK
                        for start, end in windows)]
    return {"scenario": truth["scenario"], "faults": len(windows), "delays": delays,
            "false_alarms": len(false), "false_signals": sorted({e.signal for e in false}),
            "events": len(events)}


def main() -> int:
    """Print one row per scenario."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="*", default=None, help="names (default: every scenario)")
    parser.add_argument("--days", type=float, default=0.5)
    parser.add_argument("--reuse", type=Path, default=Path("/tmp/oximeter-detection-eval"))
    args = parser.parse_args()
    names = args.scenarios or sorted(p.stem for p in SCENARIOS.glob("*.yaml"))
    print("| scenario | faults | detected | delay (first signal) | false alarms | events |")
    print("|---|---:|---:|---|---:|---:|")
    for name in names:
        directory = history(name, args.days, args.reuse)
        row = judge(directory, events_of(directory))
        delays = row["delays"]
        assert isinstance(delays, list)
        detected = sum(d is not None for d in delays)
        shown = ", ".join("missed" if d is None else f"{d[0]:.0f} s ({d[1]})" for d in delays) or "—"
        extra = f" ({', '.join(row['false_signals'])})" if row["false_alarms"] else ""  # type: ignore[arg-type]
        print(f"| {name} | {row['faults']} | {detected} | {shown} | {row['false_alarms']}{extra} | "
              f"{row['events']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
