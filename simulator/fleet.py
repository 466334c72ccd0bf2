"""The simulated fleet: N nodes, each with one engine and M GPUs, one clock, one fault book.

This is where the couplings live: faults and GPU state turn into engine ``Conditions``, and
the engine's busy time turns into GPU utilisation (``simulator/gpu.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.clock import Clock
from simulator.defaults import DEPENDENCY_LATENCY_S
from simulator.dependency import DependencyModel
from simulator.engine import Conditions, EngineModel, EngineParams, Seq
from simulator.fault_kinds import FAULT_KINDS, Effect, has_effect
from simulator.faults import Fault, FaultBook, parse_fault
from simulator.gpu import GIB, MIB, GpuModel, GpuSpec

# A vLLM engine process's resident memory when healthy (weights live in GPU memory, not RSS).
BASE_RSS_BYTES = 6 * GIB
# The host's physical memory, what a leaking engine's RSS grows towards (a 4-GPU inference host).
HOST_MEMORY_BYTES = 256 * GIB


@dataclass
class Node:
    """One host: its engine, its GPUs and the engine process's RSS."""

    name: str
    engine: EngineModel
    gpus: list[GpuModel]
    dependency: DependencyModel
    pid: int
    restarts_seen: set[str] = field(default_factory=set)  # container restarts fired (fault id, #crash)
    rollouts_seen: set[str] = field(default_factory=set)  # rollout faults fired
    down_until: float = 0.0
    # Why the engine's container last terminated (kube-state-metrics' reason), "" before any restart.
    last_terminated: str = ""


# How long a crash-looping engine is down after each crash (the container restarts at once).
_CRASH_DOWN_S = 10.0


