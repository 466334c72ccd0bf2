"""One fault schema for every injection path: CLI, ``POST /admin/faults`` and scenario files.

``start`` is on the simulation clock (seconds since the simulation began; omitted = now), so a
scenario's times and a live injection mean the same thing. ``strength``'s meaning depends on the
kind (see ``FAULT_KINDS`` in ``simulator/fault_kinds.py``); ``duration_s`` ``None`` lasts until
deleted. ``link`` names one NVLink of the GPU, for the kinds that hit a single link.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from oximeter.errors import OximeterError
from simulator.fault_kinds import FAULT_KINDS, FRACTION_EFFECTS, MULTIPLIER_EFFECTS, Effect


class FaultError(OximeterError, ValueError):
    """A fault that cannot be injected; the message is safe to return to the client."""


_FIELDS = ("kind", "node", "gpu", "link", "start", "duration_s", "strength", "id")
_ids = itertools.count(1)


@dataclass(frozen=True)
class Fault:
    """One injected fault on a node (and GPU), active on [start, start + duration_s)."""

    kind: str
    node: str
    start: float
    duration_s: float | None
    strength: float
    gpu: int | None = None
    id: str = ""
    link: int | None = None

    @property
    def end(self) -> float:
        """Clock time the fault stops (inf while it has no duration)."""
        return math.inf if self.duration_s is None else self.start + self.duration_s

    def active(self, now: float) -> bool:
        """True on [start, end)."""
        return self.start <= now < self.end

    def to_json(self) -> dict[str, Any]:
        """The wire form (same keys as accepted)."""
        return asdict(self)


def _number(data: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FaultError(f"{key}: expected a finite number, got {value!r}")
    return float(value)


def _index(data: Mapping[str, Any], key: str, what: str, count: int | None, range_text: str) -> int | None:
    """``data[key]`` as an index >= 0 and below ``count`` (when known), or None when absent."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FaultError(f"{key}: expected {what} index >= 0, got {value!r}")
    if count is not None and value >= count:
        raise FaultError(f"{key}: {range_text} 0..{count - 1}, got {value}")
    return value


