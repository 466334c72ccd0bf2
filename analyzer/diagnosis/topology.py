"""Which service runs on which node: the join that lets a queue symptom meet a GPU cause.

Sources: the gateways' ``oximeter_target_info{service,model,
node}`` series, and the config's ``topology:`` map for what Prometheus cannot tell (a dependency
shared by several nodes, an exporter ``instance`` without a ``node`` label).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

Labels = tuple[tuple[str, str], ...]
EntityKey = tuple[str, str]  # ("node", "node-0"), ("service", "chat"), ...


class TopologySettings(BaseModel):
    """The ``topology:`` section: service -> nodes, instance -> node."""

    model_config = ConfigDict(extra="forbid")

    # service -> the nodes it runs on, added to what the gateways report (oximeter_target_info).
    services: dict[str, list[str]] = Field(default_factory=dict)
    # scrape instance (host:port) -> its node, for series that carry no node label.
    instances: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    """Service ↔ node and instance → node, merged from target_info and the config."""

    service_nodes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    instance_nodes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: TopologySettings) -> Topology:
        """The topology the config states."""
        return cls({s: frozenset(n) for s, n in settings.services.items()}, dict(settings.instances))

    @classmethod
    def from_target_info(cls, series: Iterable[Mapping[str, str]]) -> Topology:
        """From the label sets of ``oximeter_target_info`` (one per gateway)."""
        services: dict[str, set[str]] = {}
        instances: dict[str, str] = {}
        for labels in series:
            node = labels.get("node")
            if not node:
                continue
            if labels.get("service"):
                services.setdefault(labels["service"], set()).add(node)
            if labels.get("instance"):
                instances[labels["instance"]] = node
        return cls({s: frozenset(n) for s, n in services.items()}, instances)

    def merged(self, other: Topology) -> Topology:
        """Union of both (a service runs on every node either names)."""
        empty: frozenset[str] = frozenset()
        services = {s: self.service_nodes.get(s, empty) | other.service_nodes.get(s, empty)
                    for s in {*self.service_nodes, *other.service_nodes}}
        return Topology(services, {**self.instance_nodes, **other.instance_nodes})

    def services_on(self, node: str) -> frozenset[str]:
        """Services known to run on ``node``."""
        return frozenset(s for s, nodes in self.service_nodes.items() if node in nodes)

    def nodes_of(self, labels: Labels | Mapping[str, str]) -> frozenset[str]:
        """The nodes an entity lives on: its own ``node`` label, else through service or instance."""
        entity = dict(labels)
        if entity.get("node"):
            return frozenset({entity["node"]})
        if entity.get("instance") in self.instance_nodes:
            return frozenset({self.instance_nodes[entity["instance"]]})
        if entity.get("service"):
            return self.service_nodes.get(entity["service"], frozenset())
        return frozenset()

    def keys_of(self, labels: Labels | Mapping[str, str]) -> frozenset[EntityKey]:
        """The join keys of an entity: its nodes; a service-wide entity also keys on the service.

        A series that carries ``node`` joins on the node only: keying every per-replica gateway
        series on its service as well would chain unrelated faults on different nodes together.
        """
        entity = dict(labels)
        keys = {("node", n) for n in self.nodes_of(entity)}
        if not entity.get("node") and entity.get("service"):
            keys.add(("service", entity["service"]))
        if not keys:
            # Nothing to join through: the entity only meets events on exactly the same labels.
            keys.add(("labels", ",".join(f"{k}={v}" for k, v in sorted(entity.items()))))
        return frozenset(keys)

    def services_of(self, labels: Labels | Mapping[str, str]) -> frozenset[str]:
        """Services an entity affects: its own ``service`` label, else those on its nodes."""
        entity = dict(labels)
        if entity.get("service"):
            return frozenset({entity["service"]})
        return frozenset(s for n in self.nodes_of(entity) for s in self.services_on(n))
