"""The fault kinds: one entry each, carrying what it does, what it should be diagnosed as and how
the generated drill sweep draws it.

What a kind does is a tuple of ``Effect``s, each read in one place of the models (named beside it):
a new kind built from existing effects is one entry here, and the GPU, the engine, the fleet, the
gateway and the traffic pick it up. A kind may carry several effects; its strength drives each.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from oximeter.xids import PAGING_XIDS


class Effect(StrEnum):
    """One way a fault's strength acts on the simulation, and the model that applies it."""

    # The GPU (simulator/gpu.py).
    SM_CLOCK = "sm_clock"  # the SM clock share left; the card sits at its slowdown temperature
    COMPUTE = "compute"  # compute time multiplier, no throttle reason
    ECC_CORRECTED = "ecc_corrected"  # corrected ECC errors per minute
    PCIE_REPLAYS = "pcie_replays"  # PCIe replays per minute
    NVLINK_CRC = "nvlink_crc"  # CRC errors per minute on one NVLink, which carries half its traffic
    ECC_UNCORRECTABLE = "ecc_uncorrectable"  # once at start: uncorrectable errors, a row remap, Xid 48
    XID = "xid"  # once at start: the Xid code the strength names
    GPU_LOST = "gpu_lost"  # the card falls off the bus (Xid 79); its engine stalls
    GPU_MEMORY_LEAK = "gpu_memory_leak"  # MiB of framebuffer the engine leaks per minute
    # The engine and its process (simulator/fleet.py).
    DECODE = "decode"  # decode time multiplier
    STALL = "stall"  # the engine makes no progress
    KV_POOL = "kv_pool"  # share of the KV block pool left
    PREFIX_CACHE = "prefix_cache"  # the prefix cache's hit rate
    RSS_LEAK = "rss_leak"  # MiB of process RSS leaked per minute
    RESTART = "restart"  # the container restarts once at start, down for the strength in seconds
    CRASH_LOOP = "crash_loop"  # the container crashes every strength seconds while active
    ROLLOUT = "rollout"  # a new pod (no container restart), ready after the strength in seconds
    # What is scraped (simulator/node_history.py, simulator/admin.py).
    TELEMETRY_LOST = "telemetry_lost"  # the node's GPU telemetry answers 503
    SCRAPE_GAP = "scrape_gap"  # the node's targets are not scraped
    # The vector DB in front of the engine (simulator/dependency.py).
    DEPENDENCY_LATENCY = "dependency_latency"  # latency multiplier
    RESPONSE_CACHE = "response_cache"  # the response cache's hit rate
    # The gateway and the traffic (simulator/node_history.py).
    TRAFFIC = "traffic"  # request-rate multiplier
    ADMISSION = "admission"  # the gateway's max_concurrency
    INGRESS_ERRORS = "ingress_errors"  # share of requests cut with 504 at the edge


# Effects whose strength is a share (0-1): the lowest active one is the strongest.
FRACTION_EFFECTS = frozenset({Effect.SM_CLOCK, Effect.KV_POOL, Effect.PREFIX_CACHE, Effect.RESPONSE_CACHE,
                              Effect.INGRESS_ERRORS})
# Effects whose strength multiplies a time or a rate: below 1 would speed things up.
MULTIPLIER_EFFECTS = frozenset({Effect.DECODE, Effect.COMPUTE, Effect.DEPENDENCY_LATENCY})


@dataclass(frozen=True)
class Sweep:
    """How the generated drill sweep (``drills/sweep.py``) draws a kind."""

    strength: tuple[float, float]  # (weak end, severe end); the weak end may be the larger number
    digits: int = 3  # the drawn strength is rounded to this many decimals
    # The strength from the draw instead (e.g. one of the paging Xid codes).
    draw: Callable[[random.Random, float], float] | None = None
    # Faults that come with it on the same node and span (a slow vector DB misses its cache too).
    companions: Callable[[random.Random], list[dict[str, Any]]] | None = None
    fixed_duration_s: float | None = None  # a one-off event (an Xid, an uncorrectable error)
    open_ended: bool = False  # a leak has no end
    scenario: Mapping[str, Any] = field(default_factory=dict)  # fleet/engine/gateway settings it needs
    # Only a busy engine feels it (a smaller KV pool, a colder prefix cache, a lower admission limit,
    # more traffic): at light traffic it may harm no request.
    needs_load: bool = False