def parse_fault(
    data: Any,
    *,
    now: float,
    nodes: Iterable[str] | None = None,
    gpus_per_node: int | None = None,
    links_per_gpu: int | None = None,
    live: bool = False,
) -> Fault:
    """Validate a JSON/YAML mapping into a Fault; FaultError names the key and the problem."""
    if not isinstance(data, Mapping):
        raise FaultError(f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise FaultError(f"unknown keys: {', '.join(map(str, unknown))} (allowed: {', '.join(_FIELDS)})")
    kind_name = data.get("kind")
    if kind_name not in FAULT_KINDS:
        raise FaultError(f"kind: unknown fault kind {kind_name!r} (known: {', '.join(FAULT_KINDS)})")
    kind = FAULT_KINDS[kind_name]
    if live and kind.history_only:
        raise FaultError(f"kind: {kind_name} is only simulated by `oximeter sim history` scenarios")
    node = data.get("node")
    if not isinstance(node, str) or not node:
        raise FaultError("node: required, a node name such as 'n1'")
    known_nodes = list(nodes) if nodes is not None else None
    if known_nodes is not None and node not in known_nodes:
        raise FaultError(f"node: unknown node {node!r} (known: {', '.join(known_nodes)})")
    gpu = _index(data, "gpu", "a GPU", gpus_per_node, "node has GPUs")
    if gpu is None and kind.per_gpu:
        gpu = 0
    if data.get("link") is not None and not kind.per_link:
        per_link = ", ".join(k for k, v in FAULT_KINDS.items() if v.per_link)
        raise FaultError(f"link: {kind_name} hits no single NVLink (only {per_link} take a link)")
    link = _index(data, "link", "an NVLink", links_per_gpu, "each GPU has NVLinks")
    if link is None and kind.per_link:
        link = 0
    start = _number(data, "start", now)
    duration = _number(data, "duration_s", None)
    if duration is not None and duration <= 0:
        raise FaultError(f"duration_s: must be > 0 (or omitted for 'until deleted'), got {duration}")
    strength = _number(data, "strength", kind.default_strength)
    assert strength is not None and start is not None
    if FRACTION_EFFECTS.intersection(kind.effects) and not 0 <= strength <= 1:
        raise FaultError(f"strength: {kind_name} takes {kind.strength_means}, got {strength}")
    if MULTIPLIER_EFFECTS.intersection(kind.effects) and strength < 1:
        raise FaultError(f"strength: {kind_name} takes {kind.strength_means}, got {strength}")
    if strength < 0:
        raise FaultError(f"strength: must be >= 0, got {strength}")
    fault_id = data.get("id") or f"f{next(_ids)}"
    if not isinstance(fault_id, str):
        raise FaultError(f"id: expected a string, got {fault_id!r}")
    return Fault(
        kind=kind_name, node=node, gpu=gpu, start=start, duration_s=duration, strength=strength, id=fault_id,
        link=link,
    )


class FaultBook:
    """The faults known to one simulation; queried by node (and GPU) at a clock time."""

    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}
        # Bumped on every change, so derived caches (engine conditions) know to recompute.
        self.version = 0
        self._index: dict[tuple[str, str, str], list[Fault]] = {}
        self._index_version = -1

    def add(self, fault: Fault) -> Fault:
        """Store ``fault``; an existing id is an error (delete it first)."""
        if fault.id in self._faults:
            raise FaultError(f"id: a fault with id {fault.id!r} already exists")
        self._faults[fault.id] = fault
        self.version += 1
        return fault

    def remove(self, fault_id: str) -> Fault | None:
        """Delete by id; returns the fault or None when unknown."""
        self.version += 1
        return self._faults.pop(fault_id, None)

    def next_change(self, now: float, node: str) -> float:
        """The first start or end of one of ``node``'s faults after ``now`` (inf when none)."""
        times = [t for f in self._faults.values() if f.node == node for t in (f.start, f.end) if t > now]
        return min(times, default=math.inf)

    def all(self) -> list[Fault]:
        """Every fault, in start order."""
        return sorted(self._faults.values(), key=lambda f: (f.start, f.id))

    def active(self, now: float, node: str, kind: str | None = None, gpu: int | None = None, *,
               effect: Effect | None = None) -> list[Fault]:
        """Faults active at ``now`` on ``node`` (optionally of one kind, or with one effect; one GPU)."""
        if effect is not None:
            faults: Iterable[Fault] = self._indexed(node, "effect", effect)
        elif kind is not None:
            faults = self._indexed(node, "kind", kind)
        else:
            faults = self._faults.values()
        return [
            f
            for f in faults
            if f.node == node
            and f.active(now)
            and (kind is None or f.kind == kind)
            and (gpu is None or f.gpu is None or f.gpu == gpu)
        ]

    def _indexed(self, node: str, by: str, key: str) -> list[Fault]:
        """``node``'s faults of one kind (``by`` "kind") or with one effect (``by`` "effect"), in the
        book's order: a history asks for one kind on one node for every request and GPU, and most
        kinds have no fault there."""
        if self._index_version != self.version:
            self._index = {}
            for f in self._faults.values():
                self._index.setdefault((f.node, "kind", f.kind), []).append(f)
                for e in FAULT_KINDS[f.kind].effects:
                    self._index.setdefault((f.node, "effect", e), []).append(f)
            self._index_version = self.version
        return self._index.get((node, by, key), [])

    def strongest(self, now: float, node: str, kind: str | None = None, gpu: int | None = None, *,
                  effect: Effect | None = None) -> Fault | None:
        """The active fault of ``kind`` (or with ``effect``) with the largest effect (ties: the
        latest started)."""
        found = self.active(now, node, kind, gpu, effect=effect)
        if not found:
            return None

        def size(f: Fault) -> tuple[float, float]:
            return (-f.strength if FAULT_KINDS[f.kind].lowest_wins else f.strength, f.start)

        return sorted(found, key=size)[-1]
