"""``oximeter detect`` on labelled real series: the Numenta Anomaly Benchmark's files and scorer.

Every ``*.csv`` under ``DIR/data`` that ``DIR/labels/combined_windows.json`` labels goes through
``oximeter detect``'s own code path with its defaults (``detect_file``, in-process: the command's
start-up is not what is measured), and each event's ``detected_at`` is scored by the benchmark's
scorer (``nab_score.py`` beside the data, imported, not copied): early in a labelled window earns
most, a detection outside every window costs. Measured in the same run, on the same files and
the same scorer: the previous default detector (robust deviation from a trailing baseline, the
daemon's generic gauge detector) and the scorer's trailing z-score sanity detector; their scores
are printed beside ours with the difference, per category and in total. Ends with the scorer's
own line ``NAB standard=… reward_low_FP_rate=… reward_low_FN_rate=…`` for ``oximeter detect``.

``--folds`` checks instead that the defaults hold on data they were not chosen on: leave one
category out, choose the flagging parameters on the others, score the one left out (below).

    .venv/bin/python bench/nab_eval.py [--data ../shared/nab-train] [--scorer PATH] [--files] [--folds]
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.detection.detectors.neighbours import NeighbourSurprise
from analyzer.service.detect_cli import detect_file
from analyzer.signals.catalogue import KIND_DEFAULTS
from analyzer.signals.tables import load_regular

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "nab-train"

Detector = Callable[[Path, list[float], list[float]], list[float]]


def load_scorer(path: Path) -> ModuleType:
    """The benchmark's scorer as a module (its sweep and threshold scoring are used as they are)."""
    spec = importlib.util.spec_from_file_location("nab_score", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SystemExit(f"nab_eval: no scorer at {path} (pass --scorer)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oximeter_default(path: Path, ts: list[float], vs: list[float]) -> list[float]:
    """``oximeter detect --input PATH`` with its defaults: each event's detection time."""
    return [e.detected_at.timestamp() for e in detect_file(path)]


def previous_default(path: Path, ts: list[float], vs: list[float]) -> list[float]:
    """The robust-deviation gauge detector that ``oximeter detect`` used before (the daemon's
    generic gauge detector, with that default's 5-min persistence)."""
    kind = KIND_DEFAULTS["gauge"].model_copy(update={"generic": "robust_deviation", "for_s": 300.0,
                                                     "min_samples": 3})
    saved = KIND_DEFAULTS["gauge"]
    KIND_DEFAULTS["gauge"] = kind
    try:
        return [e.detected_at.timestamp() for e in detect_file(path)]
    finally:
        KIND_DEFAULTS["gauge"] = saved


def score_all(scorer: ModuleType, data: Path, detect: Detector) -> tuple[dict[str, float], list[dict], float]:
    """The three profiles' normalised scores, per-file rows and detector seconds (the scorer's
    own arithmetic: raw sums, null detector, perfect detector)."""
    windows_all = json.loads((data / "labels" / "combined_windows.json").read_text())
    raw = dict.fromkeys(scorer.PROFILES, 0.0)
    null = dict.fromkeys(scorer.PROFILES, 0.0)
    windows, rows, seconds = 0, [], 0.0
    for rel in sorted(windows_all):
        ts, vs = scorer.load_csv(data / "data" / rel)
        wins = [(scorer.parse_ts(s), scorer.parse_ts(e)) for s, e in windows_all[rel]]
        windows += len(wins)
        started = time.perf_counter()
        detections = detect(data / "data" / rel, ts, vs)
        seconds += time.perf_counter() - started
        scores = [0.0] * len(ts)
        for d in detections:  # as the scorer does: on the first row at or after the detection
            j = bisect.bisect_left(ts, d - 1e-6)
            if j < len(ts):
                scores[j] = 1.0
        row: dict = {"file": rel, "windows": len(wins), "detections": len(detections)}
        for profile, (tpw, fnw, fpw) in scorer.PROFILES.items():
            points = scorer.sweep(ts, scores, wins, rel, tpw, fpw)
            got, tp, fp = scorer.score_at_threshold(points, fnw)
            base, _, _ = scorer.score_at_threshold(points, fnw, threshold=2.0)
            raw[profile] += got
            null[profile] += base
            row[profile] = got
            if profile == "standard":
                row["tp"], row["fp"] = tp, fp
        rows.append(row)
    final = {p: 100 * (raw[p] - null[p]) / (windows * tpw - null[p])
             for p, (tpw, _, _) in scorer.PROFILES.items()}
    return final, rows, seconds


def by_category(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Raw standard-profile points, hits and false positives summed per category folder."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        empty = {"files": 0, "windows": 0, "tp": 0, "fp": 0, "raw": 0.0}
        cat = out.setdefault(row["file"].split("/")[0], empty)
        cat["files"] += 1
        cat["windows"] += row["windows"]
        cat["tp"] += row["tp"]
        cat["fp"] += row["fp"]
        cat["raw"] += row["standard"]
    return out

# The flagging stage's parameters searched on each fold. The shape comparison (window, neighbours,
# reference: the costly part) is computed once per file with its defaults; what is chosen here is
# how its surprises become alarms: the record's memory, the long-run bar, the range check, the quiet.
# The long-run bar starts at z 4: below it plain Gaussian noise raises an alarm every ~700 samples,
# which these files (about 4,000 rows, the first 15 % unscored) barely charge for but a series of
# months does.
GRID: dict[str, tuple[object, ...]] = {
    "memory": (600, 2000),
    "quiet": (100, 200),
    "min_z": (4.0, 4.5, 5.0),
    "likelihood_short": (3, 10),
    "likelihood_long": (2000, 8640),
    "range_tolerance": (None, 0.05, 0.1),
    "range_warmup": (200, 600),
}


@dataclass
class Labelled:
    """One labelled file, ready to be flagged many times: its grid times and values, the shape
    stage's surprises, and per profile the scorer's weight and window of every original row."""

    category: str
    grid_s: np.ndarray
    values: np.ndarray
    surprise: np.ndarray
    rows_s: np.ndarray
    weights: dict[str, tuple[np.ndarray, np.ndarray, int, float]]


def prepare(scorer: ModuleType, data: Path) -> list[Labelled]:
    """Every labelled file through ``oximeter detect``'s loading and the default shape stage."""
    windows_all = json.loads((data / "labels" / "combined_windows.json").read_text())
    shapes = NeighbourSurprise()
    out = []
    for rel in sorted(windows_all):
        ts, _ = scorer.load_csv(data / "data" / rel)
        wins = [(scorer.parse_ts(s), scorer.parse_ts(e)) for s, e in windows_all[rel]]
        weights = {}
        for profile, (tpw, fnw, fpw) in scorer.PROFILES.items():
            points = scorer.sweep(ts, [0.0] * len(ts), wins, rel, tpw, fpw)
            names = sorted({n for _, _, n in points if n not in ("probationary", None)})
            # -2: probation (never scored), -1: outside every window, else the window's number.
            where = np.array([-2 if n == "probationary" else -1 if n is None else names.index(n)
                              for _, _, n in points])
            weights[profile] = (np.array([w for _, w, _ in points]), where, len(names), fnw)
        frame, _ = load_regular(data / "data" / rel)
        values = frame.values.to_numpy(dtype=np.float64)[:, 0]
        out.append(Labelled(rel.split("/")[0], frame.values.index.asi8 / 1e9, values,
                            shapes.surprise(values)[0], np.array(ts), weights))
    return out


def file_points(series: Labelled, flags: np.ndarray) -> tuple[dict[str, tuple[float, float]], int]:
    """Per profile (points, null detector's points), and the false alarms: the scorer's
    ``score_at_threshold`` summed over the flagged rows only (no other row adds anything)."""
    rows = np.unique(np.searchsorted(series.rows_s, series.grid_s[flags] - 1e-6))
    rows = rows[rows < len(series.rows_s)]
    out, false_alarms = {}, 0
    for profile, (weight, where, windows, fnw) in series.weights.items():
        best = np.full(windows, -fnw)
        outside = rows[where[rows] == -1]
        inside = rows[where[rows] >= 0]
        np.maximum.at(best, where[inside], weight[inside])
        out[profile] = (float(best.sum() + weight[outside].sum()), -fnw * windows)
        false_alarms = len(outside)
    return out, false_alarms


def category_scores(rows: Sequence[tuple[Labelled, dict[str, tuple[float, float]], int]]
                    ) -> dict[str, dict[str, float]]:
    """Per category: each profile normalised as the scorer does (0 = null, 100 = perfect; only
    for categories with windows), its windows and false alarms."""
    out: dict[str, dict[str, float]] = {}
    for series, points, false_alarms in rows:
        cat = out.setdefault(series.category, {"windows": 0, "false_alarms": 0, "rows": 0})
        cat["windows"] += series.weights["standard"][2]
        cat["false_alarms"] += false_alarms
        cat["rows"] += len(series.rows_s)
        for profile, (got, null) in points.items():
            cat[f"raw {profile}"] = cat.get(f"raw {profile}", 0.0) + got
            cat[f"null {profile}"] = cat.get(f"null {profile}", 0.0) + null
    for cat in out.values():
        if cat["windows"]:
            for profile in ("standard", "reward_low_FP_rate", "reward_low_FN_rate"):
                null = cat[f"null {profile}"]
                cat[profile] = 100 * (cat[f"raw {profile}"] - null) / (cat["windows"] - null)
    return out


def choose(table: dict[tuple, dict[str, dict[str, float]]], categories: Sequence[str]) -> tuple:
    """The parameters whose worst category among ``categories`` has the best low-FP score, in
    whole points (less is one detection on one file), then the best mean standard score, then the
    fewest false alarms: the worst case, not the mean, decides."""
    scored = [c for c in categories if table[next(iter(table))][c]["windows"]]

    def key(params: tuple) -> tuple[float, float, float]:
        cats = table[params]
        return (round(min(cats[c]["reward_low_FP_rate"] for c in scored)),
                sum(cats[c]["standard"] for c in scored) / len(scored),
                -sum(cats[c]["false_alarms"] for c in categories))
    return max(table, key=key)


def noise_alarms(detector: NeighbourSurprise, rows: int = 16_000, day: int = 288) -> None:
    """Print the false alarms of ``detector`` and of records alone (no long-run bar, no range
    check) on long anomaly-free series: longer than any file here, as unseen series often are."""
    rng = np.random.default_rng(0)
    daily = np.sin(2 * np.pi * np.arange(rows) / day)
    series = {
        "Gaussian": 10 + rng.normal(0, 1, rows),
        "uniform": 0.2 + 0.05 * rng.uniform(0, 1, rows),
        "lognormal×daily": np.exp(rng.normal(0, 0.6, rows)) * (5 + 3 * daily),
        "Poisson daily counts": rng.poisson(3 + 2 * daily).astype(float),
        "smoothed random": 50 + pd.Series(rng.normal(0, 1, rows)).ewm(alpha=0.05).mean().to_numpy(),
        "Pareto": 10 + rng.pareto(3, rows),
    }
    records_only = replace(detector, min_z=None, range_tolerance=None)
    counts = []
    for name, values in series.items():
        surprise = detector.surprise(values)[0]
        ones = np.ones_like(surprise)
        counts.append(f"{name} {detector.flags_of(surprise, ones, detector.breaks_of(values)).sum()}"
                      f"/{records_only.flags_of(surprise, ones).sum()}")
    print(f"false alarms on anomaly-free series of {rows} rows, shipped/records only: {', '.join(counts)}")


def run_folds(scorer: ModuleType, data: Path) -> int:
    """Leave each category out in turn: choose the parameters on the others, score it; print one
    line per fold and the closing ``NAB folds:`` line."""
    labelled = prepare(scorer, data)
    table = {}
    for params in itertools.product(*GRID.values()):
        detector = NeighbourSurprise(**dict(zip(GRID, params, strict=True)))  # type: ignore[arg-type]
        rows = []
        for series in labelled:
            flags = detector.flags_of(series.surprise, np.ones_like(series.surprise),
                                      detector.breaks_of(series.values))
            rows.append((series, *file_points(series, flags)))
        table[params] = category_scores(rows)
    categories = sorted({s.category for s in labelled})

    def named(params: tuple) -> str:
        return " ".join(f"{k}={v}" for k, v in zip(GRID, params, strict=True))
    standard, low_fp = [], []
    for held in categories:
        chosen = choose(table, [c for c in categories if c != held])
        cat = table[chosen][held]
        alarms = f"false alarms {cat['false_alarms']:.0f} in {cat['rows']:.0f} rows"
        if not cat["windows"]:
            print(f"fold {held}: no windows, {alarms} | chosen on the others: {named(chosen)}")
            continue
        standard.append(cat["standard"])
        low_fp.append(cat["reward_low_FP_rate"])
        print(f"fold {held}: standard={cat['standard']:.1f} low_FP={cat['reward_low_FP_rate']:.1f} "
              f"low_FN={cat['reward_low_FN_rate']:.1f} windows={cat['windows']:.0f} {alarms} | "
              f"chosen on the others: {named(chosen)}")
    chosen = choose(table, categories)
    shipped = NeighbourSurprise()
    defaults = tuple(getattr(shipped, k) for k in GRID)
    print(f"chosen on all categories: {named(chosen)} (the shipped defaults: "
          f"{'yes' if chosen == defaults else named(defaults)})")
    noise_alarms(shipped)
    print(f"NAB folds: worst_standard={min(standard):.1f} mean_standard={sum(standard) / len(standard):.1f} "
          f"worst_low_FP={min(low_fp):.1f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Score ``oximeter detect`` and the baselines, print the tables and the scorer's line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with data/ and labels/")
    parser.add_argument("--scorer", type=Path, default=None,
                        help="nab_score.py (default: ../tools/nab_score.py beside the data)")
    parser.add_argument("--files", action="store_true", help="print one row per file too")
    parser.add_argument("--folds", action="store_true",
                        help="leave-one-category-out: choose parameters on the other categories, "
                             "score the one left out")
    args = parser.parse_args(argv)
    if not (args.data / "labels" / "combined_windows.json").is_file():
        print(f"nab_eval: {args.data} has no labels/combined_windows.json", file=sys.stderr)
        return 2
    scorer = load_scorer(args.scorer or args.data.parent / "tools" / "nab_score.py")
    if args.folds:
        return run_folds(scorer, args.data)

    def zscore(path: Path, ts: list[float], vs: list[float]) -> list[float]:
        return list(scorer.builtin_zscore(ts, vs))

    runs = {"oximeter detect": oximeter_default, "robust deviation (previous default)": previous_default,
            "trailing z-score (scorer's builtin)": zscore}
    results = {name: score_all(scorer, args.data, fn) for name, fn in runs.items()}
    ours_final, ours_rows, _ = results["oximeter detect"]
    zs_final = results["trailing z-score (scorer's builtin)"][0]
    if args.files:
        print("| file | windows | detections | hits | false pos. | standard points |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in ours_rows:
            print(f"| {r['file']} | {r['windows']} | {r['detections']} | {r['tp']} | {r['fp']} | "
                  f"{r['standard']:+.2f} |")
        print()
    print("Standard-profile raw points per category (hits/false positives counted in rows):")
    print("| category | files | windows | detector | hits | false pos. | points |")
    print("|---|---:|---:|---|---:|---:|---:|")
    cats = {name: by_category(rows) for name, (_, rows, _) in results.items()}
    for cat in sorted(cats["oximeter detect"]):
        for name in runs:
            c = cats[name][cat]
            print(f"| {cat} | {c['files']} | {c['windows']} | {name} | {c['tp']} | {c['fp']} | "
                  f"{c['raw']:+.2f} |")
    print()
    print("| detector | standard | low FP | low FN | detector s | standard ÷ z-score |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (final, _, seconds) in results.items():
        print(f"| {name} | {final['standard']:.1f} | {final['reward_low_FP_rate']:.1f} | "
              f"{final['reward_low_FN_rate']:.1f} | {seconds:.1f} | "
              f"{final['standard'] / zs_final['standard']:.2f} |")
    print()
    print("NAB " + " ".join(f"{p}={v:.1f}" for p, v in ours_final.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