@dataclass(frozen=True)
class FaultKind:
    """What a kind does, its default strength, whether it targets one GPU, and its diagnosis."""

    layer: str
    default_strength: float
    strength_means: str
    per_gpu: bool = False
    # Kinds about traffic or scraping that only ``sim history`` can play (live traffic and
    # scraping belong to other processes).
    history_only: bool = False
    # Kinds that hit one NVLink of the GPU (``link``, default 0).
    per_link: bool = False
    # Kinds that act in Oximeter's gateway: a stock fleet (``telemetry: stock``) runs none, so has
    # none of them.
    gateway: bool = False
    effects: tuple[Effect, ...] = ()
    # Why the engine's container terminated, for the kinds that restart it (kube-state-metrics'
    # last terminated reason).
    terminated_reason: str = "Error"
    # The diagnosis rule that should name it (None: no rule names this kind on its own), and what
    # the entity carries besides its node (and GPU).
    rule: str | None = None
    entity: Mapping[str, str] = field(default_factory=dict)
    sweep: Sweep | None = None  # None: the generated sweep does not draw it

    @property
    def lowest_wins(self) -> bool:
        """Whether a lower strength is the larger effect (a share left, a hit rate)."""
        return any(e in FRACTION_EFFECTS for e in self.effects)


def _paging_xid(rng: random.Random, _strength: float) -> float:
    return float(rng.choice(PAGING_XIDS))


def _cache_misses(rng: random.Random) -> list[dict[str, Any]]:
    return [{"kind": "cache_hit_drop", "strength": round(rng.uniform(0.4, 0.8), 2)}]


# A slow vector DB holds the gateway's slots while requests wait on it: the sweep runs it at a flat
# rate (as the library's dependency_degraded does), since a daily peak would take the fault-free
# nodes past the queue limits too.
_FLAT = {"daily_shape": False}

