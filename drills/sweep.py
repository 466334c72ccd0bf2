"""Generated drill scenarios: many faults nobody wrote a scenario for, each with its truth.

``generate`` writes one scenario document in the library's format: every fault kind the sweep
draws (``Sweep`` in ``simulator/fault_kinds.py``) alone, pairs of unrelated faults on different
nodes, and fault-free stretches; with a random fleet (2-8 nodes, 4-8 GPUs, part of them with four
or more same-model nodes), traffic from light to busy at the daily peak (13-50 % of the capacity
of the engine in use, see PEAK_SHARE; weekend factors included), strength from near its detection
limit to severe, onset at any hour, and durations from 10 minutes to 6 hours.
``bench/drill_sweep.py`` replays them and reports.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from simulator.arrivals import mean_lengths
from simulator.defaults import FLEET_GATEWAY
from simulator.fault_kinds import FAULT_KINDS, FaultKind, Sweep
from simulator.load_shape import RequestMix, daily_rate
from simulator.scenario import EngineOverrides, GatewayLimits
from simulator.trace import Capacity

HOUR_S = 3600.0
# The busiest a fault-free fleet gets at its daily peak, as a share of one node's modelled capacity
# (``Capacity.rps``: every batch slot full). The simulator's engine, fed Poisson arrivals at a
# constant rate, keeps its queue wait p99 at or under 0.5 s there, with the default engine and with
# a ten times costlier prefill alike; at 0.6 its p99 reaches 1 s (default) to 2 s (the costlier
# prefill stalls the whole batch, and a long prompt stalls it for seconds), the queue-wait P0 line:
# a real capacity shortage every evening, not the fault-free stretch the truth says it is.
PEAK_SHARE = 0.5


@dataclass(frozen=True)
class Kind:
    """How to generate one fault pattern: its faults, truth and strength range."""

    name: str  # the diagnosis rule the truth names
    layer: str
    faults: Callable[[random.Random, float], list[dict[str, Any]]]  # strength -> fault dicts (no node/start)
    strength: tuple[float, float]  # (weak end, severe end); weak may be the larger number
    per_gpu: bool = False
    entity_extra: dict[str, str] = field(default_factory=dict)
    fixed_duration_s: float | None = None  # a one-off event (an Xid, an uncorrectable error)
    open_ended: bool = False  # a leak has no end
    scenario: dict[str, Any] = field(default_factory=dict)  # fleet/engine/gateway settings it needs
    # Only a busy engine feels it (a smaller KV pool, a colder prefix cache, a lower admission limit,
    # more traffic): at light traffic it may harm no request, which the report then says.
    needs_load: bool = False


def _drawn_faults(name: str, sweep: Sweep) -> Callable[[random.Random, float], list[dict[str, Any]]]:
    """The fault dicts of one draw of kind ``name`` at a strength, with its companions."""
    def faults(rng: random.Random, strength: float) -> list[dict[str, Any]]:
        value = sweep.draw(rng, strength) if sweep.draw is not None else round(strength, sweep.digits)
        return [{"kind": name, "strength": value}, *(sweep.companions(rng) if sweep.companions else [])]
    return faults


def pattern(name: str, kind: FaultKind) -> Kind:
    """The sweep's pattern for fault kind ``name`` (which has a rule and a ``Sweep``)."""
    assert kind.rule is not None and kind.sweep is not None, name
    sweep = kind.sweep
    return Kind(kind.rule, kind.layer, _drawn_faults(name, sweep), sweep.strength, per_gpu=kind.per_gpu,
                entity_extra=dict(kind.entity), fixed_duration_s=sweep.fixed_duration_s,
                open_ended=sweep.open_ended, scenario=dict(sweep.scenario), needs_load=sweep.needs_load)


def patterns() -> dict[str, Kind]:
    """Every pattern the sweep draws, by the rule its truth names."""
    return {k.rule: pattern(name, k) for name, k in FAULT_KINDS.items() if k.sweep is not None and k.rule}


KINDS: dict[str, Kind] = patterns()


def capacity_rps(doc: dict[str, Any]) -> float:
    """One node's capacity in requests per second under a scenario document's engine and gateway."""
    engine, gateway = EngineOverrides(**doc.get("engine", {})), GatewayLimits(**doc.get("gateway", {}))
    return Capacity.of(engine, gateway.max_concurrency).rps(*mean_lengths(RequestMix()))


@cache
def peak_to_mean(shaped: bool) -> float:
    """The daily traffic shape's busiest minute over its mean (1 when flat)."""
    return max(daily_rate(minute * 60.0, 86400.0, 1.0, shaped=shaped) for minute in range(1440))


