"""Analyzer detection at 1,024 GPUs from a real Prometheus with backfilled history.

The bench writes a healthy fleet's history (128 nodes × 8 GPUs, 15 s scrape grid) as OpenMetrics,
only the raw series the GPU and queue signals of ``bench/analyzer_scale.py`` read and only where a
cycle looks: the live hour (plus the 5-minute lookback the rates need, plus the steady cycles)
and the same-time window a day earlier (live hour ± 30 min). ``promtool tsdb create-blocks-from
openmetrics`` turns each window into blocks; the bench starts Prometheus on them (127.0.0.1, a free
port, no scrape targets), then runs ``SignalCycle`` over ``PrometheusSource``: one cold cycle and
``--cycles`` steady (incremental) ones. Per cycle, time is split into HTTP (Prometheus evaluating
the query and sending the answer), decode (JSON into frames, our code) and compute (baselines,
detection, persistence). No recording rules are backfilled, so every signal runs its raw PromQL
fallback (the store-without-rules path); the cold cycle includes the one empty recording-rule
query per signal that finds this out. The frame-source bench at the same size runs in the same
session for a ratio.

    .venv/bin/python bench/analyzer_prom_scale.py [--nodes 128] [--cycles 8] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.detection.baselines import BaselinePolicy
from analyzer.detection.cycle import SignalCycle
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.sources.prometheus import PrometheusSource
from analyzer.signals.spec import SignalSpec
from gateway.metrics import LATENCY_BUCKETS_S, QUEUE_WAIT_BUCKETS_S
from stack.ports import start_reserved
from stack.procs import ManagedProcess, http_ok

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from analyzer_scale import GPU_SIGNALS, GPUS_PER_NODE, NODE_SIGNALS  # noqa: E402

STEP_S = 15.0
LIVE_S = 3600.0
HALF_S = 1800.0
LOOKBACK_S = 600.0  # the 5-minute rate windows at the start of each window, with room to spare
DAY_S = 86400.0
COLD_ROWS = 40


@dataclass(frozen=True)
class Fleet:
    """The synthetic fleet's shape."""

    nodes: int
    gpus_per_node: int = GPUS_PER_NODE
    rps: float = 2.0  # requests per second per node

    @property
    def gpus(self) -> int:
        """GPUs in the fleet."""
        return self.nodes * self.gpus_per_node


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _series(out: IO[str], name: str, labels: str, values: np.ndarray, stamps: list[str]) -> int:
    head = f"{name}{labels} "
    out.write("".join(f"{head}{v:.6g} {t}\n" for v, t in zip(values.tolist(), stamps, strict=True)))
    return len(stamps)


def _daily(times: np.ndarray, level: float, amplitude: float) -> np.ndarray:
    return level + amplitude * np.sin(2 * np.pi * (times % DAY_S) / DAY_S)


def write_window(path: Path, fleet: Fleet, times: np.ndarray, seed: int) -> int:
    """One window of every raw series the signals read, as OpenMetrics; returns the sample count."""
    rng = np.random.default_rng(seed)
    stamps = [f"{t:.3f}" for t in times]
    n = len(times)
    written = 0
    gpu_families: list[tuple[str, str, Any]] = [
        ("oximeter_gpu_temperature_celsius", "gauge",
         lambda: _daily(times, 62, 8) + rng.normal(0, 0.5, n)),
        ("oximeter_gpu_sm_clock_hertz", "gauge", lambda: 1.98e9 - np.abs(rng.normal(0, 5e6, n))),
        ("oximeter_gpu_sm_clock_max_hertz", "gauge", lambda: np.full(n, 1.98e9)),
        ("oximeter_gpu_utilization_ratio", "gauge",
         lambda: np.clip(_daily(times, 0.6, 0.2) + rng.normal(0, 0.05, n), 0, 1)),
        ("oximeter_gpu_ecc_errors", "counter", lambda: np.zeros(n)),
        ("oximeter_gpu_pcie_replay", "counter", lambda: np.zeros(n)),
        ("oximeter_gpu_up", "gauge", lambda: np.ones(n)),
    ]
    with path.open("w", encoding="utf-8") as out:
        for family, kind, make in gpu_families:
            out.write(f"# TYPE {family} {kind}\n")
            sample = f"{family}_total" if kind == "counter" else family
            for node in range(fleet.nodes):
                for gpu in range(fleet.gpus_per_node):
                    base = {"job": "exporter", "instance": f"n{node}:9400", "node": f"n{node}",
                            "gpu": str(gpu), "gpu_model": "NVIDIA H100 80GB HBM3"}
                    kinds = ({"kind": "corrected"}, {"kind": "uncorrected"}) \
                        if family == "oximeter_gpu_ecc_errors" else ({},)
                    for extra in kinds:
                        written += _series(out, sample, _labels(**base, **extra), make(), stamps)
        written += _gateway(out, fleet, times, stamps, rng)
        out.write("# EOF\n")
    return written


