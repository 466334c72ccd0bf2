"""Correlation: anomaly events in, groups out (pure, no I/O).

Events that share an entity (node, GPU via its node, service via the topology) and whose active
spans come within ``lookback`` of each other belong together; the rest stay apart, so two faults
on two nodes make two incidents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.topology import EntityKey, Topology

DEFAULT_LOOKBACK = timedelta(minutes=15)


@dataclass(frozen=True)
class Group:
    """Co-occurring events on joined entities, ordered by onset."""

    events: tuple[AnomalyEvent, ...]
    keys: frozenset[EntityKey]

    @property
    def nodes(self) -> frozenset[str]:
        """Nodes the group touches."""
        return frozenset(v for k, v in self.keys if k == "node")

    @property
    def onset(self) -> datetime:
        """The earliest onset."""
        return self.events[0].onset

    @property
    def active(self) -> bool:
        """Whether any member is still anomalous."""
        return any(e.active for e in self.events)


def _end(event: AnomalyEvent, now: datetime) -> datetime:
    return event.cleared_at if event.cleared_at is not None else now


def correlate(events: Sequence[AnomalyEvent], topology: Topology, *, now: datetime,
              lookback: timedelta = DEFAULT_LOOKBACK) -> list[Group]:
    """Group ``events``; groups come out ordered by their earliest onset."""
    ordered = sorted(events, key=lambda e: (e.onset, e.signal, e.labels))
    keys = [topology.keys_of(e.labels) for e in ordered]
    parent = list(range(len(ordered)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Pairwise is fine here: one cycle holds tens of active events, not thousands.
    for i, a in enumerate(ordered):
        for j in range(i + 1, len(ordered)):
            b = ordered[j]
            if b.onset > _end(a, now) + lookback:
                continue
            if a.onset > _end(b, now) + lookback or not keys[i] & keys[j]:
                continue
            parent[find(j)] = find(i)

    members: dict[int, list[int]] = {}
    for i in range(len(ordered)):
        members.setdefault(find(i), []).append(i)
    groups = [Group(tuple(ordered[i] for i in idx), frozenset().union(*(keys[i] for i in idx)))
              for idx in members.values()]
    return sorted(groups, key=lambda g: (g.onset, sorted(g.keys)))
