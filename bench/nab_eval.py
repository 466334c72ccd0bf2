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

    .venv/bin/python bench/nab_eval.py [--data ../shared/nab-train] [--scorer PATH] [--files]
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.catalogue import KIND_DEFAULTS
from analyzer.detect_cli import detect_file

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


def main(argv: list[str] | None = None) -> int:
    """Score ``oximeter detect`` and the baselines, print the tables and the scorer's line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with data/ and labels/")
    parser.add_argument("--scorer", type=Path, default=None,
                        help="nab_score.py (default: ../tools/nab_score.py beside the data)")
    parser.add_argument("--files", action="store_true", help="print one row per file too")
    args = parser.parse_args(argv)
    if not (args.data / "labels" / "combined_windows.json").is_file():
        print(f"nab_eval: {args.data} has no labels/combined_windows.json", file=sys.stderr)
        return 2
    scorer = load_scorer(args.scorer or args.data.parent / "tools" / "nab_score.py")

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