E = Effect
FAULT_KINDS: dict[str, FaultKind] = {
    # Engine-facing.
    "decode_slowdown": FaultKind("engine", 3.0, "decode time multiplier (> 1 slows)", effects=(E.DECODE,)),
    # The engine hangs with its requests (a wedged scheduler or kernel): up, answering its health
    # check, holding what it runs and generating nothing.
    "engine_stall": FaultKind("engine", 1.0, "unused: the engine makes no progress", effects=(E.STALL,),
                              rule="engine_hung"),
    "kv_shrink": FaultKind("engine", 0.2, "fraction of the KV block pool left (0-1]", effects=(E.KV_POOL,),
                           rule="kv_pressure", sweep=Sweep((0.3, 0.05), needs_load=True)),
    "prefix_cache_drop": FaultKind(
        "engine", 0.05, "prefix-cache hit rate while active (0-1)", effects=(E.PREFIX_CACHE,),
        rule="prefix_cache_collapse",
        # A costlier prefill, so that losing the cache shows in time to first token.
        sweep=Sweep((0.15, 0.0), scenario={"engine": {"prefill_s_per_token": 0.001}}, needs_load=True)),
    "rss_leak": FaultKind("engine", 64.0, "MiB of process RSS leaked per minute", effects=(E.RSS_LEAK,),
                          rule="engine_leak", entity={"process": "vllm"},
                          sweep=Sweep((16.0, 256.0), open_ended=True)),
    # The engine's own allocations on one card (a leaked tensor, a growing cache): the hardware is
    # fine, and ending the fault is restarting the engine, which frees what it held.
    "gpu_memory_leak": FaultKind(
        "engine", 180.0, "MiB of GPU memory leaked per minute; the engine fails once the card is full", True,
        effects=(E.GPU_MEMORY_LEAK,), rule="gpu_memory_leak",
    ),
    "engine_restart": FaultKind("platform", 30.0, "unused: counters reset once at start, engine down",
                                effects=(E.RESTART,)),
    # The engine's container killed for exceeding its memory limit (kube-state-metrics: last
    # terminated reason OOMKilled), restarted once at start.
    "engine_oom": FaultKind("platform", 30.0, "seconds the engine is down after the OOM kill",
                            effects=(E.RESTART,), terminated_reason="OOMKilled"),
    # The engine's container crashing again and again while active (a CrashLoopBackOff).
    "crash_loop": FaultKind("platform", 120.0, "seconds between the container's crashes",
                            effects=(E.CRASH_LOOP,)),
    # A new version of the engine's deployment: its spec generation rises by one at start and the
    # node's engine is replaced (a new pod, so no container restart), down while it starts.
    "rollout": FaultKind("platform", 60.0, "seconds the node's new engine pod takes to become ready",
                         effects=(E.ROLLOUT,)),
    # GPU hardware; without ``gpu`` they hit GPU 0 of the node.
    "thermal_throttle": FaultKind("infrastructure", 0.5, "SM clock fraction left (0-1)", True,
                                  effects=(E.SM_CLOCK,), rule="thermal_throttle", sweep=Sweep((0.85, 0.35))),
    "ecc_storm": FaultKind("infrastructure", 60.0, "corrected ECC errors per minute", True,
                           effects=(E.ECC_CORRECTED,), rule="ecc_storm", sweep=Sweep((5.0, 200.0))),
    "ecc_uncorrectable": FaultKind("infrastructure", 1.0, "uncorrectable ECC errors at start", True,
                                   effects=(E.ECC_UNCORRECTABLE,), rule="ecc_uncorrectable",
                                   sweep=Sweep((1.0, 4.0), fixed_duration_s=600.0)),
    "xid": FaultKind("infrastructure", 79.0, "the Xid code, emitted once at start", True, effects=(E.XID,),
                     rule="xid_critical", sweep=Sweep((1.0, 1.0), draw=_paging_xid, fixed_duration_s=60.0)),
    "gpu_lost": FaultKind("infrastructure", 1.0, "unused: the GPU falls off the bus", True,
                          effects=(E.GPU_LOST,)),
    "gpu_slow": FaultKind("infrastructure", 2.0, "compute time multiplier, no throttle reason", True,
                          effects=(E.COMPUTE,), rule="peer_outlier", sweep=Sweep((1.3, 2.5))),
    "pcie_replay_burst": FaultKind("infrastructure", 200.0, "PCIe replays per minute", True,
                                   effects=(E.PCIE_REPLAYS,)),
    # One NVLink failing its CRC checks (a dirty or loose connector, a marginal lane): each bad flit
    # is replayed, so the link carries less and the tensor-parallel engine waits on it.
    "nvlink_degraded": FaultKind(
        "infrastructure", 300.0, "NVLink CRC errors per minute on the link; it carries half its traffic",
        True, per_link=True, effects=(E.NVLINK_CRC,), rule="nvlink_degraded",
    ),
    "telemetry_loss": FaultKind("platform", 1.0, "unused: the node's GPU telemetry answers 503",
                                effects=(E.TELEMETRY_LOST,), rule="telemetry_lost", sweep=Sweep((1.0, 1.0))),
    # Dependency (vector DB) in front of the engine.
    "dependency_slow": FaultKind(
        "dependency", 10.0, "vector-DB latency multiplier", effects=(E.DEPENDENCY_LATENCY,),
        rule="dependency_degraded", entity={"dependency": "vectordb"},
        sweep=Sweep((2.0, 300.0), digits=1, companions=_cache_misses, scenario=_FLAT)),
    "cache_hit_drop": FaultKind("dependency", 0.6, "response-cache hit rate while active (0-1)",
                                effects=(E.RESPONSE_CACHE,)),
    # Gateway and traffic (history scenarios).
    "admission_limit": FaultKind(
        "scheduling", 1.0, "gateway max_concurrency while active", history_only=True, gateway=True,
        effects=(E.ADMISSION,), rule="scheduling_bottleneck", sweep=Sweep((3.0, 1.0), needs_load=True),
    ),
    "ingress_errors": FaultKind(
        "ingress", 0.05, "share of requests cut with 504 at the edge", history_only=True, gateway=True,
        effects=(E.INGRESS_ERRORS,), rule="ingress_errors", sweep=Sweep((0.02, 0.3)),
    ),
    "traffic_spike": FaultKind("scheduling", 3.0, "request-rate multiplier", history_only=True,
                               effects=(E.TRAFFIC,), rule="capacity_exhausted",
                               sweep=Sweep((3.0, 8.0), needs_load=True)),
    "scrape_gap": FaultKind("platform", 1.0, "unused: the node's targets are not scraped", history_only=True,
                            effects=(E.SCRAPE_GAP,)),
}


def has_effect(kind: str, effect: Effect) -> bool:
    """Whether fault kind ``kind`` carries ``effect``."""
    return effect in FAULT_KINDS[kind].effects