def peak_utilisation(doc: dict[str, Any]) -> float:
    """The busiest hour's traffic (weekday, no fault) as a share of one node's capacity."""
    return doc["base_rps"] * peak_to_mean(doc.get("daily_shape", True)) / capacity_rps(doc)


def _duration_s(rng: random.Random, kind: Kind) -> float | None:
    if kind.open_ended:
        return None
    if kind.fixed_duration_s is not None:
        return kind.fixed_duration_s
    # Log-uniform 10 min .. 6 h: most faults are short, some last a shift.
    return round(math.exp(rng.uniform(math.log(600.0), math.log(6 * HOUR_S))) / 60.0) * 60.0


def _fault_set(rng: random.Random, kind: Kind, node: str, gpus: int, end_slack_s: float
               ) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    weak, severe = kind.strength
    u = rng.random()
    strength = weak + (severe - weak) * u
    duration = _duration_s(rng, kind)
    span = (duration or 2 * HOUR_S) + end_slack_s
    start = -(span + rng.uniform(0.0, 18 * HOUR_S))  # the onset at any hour before the drill's end
    gpu = rng.randrange(gpus) if kind.per_gpu else None
    faults = []
    for f in kind.faults(rng, strength):
        f = {**f, "node": node, "start": round(start), **({"gpu": gpu} if gpu is not None else {})}
        if duration is not None:
            f["duration"] = duration
        faults.append(f)
    entity = {"node": node, **({"gpu": str(gpu)} if gpu is not None else {}), **kind.entity_extra}
    return faults, {"layer": kind.layer, "entity": entity, "rule": kind.name}, strength


def generate(rng: random.Random, index: int, kinds: dict[str, Kind] | None = None) -> dict[str, Any]:
    """One scenario document: a single fault (70 %), two unrelated faults (15 %), or none.

    ``x_strengths`` holds each fault's drawn strength, for the report; take it out before the
    document is loaded as a scenario."""
    kinds = KINDS if kinds is None else kinds
    nodes = rng.choice([2, 2, 3, 4, 4, 5, 6, 8])
    gpus = rng.choice([4, 4, 8])
    roll = rng.random()
    picked = [] if roll < 0.15 else rng.sample(sorted(kinds), 2 if roll > 0.85 else 1)
    doc: dict[str, Any] = {"name": f"sweep_{index:04d}", "nodes": nodes, "gpus_per_node": gpus,
                           "seed": rng.randrange(10_000), "weekend_factor": round(rng.uniform(0.6, 1.0), 2),
                           "gateway": dict(FLEET_GATEWAY)}
    # Light to busy, but within capacity at the daily peak (about twice the mean) for the default
    # engine: a fleet overloaded every evening is a true capacity incident on every
    # node, not a fault-free stretch. Patterns that need load get it from their fault's strength.
    # The level is drawn for the default engine and scaled by the capacity of the engine in use, so
    # a pattern that slows every engine of its fleet (a costlier prefill) does not overload it.
    level = math.exp(rng.uniform(math.log(0.3), math.log(1.4)))
    for name in picked:  # a pattern that needs its fleet settings keeps them
        for key, value in kinds[name].scenario.items():
            doc[key] = value
    doc["base_rps"] = round(level * capacity_rps(doc) / capacity_rps({"gateway": FLEET_GATEWAY}), 2)
    # The model's capacity is the saturated batch's throughput; past about half of it the queue's
    # tail already breaks its P0 line at the peak (see PEAK_SHARE), so busier draws stay at that.
    ceiling = PEAK_SHARE * capacity_rps(doc) / peak_to_mean(doc.get("daily_shape", True))
    doc["base_rps"] = min(doc["base_rps"], math.floor(ceiling * 100) / 100)
    targets = rng.sample([f"n{i}" for i in range(1, nodes + 1)], len(picked))
    faults, truths, strengths = [], [], []
    for name, node in zip(picked, targets, strict=True):
        f, truth, strength = _fault_set(rng, kinds[name], node, gpus, end_slack_s=HOUR_S)
        faults += f
        truths.append(truth)
        strengths.append(strength)
    doc["description"] = ("Generated: " + (", ".join(f"{t['rule']} on {t['entity']['node']}" for t in truths)
                                           or "fault-free"))
    doc["faults"] = faults
    doc["truth"] = truths[0] if truths else {"layer": "none", "entity": {}, "rule": "none"}
    if len(truths) > 1:
        doc["also"] = truths[1:]
    doc["x_strengths"] = strengths  # read back by the report, ignored by the scenario loader
    return doc
