"""Analyzer detection at fleet scale, from the frame source.

For 1,024 / 4,096 / 8,192 GPUs (8 per node) on a 15 s grid: six GPU signals per GPU and six
service signals per node, a 1 h live window and ±30 min same-time windows 1 d and 7 d back.
Cold cycle = first fetch of every window + detection; steady cycle = the incremental fetch of one
new step + detection over the whole live window. Each size runs in its own process so that peak
RSS is that size's. The same-run reference is one copy of the live frames (memory bandwidth), so
``steady / copy`` compares across machines.

    .venv/bin/python bench/analyzer_scale.py [--gpus 1024 4096 8192] [--cycles 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.catalogue import CATALOGUE
from analyzer.cycle import SignalCycle
from analyzer.frame import SeriesFrame
from analyzer.signals import SignalSpec
from analyzer.sources.frames import FrameSource

GPU_SIGNALS = ("gpu_temperature", "gpu_sm_clock_ratio", "gpu_utilization_p95", "ecc_corrected_increase",
               "pcie_replay_increase", "gpu_series_vanished")
NODE_SIGNALS = ("queue_wait_p99", "queue_length", "queue_limit_ratio", "ttft_p99", "error_504_ratio",
                "process_rss_trend")
GPUS_PER_NODE = 8
STEP_S = 15.0
LIVE_S = 3600.0
HALF_S = 1800.0
NOW = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
COLD_ROWS = 40  # a cold start forms baselines for the newest 10 minutes (the longest persistence)

# name -> (level, daily amplitude, noise): healthy fleet-like values, float32.
SHAPES = {
    "gpu_temperature": (62.0, 8.0, 0.5), "gpu_sm_clock_ratio": (0.98, 0.0, 0.005),
    "gpu_utilization_p95": (0.6, 0.2, 0.02), "ecc_corrected_increase": (0.0, 0.0, 0.0),
    "pcie_replay_increase": (0.0, 0.0, 0.0), "gpu_series_vanished": (1.0, 0.0, 0.0),
    "queue_wait_p99": (0.05, 0.02, 0.003), "queue_length": (2.0, 1.0, 0.3),
    "queue_limit_ratio": (0.05, 0.02, 0.005), "ttft_p99": (0.3, 0.1, 0.01),
    "error_504_ratio": (0.001, 0.0, 0.0002), "process_rss_trend": (0.03, 0.0, 4e-6),
}


def windows_index(cycles: int) -> pd.DatetimeIndex:
    """The recorded timestamps: the live hour (plus the steady cycles) and both same-time windows."""
    ahead = timedelta(seconds=STEP_S * (cycles + 1))
    parts = [pd.date_range(NOW - timedelta(seconds=LIVE_S), NOW + ahead, freq=f"{STEP_S:g}s")]
    for lag in (timedelta(days=1), timedelta(days=7)):
        parts.append(pd.date_range(NOW - lag - timedelta(seconds=LIVE_S + HALF_S),
                                   NOW - lag + timedelta(seconds=HALF_S) + ahead, freq=f"{STEP_S:g}s"))
    return pd.DatetimeIndex(np.unique(np.concatenate([p.as_unit("ns").asi8 for p in parts]))).tz_localize(UTC)


def synth(name: str, keys: list[str], index: pd.DatetimeIndex, rng: np.random.Generator) -> pd.DataFrame:
    """A daily shape plus noise for every series at once."""
    level, amplitude, noise = SHAPES[name]
    day = (index.as_unit("s").asi8 % 86400) / 86400.0
    shape = (level + amplitude * np.sin(2 * np.pi * day)).astype(np.float32)[:, None]
    data = shape + rng.normal(0.0, noise, (len(index), len(keys))).astype(np.float32) if noise else \
        np.broadcast_to(shape, (len(index), len(keys))).copy()
    return pd.DataFrame(data, index=index, columns=keys)


def build_source(gpus: int, cycles: int) -> FrameSource:
    """Signal frames for the whole fleet, only where the analyzer will look."""
    rng = np.random.default_rng(0)
    index = windows_index(cycles)
    nodes = gpus // GPUS_PER_NODE
    gpu_labels = [{"node": f"n{n}", "gpu": str(g), "gpu_model": "H100"}
                  for n in range(nodes) for g in range(GPUS_PER_NODE)]
    node_labels = [{"node": f"n{n}", "service": "chat"} for n in range(nodes)]
    frames = {}
    for names, labels in ((GPU_SIGNALS, gpu_labels), (NODE_SIGNALS, node_labels)):
        keys = [",".join(f"{k}={v}" for k, v in sorted(lab.items())) for lab in labels]
        for name in names:
            frames[name] = SeriesFrame(synth(name, keys, index, rng), dict(zip(keys, labels, strict=True)))
    return FrameSource(frames)


class Analyzer:
    """One detection cycle over every signal (a SignalCycle each), timing the fetches apart."""

    def __init__(self, source: FrameSource) -> None:
        self.source = source
        self.cycles = [SignalCycle(CATALOGUE[n], live_s=LIVE_S, step_s=STEP_S, cold_rows=COLD_ROWS)
                       for n in (*GPU_SIGNALS, *NODE_SIGNALS)]
        self.fetch_s = 0.0

    def cycle(self, now: datetime) -> tuple[int, float]:
        """Events found and seconds spent fetching (the rest is detection)."""
        timed = _TimedSource(self.source)
        events = sum(len(c.run(timed, now)) for c in self.cycles)
        return events, timed.spent_s

    @property
    def live_frames(self) -> list[pd.DataFrame]:
        """The live windows held now."""
        return [c.live.values for c in self.cycles]


class _TimedSource:
    """Counts the time spent inside the source."""

    def __init__(self, inner: FrameSource) -> None:
        self.inner = inner
        self.spent_s = 0.0

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        t0 = time.perf_counter()
        try:
            return self.inner.fetch(spec, start, end, step_s)
        finally:
            self.spent_s += time.perf_counter() - t0

    def now(self) -> datetime:
        return self.inner.now()


def run_one(gpus: int, cycles: int) -> dict[str, float]:
    """Measure one fleet size in this process."""
    source = build_source(gpus, cycles)
    analyzer = Analyzer(source)
    t0, c0 = time.perf_counter(), time.process_time()
    cold_events, cold_fetch = analyzer.cycle(NOW)
    cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
    steady, steady_cpu, fetches, events = [], [], [], []
    for k in range(1, cycles + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        found, fetched = analyzer.cycle(NOW + timedelta(seconds=k * STEP_S))
        steady.append(time.perf_counter() - t0)
        steady_cpu.append(time.process_time() - c0)
        fetches.append(fetched)
        events.append(found)
    live = analyzer.live_frames
    t0 = time.perf_counter()
    for frame in live:
        frame.to_numpy(copy=True)
    copy_s = time.perf_counter() - t0
    series = sum(f.shape[1] for f in live)
    return {
        "gpus": gpus, "series": series, "cold_s": cold, "cold_cpu_s": cold_cpu, "cold_fetch_s": cold_fetch,
        "steady_s": float(np.median(steady)), "steady_cpu_s": float(np.median(steady_cpu)),
        "steady_fetch_s": float(np.median(fetches)),
        "copy_s": copy_s, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "events": max([*events, cold_events]),
    }


def main() -> int:
    """Run every size in its own process and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.cycles)))
        return 0
    print(f"signals: {len(GPU_SIGNALS)} per GPU + {len(NODE_SIGNALS)} per node ({GPUS_PER_NODE} GPUs/node), "
          f"step {STEP_S:g} s, live {LIVE_S / 3600:g} h, same-time ±{HALF_S / 60:g} min at 1 d and 7 d")
    print("| GPUs | series | cold cycle s (CPU s) | steady cycle s (CPU s) | of which fetch s "
          "| steady / copy | peak RSS MiB | events |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in args.gpus:
        out = subprocess.run([sys.executable, __file__, "--one", str(gpus), "--cycles", str(args.cycles)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"| {r['gpus']} | {r['series']} | {r['cold_s']:.2f} ({r['cold_cpu_s']:.2f}) | "
              f"{r['steady_s']:.2f} ({r['steady_cpu_s']:.2f}) | "
              f"{r['steady_fetch_s']:.2f} | {r['steady_s'] / r['copy_s']:.0f} | {r['peak_rss_mib']:.0f} | "
              f"{r['events']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
