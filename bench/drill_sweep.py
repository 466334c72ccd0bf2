"""Generated scenario sweep: many faults nobody wrote a scenario for, replayed like the daemon.

``python bench/drill_sweep.py --n 200 --seed 1 [--jobs 2]`` generates ``--n`` scenarios in the
library's format, each with its truth: every fault kind alone, pairs of unrelated faults on
different nodes, and fault-free stretches; with a random fleet (2-8 nodes, 4-8 GPUs, part of them
with four or more same-model nodes), traffic from light to busy at the daily peak (13-50 % of
the capacity of the engine in use, see PEAK_SHARE; weekend factors included), strength from near
its detection limit to severe, onset at any hour, and durations from 10 minutes to 6 hours. Each
is replayed through the same pipeline as ``oximeter drill --replay`` (histories in the shared
per-user cache, so a re-run only replays).

Reported per fault kind and overall: attribution (layer, entity and rule all right), time to detect
(p50/p95, and p90 by harm: each fault's error-budget burn over its first 5 minutes, measured on its
own history as the analyzer reads it; severe at 14.4× or more, moderate at 6×), how much of a
lasting fault's duration its incident stayed open (not of one-off events: an Xid is over at its
onset; also by fault duration, and counted from the opening, which leaves detection time out),
chat messages per incident, and false incidents per fault-free node-day (the pages, critical,
apart); per kind, the weakest strength that was attributed right. A fault that only a busy engine
feels (a smaller KV pool, a colder prefix cache, an admission limit, more traffic) may harm no
request at light traffic: when no incident named it and either its node's requests fared as well
as at the same hours the day before or it never burnt an error budget fast enough for a ticket
(the analyzer's own measure of harm: such a finding is quiet by design, a digest line), it is
reported as harmless (not visible at its strength and traffic) and left out of attribution.
The scenarios are written under ``--out`` so a miss can be replayed alone
(``oximeter drill --replay NAME --scenarios DIR``).

Last line: ``sweep: scenarios=N attribution=A% coverage_open_p10=C% ttd_severe_p90=Ss
ttd_moderate_p90=Ms messages_median=M messages_max=X false_per_node_day=F paging_false=P``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drills.cli import DEFAULT_CACHE  # noqa: E402
from drills.harm import NO_BURN, Peak, follows, onset_burn, truth_peak  # noqa: E402
from drills.history import DAY_S, drill_windows, history_dir, same_time_window  # noqa: E402
from drills.replay import replay_windows  # noqa: E402
from drills.score import expected_truths, parse_when, truth_matches  # noqa: E402
from drills.sweep import HOUR_S, KINDS, Kind, generate  # noqa: E402
from drills.sweep_report import report  # noqa: E402
from oximeter.vocabulary import SEVERITY_RANK  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

# A fault that leaves its node's served requests (mean time to first token and mean duration at the
# gateway) within this factor of the same node at the same clock times a day earlier, fault-free,
# harmed no one: no user-facing signal moved, so no detector could see it. Such a fault is reported
# as not visible at its strength and traffic, not counted as a miss (a detector that names it
# anyway still counts as right).
HARMLESS = 1.2


def _epoch(text: str | None) -> float | None:
    moment = parse_when(text)
    return None if moment is None else moment.timestamp()


def served(directory: Path, node: str, start_s: float, end_s: float) -> tuple[float, float] | None:
    """Mean TTFT and mean request duration (seconds) of what ``node``'s gateway served between two
    epoch times of a history, from its counters; None when it served nothing there."""
    series = pd.read_parquet(directory / "series.parquet", columns=["series_id", "name", "node"])
    wanted = {f"oximeter_{f}_seconds_{p}" for f in ("time_to_first_token", "request_duration")
              for p in ("sum", "count")}
    series = series[series["name"].isin(wanted) & (series["node"] == node)]
    samples = pd.read_parquet(directory / "samples.parquet", columns=["timestamp", "series_id", "value"],
                              filters=[("series_id", "in", series["series_id"].tolist())])
    samples = samples.merge(series, on="series_id")
    at = (samples["timestamp"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    total = samples.groupby(["name", at])["value"].sum()

    def increase(name: str) -> float:
        values = total.get(name)
        if values is None or values.empty:
            return 0.0
        inside = values[(values.index >= start_s) & (values.index <= end_s)]
        return float(inside.iloc[-1] - inside.iloc[0]) if len(inside) > 1 else 0.0

    ttft_n, dur_n = increase("oximeter_time_to_first_token_seconds_count"), \
        increase("oximeter_request_duration_seconds_count")
    if ttft_n <= 0 or dur_n <= 0:
        return None
    return (increase("oximeter_time_to_first_token_seconds_sum") / ttft_n,
            increase("oximeter_request_duration_seconds_sum") / dur_n)


def harm(fault_run: tuple[float, float] | None, day_before: tuple[float, float] | None) -> float:
    """How many times worse the faulted requests fared (the larger of the TTFT and duration
    ratios); inf when there is nothing fault-free to compare with, so the fault is never excused."""
    if fault_run is None:
        return 1.0  # nothing served during the fault: no request was harmed
    if day_before is None or min(day_before) <= 0:
        return math.inf
    return max(now / then for now, then in zip(fault_run, day_before, strict=True))


def fault_harm(sc: Any, cache_dir: Path, step_s: float, node: str) -> float:
    """``harm`` of ``node``'s faults: its served requests during them against the same clock times
    a day earlier (the fault-free history the seasonal baseline reads)."""
    worst = 1.0
    for window in drill_windows(sc, step_s=step_s):
        directory = history_dir(window, cache_dir, step_s)
        yesterday = history_dir(same_time_window(window), cache_dir, step_s)
        faults = json.loads((directory / "truth.json").read_text(encoding="utf-8"))["faults"]
        for f in (f for f in faults if f["node"] == node):
            end = f.get("end_epoch_s") or f["start_epoch_s"] + HOUR_S
            ratio = harm(served(directory, node, f["start_epoch_s"], end),
                         served(yesterday, node, f["start_epoch_s"] - DAY_S, end - DAY_S))
            worst = max(worst, ratio)
    return worst


def visible(peak: Peak, served: Callable[[], float]) -> tuple[bool, str]:
    """Whether a missed fault that only a busy engine feels harmed anyone, and why not: its burn
    ``peak`` never reached a ticket's (the analyzer's measure: quiet by design), or ``served`` (its
    requests against the day before's, asked only then) stayed under HARMLESS."""
    if peak.grade == "info":
        return False, f"burn {peak.text}"
    return (True, "") if served() >= HARMLESS else (False, "served as the day before")


def coverage(kind: Kind, start: float, end: float | None, opened: float | None,
             resolved: float | None, closed: Sequence[tuple[float, float]] = ()) -> float | None:
    """The share of a lasting fault's span ``[start, end)`` its incident was open (None where that
    does not apply: no end, never opened, or a one-off event). ``closed``: the spans between a
    resolve and a re-open, when chat had been told it was over, which do not count as open.

    A one-off event (an Xid, an uncorrectable error) is over at its onset, and its incident rightly
    stays open long after (the GPU still needs isolating): the share of its nominal span covered
    would only restate the detection delay, which ``ttd`` already reports.
    """
    if kind.fixed_duration_s is not None or end is None or end <= start or opened is None:
        return None
    lo, hi = max(start, opened), min(end, math.inf if resolved is None else resolved)
    gaps = sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in closed)
    return max(0.0, hi - lo - gaps) / (end - start)