class Fleet:
    """Every node of one simulation, sharing ``clock`` and ``faults``."""

    def __init__(
        self,
        clock: Clock,
        *,
        nodes: int,
        gpus_per_node: int,
        params: EngineParams,
        model_name: str,
        gpu_spec: GpuSpec | None = None,
        seed: int = 0,
        dependency_latency_s: float = DEPENDENCY_LATENCY_S,
    ) -> None:
        self.clock = clock
        self.faults = FaultBook()
        self.model_name = model_name
        self.gpus_per_node = gpus_per_node
        spec = gpu_spec or GpuSpec()
        self.links_per_gpu = spec.nvlinks
        self.nodes: dict[str, Node] = {}
        self._cache: dict[str, tuple[int, float, float, float, Conditions]] = {}
        for i in range(1, nodes + 1):
            name = f"n{i}"
            gpus = [GpuModel(spec, name, g, seed=seed) for g in range(gpus_per_node)]
            engine = EngineModel(params, self._conditions_for(name))
            dependency = DependencyModel(name, latency_s=dependency_latency_s)
            # Simulated pids: stable per node, so the exporter's per-process series are too.
            self.nodes[name] = Node(name, engine, gpus, dependency, pid=1000 + 100 * i)

    def node(self, name: str) -> Node:
        """The node called ``name`` (KeyError when unknown)."""
        return self.nodes[name]

    def add_fault(self, data: object, *, live: bool = False) -> Fault:
        """Validate and store a fault (FaultError on bad input; ``live`` refuses history-only kinds)."""
        fault = parse_fault(
            data, now=self.clock.now(), nodes=self.nodes, gpus_per_node=self.gpus_per_node,
            links_per_gpu=self.links_per_gpu, live=live,
        )
        return self.faults.add(fault)

    def _conditions_for(self, name: str) -> Callable[[float], Conditions]:
        def conditions(now: float) -> Conditions:
            return self.conditions(name, now)

        return conditions

    def conditions(self, name: str, now: float) -> Conditions:
        """Faults and GPU health of ``name`` as seen by its engine at ``now``.

        Conditions only change at a fault's start or end (or a restart's end), so they are cached
        until the next such time: the engine asks once per iteration, millions of times in history.
        """
        node = self.nodes[name]
        cached = self._cache.get(name)
        if cached is not None:
            version, valid_from, valid_until, down_until, cond = cached
            if (version == self.faults.version and valid_from <= now < valid_until
                    and down_until == node.down_until):
                return cond
        cond = self._compute_conditions(name, now)
        until = self.faults.next_change(now, name)
        # A leak filling a card changes the conditions without a fault starting or ending.
        until = min([until, *(t for g in node.gpus if (t := g.out_of_memory_at(now, self.faults)) > now)])
        if now < node.down_until:
            until = min(until, node.down_until)
        self._cache[name] = (self.faults.version, now, until, node.down_until, cond)
        return cond

    def _compute_conditions(self, name: str, now: float) -> Conditions:
        book = self.faults
        node = self.nodes[name]
        slowdown = 1.0
        decode = book.strongest(now, name, effect=Effect.DECODE)
        if decode is not None:
            slowdown *= decode.strength
        # Tensor parallel: the engine runs at the pace of its slowest GPU, and of its slowest link
        # (every GPU waits on the all-reduce that crosses it).
        slowdown *= max((g.compute_slowdown(now, book) for g in node.gpus), default=1.0)
        slowdown *= max((g.interconnect_slowdown(now, book) for g in node.gpus), default=1.0)
        stalled = (
            book.strongest(now, name, effect=Effect.STALL) is not None
            or now < node.down_until
            or any(g.lost(now, book) for g in node.gpus)
            # A card full of leaked memory: the engine's allocations fail (CUDA out of memory).
            or any(g.out_of_memory(now, book) for g in node.gpus)
        )
        kv = book.strongest(now, name, effect=Effect.KV_POOL)
        prefix = book.strongest(now, name, effect=Effect.PREFIX_CACHE)
        return Conditions(
            slowdown=slowdown,
            stalled=stalled,
            kv_fraction=1.0 if kv is None else kv.strength,
            prefix_hit_rate=None if prefix is None else prefix.strength,
        )

    def apply_restarts(self, now: float, only: str | None = None) -> list[Seq]:
        """Fire the restart faults that have started (engine_restart, engine_oom, each crash of a
        crash_loop) and rollouts: counters reset, in-flight work dropped, the engine down for the
        fault's strength in seconds (a crash: until the next one, at most _CRASH_DOWN_S)."""
        dropped: list[Seq] = []
        for node in self.nodes.values() if only is None else [self.nodes[only]]:
            fired: list[tuple[str, Fault, float]] = []  # (key, fault, seconds down)
            for fault in self.faults.active(now, node.name, effect=Effect.RESTART):
                fired.append((fault.id, fault, fault.strength))
            for fault in self.faults.active(now, node.name, effect=Effect.ROLLOUT):
                fired.append((fault.id, fault, fault.strength))
            for fault in self.faults.active(now, node.name, effect=Effect.CRASH_LOOP):
                period = max(fault.strength, 1.0)
                crashes = int((now - fault.start) // period) + 1
                down_s = min(period, _CRASH_DOWN_S)
                fired += [(f"{fault.id}#{k}", fault, down_s) for k in range(crashes)]
            for key, fault, down_s in fired:
                kind = FAULT_KINDS[fault.kind]
                new_pod = Effect.ROLLOUT in kind.effects  # a new pod: no container terminated
                seen = node.rollouts_seen if new_pod else node.restarts_seen
                if key in seen:
                    continue
                seen.add(key)
                dropped.extend(node.engine.abort_all(now))
                node.engine.reset_stats()
                node.down_until = max(node.down_until, now + down_s)
                if not new_pod:
                    node.last_terminated = kind.terminated_reason
        return dropped

    def generation(self, now: float) -> int:
        """The engine deployment's spec generation: 1, and one more for every rollout begun by
        ``now`` on any node (every node's history sees the whole scenario's faults)."""
        return 1 + sum(1 for f in self.faults.all() if has_effect(f.kind, Effect.ROLLOUT) and f.start <= now)

    def step_gpus(self, name: str, now: float, utilization: float, wall_origin_s: float) -> None:
        """Advance ``name``'s GPUs; in tensor parallel the slowest GPU is busy while its peers
        wait for it at every sync, so the peers' utilisation drops by the slowdown ratio."""
        node = self.nodes[name]
        slowdowns = [g.compute_slowdown(now, self.faults) for g in node.gpus]
        slowest = max(slowdowns, default=1.0)
        for gpu, slowdown in zip(node.gpus, slowdowns, strict=True):
            gpu.step(now, utilization * slowdown / slowest, self.faults, wall_origin_s)

    def rss_bytes(self, name: str, now: float) -> int:
        """The engine process's RSS: flat when healthy, growing linearly under rss_leak."""
        leaked = 0.0
        for fault in self.faults.all():
            if fault.node == name and has_effect(fault.kind, Effect.RSS_LEAK) and fault.start <= now:
                minutes = (min(now, fault.end) - fault.start) / 60.0
                leaked += fault.strength * MIB * minutes
        return int(BASE_RSS_BYTES + leaked)

    def gpus_json(self, name: str, now: float, wall_origin_s: float) -> dict[str, Any]:
        """``GET /fleet/gpus?node=NAME``: the exporter sim backend's contract."""
        node = self.nodes[name]
        return {
            "simulation": True,
            "node": name,
            "gpus": [g.to_json(now, self.faults, wall_origin_s, node.pid) for g in node.gpus],
            "processes": [{"name": "vllm", "pid": node.pid, "rss_bytes": self.rss_bytes(name, now)}],
            "host_memory_total_bytes": HOST_MEMORY_BYTES,
        }