def _gateway(out: IO[str], fleet: Fleet, times: np.ndarray, stamps: list[str],
             rng: np.random.Generator) -> int:
    """Queue and request families per node: cumulative histograms and counters that grow like traffic."""
    n = len(times)
    written = 0
    arrivals = rng.poisson(fleet.rps * STEP_S * _daily(times, 1.0, 0.3)[:, None], (n, fleet.nodes))
    served = np.cumsum(arrivals, axis=0)
    heads = [{"job": "gateway", "instance": f"n{i}:8080", "service": "chat", "model": "sim-llama-3-8b",
              "node": f"n{i}"} for i in range(fleet.nodes)]
    for family, bounds, scale in (("oximeter_queue_wait_seconds", QUEUE_WAIT_BUCKETS_S, 0.02),
                                  ("oximeter_time_to_first_token_seconds", LATENCY_BUCKETS_S, 0.3)):
        # Each step's requests spread over the buckets of a log-normal latency; cumulative in le and time.
        edges = np.array([*bounds, np.inf])
        cdf = np.array([0.5 * (1 + math.erf(math.log(e / scale) / (0.6 * math.sqrt(2)))) for e in edges])
        out.write(f"# TYPE {family} histogram\n")
        for i, head in enumerate(heads):
            for le, share in zip(edges, cdf, strict=True):
                le_text = "+Inf" if np.isinf(le) else f"{le:g}"
                written += _series(out, f"{family}_bucket", _labels(**head, le=le_text),
                                   np.floor(served[:, i] * share), stamps)
            written += _series(out, f"{family}_count", _labels(**head), served[:, i].astype(float), stamps)
            written += _series(out, f"{family}_sum", _labels(**head), served[:, i] * scale, stamps)
    gauges: list[tuple[str, Any]] = [
        ("oximeter_queue_length", lambda: np.maximum(0, np.round(rng.normal(2, 1, n)))),
        ("oximeter_queue_limit", lambda: np.full(n, 64.0)),
    ]
    for family, make in gauges:
        out.write(f"# TYPE {family} gauge\n")
        for head in heads:
            written += _series(out, family, _labels(**head), make(), stamps)
    out.write("# TYPE oximeter_requests counter\n")
    route = "/v1/chat/completions"
    for i, head in enumerate(heads):
        errors = np.floor(served[:, i] * 0.001)
        for code, values in (("200", served[:, i] - errors), ("504", errors)):
            written += _series(out, "oximeter_requests_total", _labels(**head, route=route, code=code),
                               values.astype(float), stamps)
    out.write("# TYPE oximeter_process_resident_memory_bytes gauge\n")
    for i in range(fleet.nodes):
        labels = _labels(job="exporter", instance=f"n{i}:9400", node=f"n{i}", process="vllm")
        written += _series(out, "oximeter_process_resident_memory_bytes", labels, 8e9 + rng.normal(0, 1e6, n),
                           stamps)
    out.write("# TYPE oximeter_host_memory_total_bytes gauge\n")
    for i in range(fleet.nodes):
        labels = _labels(job="exporter", instance=f"n{i}:9400", node=f"n{i}")
        written += _series(out, "oximeter_host_memory_total_bytes", labels, np.full(n, 256 * 2.0**30), stamps)
    return written


