"""``oximeter detect``: find persistent anomalies in a CSV or Parquet series, offline.

For data exported from anyone's monitoring: no Prometheus, no config needed. ``--format jsonl``
prints one event per line and nothing else on stdout; problems go to stderr with exit code 2.
The table ends with the series that were learning (less than a day of history, so judged against
their recent window alone) and until when; with ``jsonl`` those lines go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.detection.baselines import BaselinePolicy, first_valid
from analyzer.detection.evaluate import evaluate_signal
from analyzer.detection.events import AnomalyEvent, iso_utc
from analyzer.signals.catalogue import KIND_DEFAULTS
from analyzer.signals.frame import FrameError, SeriesFrame
from analyzer.signals.tables import InputError, load_regular, parse_step

KIND_CHOICES = ("auto", *KIND_DEFAULTS)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``detect``'s arguments."""
    parser.add_argument("--input", required=True, metavar="FILE",
                        help="CSV or Parquet: timestamp,value; or wide (one column per series); "
                             "or long (timestamp, value, label columns)")
    parser.add_argument("--signal-kind", default="auto", choices=KIND_CHOICES,
                        help="what the series is (picks detector defaults); auto: counter if it only "
                             "grows (with resets), else a gauge judged against its own robust baseline")
    parser.add_argument("--signal", default=None, help="signal name in the events (default: the file name)")
    parser.add_argument("--step", default="auto", help="grid step: auto, or 15s … 1h")
    parser.add_argument("--format", default="table", choices=("table", "jsonl"), dest="output_format",
                        help="jsonl: one JSON event per line, nothing else on stdout")
    parser.set_defaults(func=detect_command)


def infer_kind(values: pd.DataFrame) -> str:
    """``counter_growth`` when every series only grows apart from resets, else ``gauge``."""
    data = values.to_numpy(dtype=np.float64)
    diffs = np.diff(data, axis=0)
    seen = ~np.isnan(diffs)
    if not seen.any():
        return "gauge"
    falling = np.count_nonzero(diffs[seen] < 0)
    rising = np.count_nonzero(diffs[seen] > 0)
    # Counters fall only on resets: rarely, and all the way to near zero.
    resets_ok = bool(np.all(data[1:][np.nan_to_num(diffs, nan=0.0) < 0] <= 0.5 * np.nanmax(data)))
    if rising > 0 and falling <= 0.01 * seen.sum() and resets_ok and np.nanmin(data) >= 0:
        return "counter_growth"
    return "gauge"


@dataclass(frozen=True)
class Learning:
    """Series judged against their recent window alone from ``since`` (their first sample) until
    ``until`` (a day of history later, when a same-time baseline starts to count); ``still``: the
    file ends before then."""

    series: tuple[str, ...]
    since: datetime
    until: datetime
    still: bool


def learning(frame: SeriesFrame, policy: BaselinePolicy) -> list[Learning]:
    """Each stretch in which series of ``frame`` had less history than ``policy`` needs, series
    with the same first sample together."""
    index = pd.DatetimeIndex(frame.values.index)
    if not len(index):
        return []
    end = index[-1].tz_convert(None) if index.tz is not None else index[-1]
    groups: dict[pd.Timestamp, list[str]] = {}
    for column, first in first_valid(frame.values).items():
        if not pd.isna(first):
            groups.setdefault(pd.Timestamp(first), []).append(str(column))
    out = []
    for first, columns in sorted(groups.items()):
        until = first + pd.Timedelta(seconds=policy.min_history_s)
        out.append(Learning(tuple(sorted(columns)), first.tz_localize("UTC").to_pydatetime(),
                            until.tz_localize("UTC").to_pydatetime(), until > end))
    return out


def detect_series(path: str | Path, *, kind: str = "auto", step: str = "auto",
                  signal: str | None = None) -> tuple[list[AnomalyEvent], list[Learning]]:
    """The events of a file and its series' learning stretches (raises InputError on a malformed one)."""
    try:
        step_s = parse_step(step)
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
    frame, step_s = load_regular(path, step_s)
    chosen = infer_kind(frame.values) if kind == "auto" else kind
    spec = KIND_DEFAULTS[chosen].model_copy(update={"name": signal or Path(path).stem})
    # A file is all the history there is (its first day is judged against the recent window). The
    # detectors' own scale floors (2 % of the level) replace the policy's margin for unknown series.
    policy = BaselinePolicy(margin_rel=0.0)
    try:
        events = evaluate_signal(spec, frame, policy=policy, cumulative=chosen == "counter_growth",
                                 step_s=step_s)
    except FrameError as exc:
        raise InputError(path, str(exc)) from None
    return events, learning(frame, policy)


def detect_file(path: str | Path, *, kind: str = "auto", step: str = "auto",
                signal: str | None = None) -> list[AnomalyEvent]:
    """The events of a file (raises InputError on a malformed one)."""
    return detect_series(path, kind=kind, step=step, signal=signal)[0]


def learning_lines(stretches: Sequence[Learning]) -> list[str]:
    """One line per learning stretch: which series, since when, until when."""
    lines = []
    for stretch in stretches:
        named = ", ".join(stretch.series[:5]) + (f" and {len(stretch.series) - 5} more"
                                                  if len(stretch.series) > 5 else "")
        state = "still learning at the file's end" if stretch.still else "learnt"
        lines.append(f"{state}: {named}: judged against the recent window alone from "
                     f"{iso_utc(stretch.since)} until {iso_utc(stretch.until)} (a day of history; events "
                     "meanwhile are provisional)")
    return lines


def _table(events: Sequence[AnomalyEvent]) -> str:
    if not events:
        return "no anomalies"
    header = ("signal", "series", "onset", "detected_at", "cleared_at", "score", "reason")
    rows = [header] + [
        (e.signal, ",".join(f"{k}={v}" for k, v in e.labels), iso_utc(e.onset) or "",
         iso_utc(e.detected_at) or "", iso_utc(e.cleared_at) or "active", f"{e.score:.3g}", e.reason)
        for e in events
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
                     for r in rows)


def detect_command(args: argparse.Namespace) -> int:
    """Print the file's anomaly events; exit 2 with the file and problem on bad input."""
    try:
        events, stretches = detect_series(args.input, kind=args.signal_kind, step=args.step,
                                          signal=args.signal)
    except InputError as exc:
        print(f"oximeter detect: {exc}", file=sys.stderr)
        return 2
    if args.output_format == "jsonl":
        for event in events:
            print(event.to_json())
        for line in learning_lines(stretches):
            print(f"oximeter detect: {line}", file=sys.stderr)
    else:
        print("\n".join([_table(events), *learning_lines(stretches)]))
    return 0
