"""Exporter scrape cost: a full /metrics render against the backend reads alone, in one run.

For 8 and 64 GPUs, with the fake-NVML backend (every NVML call answered in-process, so the
ratio shows the exporter's own overhead at its most visible) and the simulator backend (one
HTTP fetch from an in-process fleet server speaking the real ``/fleet/gpus`` contract):

    backend  = median time of ``backend.read()``
    collect  = median time of ``collector.collect()`` (backend read + building the families)
    scrape   = median time of ``generate_latest()`` on a registry holding the collector, i.e.
               collect + prometheus_client's text rendering, what one /metrics request costs
    ratio    = scrape / backend   (the aim: a scrape cost close to the reads themselves)

Backend and scrape rounds alternate so drift on a shared machine hits both.

    .venv/bin/python bench/exporter_scrape.py [--reps 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "exporter"))  # the fake pynvml and the fleet server

from exporter_harness import FleetServer, sim_document, sim_gpu  # noqa: E402
from fake_pynvml import FakeDevice, FakeNvml  # noqa: E402
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from exporter.backends.base import GpuBackend  # noqa: E402
from exporter.backends.nvml import NvmlBackend  # noqa: E402
from exporter.backends.sim import SimBackend  # noqa: E402
from exporter.collector import GpuCollector  # noqa: E402

NODE = "bench"


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(backend: GpuBackend, reps: int, naming: str) -> tuple[float, float, float, int, int]:
    """Medians (backend read s, collect s, scrape s), exposition bytes and samples."""
    collector = GpuCollector(backend, NODE, naming=naming)
    registry = CollectorRegistry()
    registry.register(collector)
    size = len(generate_latest(registry))  # warm-up
    samples = sum(len(family.samples) for family in collector.collect())
    reads, collects, scrapes = [], [], []
    for _ in range(reps):
        reads.append(timed(backend.read))
        collects.append(timed(lambda: list(collector.collect())))
        scrapes.append(timed(lambda: generate_latest(registry)))
    return statistics.median(reads), statistics.median(collects), statistics.median(scrapes), size, samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    print("| backend | GPUs | naming | samples | backend read ms | collect ms | full scrape ms | ratio |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for gpus in (8, 64):
        nvml = NvmlBackend(nvml=FakeNvml([FakeDevice(i) for i in range(gpus)]), timeout_s=10)
        nvml.start()
        server = FleetServer(sim_document([sim_gpu(i) for i in range(gpus)]))
        sim = SimBackend(server.url, NODE, timeout_s=10)
        try:
            for name, backend in (("fake-nvml", nvml), ("sim", sim)):
                for naming in ("oximeter", "dcgm"):
                    read_s, collect_s, scrape_s, _size, samples = measure(backend, args.reps, naming)
                    print(f"| {name} | {gpus} | {naming} | {samples} | {read_s * 1e3:.2f} "
                          f"| {collect_s * 1e3:.2f} | {scrape_s * 1e3:.2f} | {scrape_s / read_s:.1f} |",
                          flush=True)
        finally:
            nvml.close()
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