def closed_spans(told: Sequence[Any], incident_id: str) -> list[tuple[float, float]]:
    """When ``incident_id`` stood resolved before it re-opened: each resolve to the next open."""
    spans, since = [], None
    for change in sorted((c for c in told if c.incident_id == incident_id), key=lambda c: (c.at, c.seq)):
        if change.kind == "resolved":
            since = change.at.timestamp()
        elif change.kind == "opened" and since is not None:
            spans.append((since, change.at.timestamp()))
            since = None
    return spans


def stretch_burn(burns: Sequence[tuple[Any, Any]], node: str | None, step_s: float) -> Peak:
    """The fastest burn on ``node`` (every node: None) over every replayed window, whole."""
    best = NO_BURN
    for reader, _faults in burns:
        found = reader.peak(node, reader.index[0].timestamp(), reader.index[-1].timestamp() + step_s, step_s)
        if (SEVERITY_RANK[found.grade], found.rate) > (SEVERITY_RANK[best.grade], best.rate):
            best = found
    return best


def unexplained(incidents: Sequence[dict[str, Any]], burns: Sequence[tuple[Any, Any]], step_s: float,
                faulted: Sequence[str] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The incidents no fault explains, split: a fault-free node whose own peak breaches its
    objective burns its budget with no fault at all, and an incident there whose severity follows
    that burn (a ticket for a slow burn, a page only for a fast one) is right; the others are false,
    every one on a ``faulted`` node (its burn is the fault's) or on no node in a fleet with faults."""
    false: list[dict[str, Any]] = []
    breaches: list[dict[str, Any]] = []
    for i in incidents:
        node = i["root_cause"]["labels"].get("node")
        if node in faulted or (node is None and faulted):
            false.append({"severity": i["severity"], "rule": i["rule"], "node": node, "burn": "a fault's"})
            continue
        peak = stretch_burn(burns, node, step_s)
        entry = {"severity": i["severity"], "rule": i["rule"], "node": node, "burn": peak.text}
        (breaches if peak.grade != "info" and follows(str(i["severity"]), peak) else false).append(entry)
    return false, breaches


def opened_on(told: Sequence[Any], incident_id: str) -> str:
    """What chat was told when ``incident_id`` opened (its first line, shortened): the evidence it
    opened on."""
    first = next((c for c in sorted(told, key=lambda c: (c.at, c.seq))
                  if c.incident_id == incident_id and c.kind == "opened"), None)
    return "-" if first is None else first.text.splitlines()[0].removeprefix("opened: ")[:90]


def replay_one(path: Path, cache_dir: Path, step_s: float, interval_s: float,
               incremental: bool = False) -> dict[str, Any]:
    """Replay one generated scenario and measure what chat would have seen (``incremental``:
    through the daemon's own incremental detection, as ``oximeter drill --replay --incremental``)."""
    sc = load_scenario(path)
    expected = expected_truths(sc.truth.model_dump(), [a.model_dump() for a in sc.also])
    run = replay_windows(sc, cache_dir, step_s, interval_s, incremental=incremental)
    incidents, faults = run.incidents, run.faults
    per_incident: dict[str, int] = {}
    for change in run.told:
        per_incident[change.incident_id] = per_incident.get(change.incident_id, 0) + 1
    rows, unused = [], list(incidents)
    for exp in expected:
        hit = next((i for i in unused if truth_matches(i, exp)), None)
        if hit is not None:
            unused.remove(hit)
        mine = [f for f in faults if f["node"] == exp["entity"]["node"]]
        start = min((f["start_epoch_s"] for f in mine), default=None)
        ends = [f.get("end_epoch_s") for f in mine]
        end = max((e for e in ends if e is not None), default=None)
        kind = KINDS[exp["rule"]]
        row: dict[str, Any] = {"rule": exp["rule"], "right": hit is not None, "ttd_s": None, "coverage": None,
                               "messages": per_incident.get(hit["id"], 0) if hit else None, "visible": True,
                               "name": sc.name, "onset": start,
                               "burn": None if start is None else
                               onset_burn(run.burns, exp["entity"]["node"], start)}
        if hit is None and kind.needs_load:
            # Harmless by the analyzer's measure (no objective of its node burnt at a ticket's rate
            # during it: quiet by design) or by its requests (served as the day before).
            row["visible"], row["harmless_why"] = visible(
                truth_peak(run.burns, exp, interval_s),
                partial(fault_harm, sc, cache_dir, step_s, exp["entity"]["node"]))
        if hit is not None and start is not None:
            opened = _epoch(hit.get("opened_at"))
            row["ttd_s"] = None if opened is None else max(0.0, opened - start)
            row["opened_by"] = opened_on(run.told, hit["id"])
            resolved, closed = _epoch(hit.get("resolved_at")), closed_spans(run.told, hit["id"])
            row["coverage"] = coverage(kind, start, end, opened, resolved, closed)
            if row["coverage"] is not None:  # so the fault has an end and the incident opened
                assert end is not None and opened is not None
                row["duration_s"] = end - start
                # The same share counted from the opening (None if it opened after the fault's end):
                # what detection time leaves out of it.
                row["held"] = coverage(kind, opened, end, opened, resolved, closed)
        rows.append(row)
    false, breaches = unexplained(unused, run.burns, interval_s, sorted({f["node"] for f in faults}))
    # A fault-free fleet that burns its budget at its own peak: the generator's traffic breaches the
    # objective by itself (a ticket is right there, a page only for a fast burn).
    quiet = None if expected else stretch_burn(run.burns, None, interval_s)
    return {"name": sc.name, "rows": rows, "false": false, "breaches": breaches,
            "fault_free_burn": None if quiet is None or quiet.grade == "info" else quiet.text,
            "node_days": run.days * sc.nodes,
            "messages": len(run.told),
            "incidents": len(incidents), "per_incident": list(per_incident.values())}


def main(argv: list[str] | None = None) -> int:
    """Generate, replay and report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="scenarios to generate (default 40)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="scenarios replayed in parallel")
    parser.add_argument("--out", type=Path, default=Path("/tmp/oximeter-sweep"),
                        help="where the generated scenario files are written")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="history cache folder")
    parser.add_argument("--step", type=float, default=60.0, help="history step, seconds (default 60)")
    parser.add_argument("--interval", type=float, default=60.0, help="analyzer cycle replayed, seconds")
    parser.add_argument("--incremental", action="store_true",
                        help="replay through the daemon's own incremental detection (about 20 times the CPU)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = args.out / f"seed{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    paths, strengths = [], {}
    for i in range(args.n):
        doc = generate(rng, i)
        strengths[doc["name"]] = doc.pop("x_strengths")
        path = out / f"{doc['name']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        paths.append(path)
    t0 = time.monotonic()
    print(f"run at {datetime.now(UTC):%Y-%m-%d %H:%M}Z: {args.n} scenarios (seed {args.seed}) in {out}, "
          f"step {args.step:g} s, cache {args.cache}", flush=True)
    jobs = [(p, args.cache, args.step, args.interval, args.incremental) for p in paths]
    results = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # Each scenario's misses are printed as soon as it and those before it are replayed.
        for res in pool.map(replay_one, *zip(*jobs, strict=True)):
            results.append(res)
            misses = [r["rule"] + ("" if r["visible"] else f" (harmless: {r['harmless_why']})")
                      for r in res["rows"] if not r["right"]]
            if misses or res["false"] or res["breaches"] or res["fault_free_burn"]:
                falses = [f"{f['rule']} ({f['severity']})" for f in res["false"]]
                burning = f"; fault-free, burns {res['fault_free_burn']}" if res["fault_free_burn"] else ""
                print(f"  {res['name']}: missed {misses or '-'}; false {falses or '-'}{burning}", flush=True)
    print(f"replayed in {time.monotonic() - t0:.0f} s")
    for line in report(results, strengths):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
