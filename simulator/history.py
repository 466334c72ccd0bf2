"""``oximeter sim history``: a scenario's days of GPU, engine and gateway signals on a virtual clock.

The same models as the live server run on a virtual clock: the engine (``simulator/engine.py``),
the GPUs and faults (``simulator/fleet.py``), the gateway's own admission class and metric
definitions (``gateway/admission.py``, ``gateway/metrics.py``) and the exporter's own collector
(``exporter/collector.py``) over a fleet backend. Once per step every family is sampled with the
labels Prometheus would add (``job``, ``instance``, ``node``), then written as OpenMetrics for
``promtool tsdb create-blocks-from openmetrics`` and as Parquet with the ground truth.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from loguru import logger

from oximeter.errors import ConfigError
from simulator.arrivals import Arrival
from simulator.clock import VirtualClock
from simulator.fault_kinds import FAULT_KINDS
from simulator.faults import FaultError
from simulator.fleet import Fleet
from simulator.node_history import NodeHistory
from simulator.scenario import Scenario, load_scenario, parse_duration_s, with_trace
from simulator.series import SeriesStore
from simulator.trace import load_trace

# The version of what ``generate`` produces. Drill histories are cached under a key made of the
# scenario's content and this number (not of the source files, which would make every edit
# anywhere in the simulator, a comment included, regenerate every history). Bump it whenever a
# change alters the samples a scenario yields; tests/drills/test_history_version.py fails on any
# edit of the generator's code until its fingerprint is pinned to a version, saying so.
HISTORY_VERSION = 5


def build_fleet(sc: Scenario, days: float, *, path: str = "<scenario>") -> Fleet:
    """The scenario's fleet with its faults on a virtual clock whose zero is the history start."""
    e = sc.engine
    params = e.engine_params(tokens_per_iteration=e.tokens_per_iteration)
    fleet = Fleet(
        VirtualClock(),
        nodes=sc.nodes,
        gpus_per_node=sc.gpus_per_node,
        params=params,
        model_name=sc.model,
        seed=sc.seed,
        dependency_latency_s=e.dependency_latency_s,
    )
    horizon = days * 86400.0
    problems = []
    for i, f in enumerate(sc.faults):
        start = f.start if f.start >= 0 else horizon + f.start
        data: dict[str, Any] = {
            "kind": f.kind,
            "node": f.node,
            "gpu": f.gpu,
            "link": f.link,
            "start": start,
            "duration_s": f.duration,
            "strength": f.strength,
            "id": f.id or f"s{i + 1}",
        }
        try:
            fleet.add_fault({k: v for k, v in data.items() if v is not None})
        except FaultError as exc:
            problems.append(f"faults.{i}: {exc}")
    if problems:
        raise ConfigError(problems, path)
    return fleet


def generate(
    sc: Scenario, days: float, step_s: float, end_s: float, *, path: str = "<scenario>",
    recorded: Mapping[str, Sequence[Arrival]] | None = None,
) -> tuple[SeriesStore, Fleet]:
    """Simulate the whole fleet; the last sample is at ``end_s`` (epoch seconds).

    ``recorded``: per node, the exact requests to replay (seconds from the start) instead of the
    scenario's traffic — a run recorded elsewhere, seen by the same models."""
    steps = round(days * 86400.0 / step_s)
    origin = end_s - steps * step_s
    fleet = build_fleet(sc, days, path=path)
    store = SeriesStore([origin + (i + 1) * step_s for i in range(steps)])
    for name in fleet.nodes:
        given = None if recorded is None else recorded.get(name, ())
        NodeHistory(sc, fleet, name, store, step_s, origin, given).run(steps)
    return store, fleet


def write_truth(sc: Scenario, fleet: Fleet, origin_s: float, out: Path) -> None:
    """``faults.parquet`` (every fault, absolute times, layer) and ``truth.json``."""
    faults = fleet.faults.all()
    pq.write_table(
        pa.table(
            {
                "id": [f.id for f in faults],
                "kind": [f.kind for f in faults],
                "node": [f.node for f in faults],
                "gpu": pa.array([f.gpu for f in faults], pa.int32()),
                "link": pa.array([f.link for f in faults], pa.int32()),
                "start": pa.array(
                    [int((origin_s + f.start) * 1000) for f in faults], pa.timestamp("ms", tz="UTC")
                ),
                "end": pa.array(
                    [None if not math.isfinite(f.end) else int((origin_s + f.end) * 1000) for f in faults],
                    pa.timestamp("ms", tz="UTC"),
                ),
                "strength": pa.array([f.strength for f in faults], pa.float64()),
                "layer": [FAULT_KINDS[f.kind].layer for f in faults],
            }
        ),
        out / "faults.parquet",
    )
    (out / "truth.json").write_text(
        json.dumps(
            {
                "scenario": sc.name,
                "simulation": True,
                "truth": sc.truth.model_dump(),
                "also": [t.model_dump() for t in sc.also],
                "faults": [
                    {
                        **f.to_json(),
                        "start_epoch_s": origin_s + f.start,
                        "end_epoch_s": None if not math.isfinite(f.end) else origin_s + f.end,
                    }
                    for f in faults
                ],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )


def main(args: argparse.Namespace) -> int:
    """Entry point of ``oximeter sim history``."""
    try:
        sc = load_scenario(args.scenario)
        if args.trace is not None:
            sc = with_trace(sc, args.trace, args.trace_peak_utilisation)
        if getattr(args, "telemetry", None):
            sc = sc.model_copy(update={"telemetry": args.telemetry})
        if sc.trace is not None:
            load_trace(sc.trace.file)  # a bad trace is reported before hours of simulation
        step_s = parse_duration_s(args.step)
        if step_s <= 0 or args.days <= 0:
            raise ConfigError(["--step and --days must be > 0"], None)
        end_s = float(args.end) if args.end is not None else math.floor(time.time() / step_s) * step_s
        started = time.perf_counter()
        store, fleet = generate(sc, args.days, step_s, end_s, path=str(args.scenario))
    except (ConfigError, ValueError) as exc:
        print(f"oximeter sim history: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    samples = store.write_openmetrics(out / "history.om")
    store.write_parquet(out)
    write_truth(sc, fleet, store.timestamps[0] - step_s, out)
    logger.info(
        "SIMULATION history {}: {} samples, {} days at {} s steps in {:.1f} s -> {}",
        sc.name,
        samples,
        args.days,
        step_s,
        time.perf_counter() - started,
        out,
    )
    return 0


def iter_scenarios(directory: Path) -> Iterator[Path]:
    """Scenario files in ``directory``, sorted."""
    yield from sorted(directory.glob("*.yaml"))