def window_times(now_s: float, cycles: int) -> list[np.ndarray]:
    """The live window and the window a day earlier (each with its lookback), on the 15 s grid."""
    ahead = (cycles + 1) * STEP_S
    live = np.arange(now_s - LIVE_S - LOOKBACK_S, now_s + ahead + 1, STEP_S)
    back = now_s - DAY_S
    day = np.arange(back - LIVE_S - HALF_S - LOOKBACK_S, back + HALF_S + ahead + 1, STEP_S)
    return [live, day]


class _TimedSession(requests.Session):
    """Counts the seconds spent in HTTP requests (Prometheus evaluating, sending, us receiving)."""

    spent_s = 0.0
    cpu_s = 0.0
    calls = 0

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return super().request(*args, **kwargs)
        finally:
            self.spent_s += time.perf_counter() - t0
            self.cpu_s += time.process_time() - c0
            self.calls += 1


class _TimedSource:
    """Counts the seconds spent inside the source (HTTP + decoding into frames)."""

    def __init__(self, inner: PrometheusSource) -> None:
        self.inner = inner
        self.spent_s = 0.0
        self.cpu_s = 0.0

    def fetch(self, spec: SignalSpec, start: datetime, end: datetime, step_s: float) -> SeriesFrame:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return self.inner.fetch(spec, start, end, step_s)
        finally:
            self.spent_s += time.perf_counter() - t0
            self.cpu_s += time.process_time() - c0

    def now(self) -> datetime:
        return self.inner.now()


def measure(url: str, now: datetime, cycles: int) -> Iterator[dict[str, float]]:
    """One cold and ``cycles`` steady cycles: wall, CPU, HTTP, decode (wall and CPU) and compute
    seconds, events. Decode CPU is the analyzer's own CPU inside the source outside HTTP: on a
    shared machine it is the number to compare, since wall time waits for the cores."""
    session = _TimedSession()
    source = PrometheusSource(url, session=session, timeout_s=120.0)
    policy = BaselinePolicy(lags_s=(DAY_S,))
    signals = [SignalCycle(CATALOGUE[n], policy=policy, live_s=LIVE_S, step_s=STEP_S, cold_rows=COLD_ROWS)
               for n in (*GPU_SIGNALS, *NODE_SIGNALS)]
    for k in range(cycles + 1):
        timed = _TimedSource(source)
        session.spent_s, session.cpu_s, session.calls = 0.0, 0.0, 0
        t0, c0 = time.perf_counter(), time.process_time()
        events = sum(len(s.run(timed, now + timedelta(seconds=k * STEP_S))) for s in signals)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        yield {"cycle": k, "wall_s": wall, "cpu_s": cpu, "http_s": session.spent_s,
               "decode_s": timed.spent_s - session.spent_s, "decode_cpu_s": timed.cpu_s - session.cpu_s,
               "compute_s": wall - timed.spent_s,
               "queries": session.calls, "events": events,
               "series": sum(s.live.values.shape[1] for s in signals)}


def backfill(workdir: Path, fleet: Fleet, now_s: float, cycles: int) -> tuple[Path, dict[str, float]]:
    """OpenMetrics for both windows, then blocks; returns the data directory and the timings."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    timings = {"samples": 0.0, "write_s": 0.0, "promtool_s": 0.0, "openmetrics_mib": 0.0}
    for i, times in enumerate(window_times(now_s, cycles)):
        path = workdir / f"window{i}.om"
        t0 = time.perf_counter()
        timings["samples"] += write_window(path, fleet, times, seed=i)
        timings["write_s"] += time.perf_counter() - t0
        timings["openmetrics_mib"] += path.stat().st_size / 2**20
        t0 = time.perf_counter()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path),
                        str(data)], check=True, capture_output=True)
        timings["promtool_s"] += time.perf_counter() - t0
        path.unlink()
    return data, timings


def frame_source_reference(gpus: int, cycles: int) -> dict[str, float]:
    """``bench/analyzer_scale.py`` at the same size, in its own process (same session, for ratios)."""
    out = subprocess.run([sys.executable, str(BENCH / "analyzer_scale.py"), "--one", str(gpus), "--cycles",
                          str(cycles)], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    """Backfill, start Prometheus, measure, print."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--no-reference", action="store_true", help="skip the frame-source run")
    args = parser.parse_args(argv)
    fleet = Fleet(args.nodes)
    # A recent, step-aligned "now" a few hours back: every sample is in the past, inside retention.
    now_s = (time.time() // STEP_S) * STEP_S - 3 * 3600.0
    now = datetime.fromtimestamp(now_s, UTC)
    with tempfile.TemporaryDirectory(prefix="oximeter-prom-scale-") as tmp:
        workdir = args.workdir or Path(tmp)
        data, timings = backfill(workdir, fleet, now_s, args.cycles)
        print(f"fleet: {fleet.nodes} nodes × {fleet.gpus_per_node} GPUs = {fleet.gpus} GPUs; signals "
              f"{len(GPU_SIGNALS)} per GPU + {len(NODE_SIGNALS)} per node; live {LIVE_S / 3600:g} h and "
              f"1 d back ±{HALF_S / 60:g} min, step {STEP_S:g} s")
        print(f"backfill: {timings['samples'] / 1e6:.1f} M samples ({timings['openmetrics_mib']:.0f} MiB "
              f"OpenMetrics) written in {timings['write_s']:.0f} s, promtool {timings['promtool_s']:.0f} s")
        config = workdir / "prometheus.yml"
        config.write_text("global: {}\n", encoding="utf-8")

        def start(port: int) -> ManagedProcess:
            return ManagedProcess("prometheus", [
                "prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
                workdir / "logs").start()
        t0 = time.perf_counter()
        prom, port = start_reserved(start, lambda port: http_ok(f"http://127.0.0.1:{port}/-/ready"),
                                    timeout_s=120)
        try:
            print(f"prometheus ready in {time.perf_counter() - t0:.1f} s")
            rows = list(measure(f"http://127.0.0.1:{port}", now, args.cycles))
        finally:
            prom.stop()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| cycle | series | queries | wall s | CPU s | HTTP s | decode s | decode CPU s | compute s "
          "| events |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    cold, steady = rows[0], rows[1:]
    med = {k: float(np.median([r[k] for r in steady])) for k in cold}
    for label, r in (("cold", cold), (f"steady (median of {len(steady)})", med)):
        print(f"| {label} | {r['series']:.0f} | {r['queries']:.0f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
              f"{r['http_s']:.2f} | {r['decode_s']:.2f} | {r['decode_cpu_s']:.2f} | {r['compute_s']:.2f} | "
              f"{r['events']:.0f} |")
    print(f"analyzer peak RSS {rss:.0f} MiB")
    if not args.no_reference:
        ref = frame_source_reference(fleet.gpus, args.cycles)
        ref_compute = ref["steady_s"] - ref["steady_fetch_s"]
        print(f"frame source, same size and session: cold {ref['cold_s']:.2f} s, steady "
              f"{ref['steady_s']:.2f} s (fetch {ref['steady_fetch_s']:.2f} s); Prometheus / frame source "
              f"steady wall {med['wall_s'] / ref['steady_s']:.1f}×, "
              f"compute {med['compute_s'] / ref_compute:.1f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
