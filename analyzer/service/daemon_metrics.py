"""What the analyzer daemon reports through: the notifier it hands changes and notices to, and its
own Prometheus metrics (open incidents, cycle time, source health, active anomalies, blind signals)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from loguru import logger
from prometheus_client import CollectorRegistry, Gauge, Histogram

from analyzer.detection.events import AnomalyEvent
from analyzer.incidents.lifecycle import Change, Incident
from oximeter.vocabulary import LAYERS, SEVERITIES


class Notifier(Protocol):
    """Where change records go (the reporter's outbox in production)."""

    def notify(self, change: Change, incident: Incident | None) -> None:
        """Deliver (or queue) one incident change; idempotent on ``change.key``."""
        ...

    def notice(self, key: str, text: str) -> None:
        """An operational notice, such as "analyzer cannot see"."""
        ...


class LogNotifier:
    """The default notifier: one structured log line per change."""

    def notify(self, change: Change, incident: Incident | None) -> None:
        """Log the change."""
        logger.info("incident {}: {} ({}) {}", change.incident_id, change.kind, change.severity, change.text)

    def notice(self, key: str, text: str) -> None:
        """Log the notice."""
        logger.warning("analyzer notice {}: {}", key, text)


class DaemonMetrics:
    """The daemon's own metrics, on a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.open = Gauge("oximeter_incidents_open", "Open incidents.", ("layer", "severity"),
                          registry=self.registry)
        self.cycle = Histogram("oximeter_analyzer_cycle_seconds", "Duration of one analyzer cycle.",
                               buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=self.registry)
        self.source_up = Gauge("oximeter_analyzer_source_up", "1 when the last read of the source worked.",
                               registry=self.registry)
        self.anomalies = Gauge("oximeter_anomalies_active", "Active anomaly events.", ("signal", "layer"),
                               registry=self.registry)
        self.learning = Gauge("oximeter_series_learning",
                              "Series judged against their recent window alone: too young for a "
                              "same-time baseline.", ("signal",), registry=self.registry)
        self.blind = Gauge("oximeter_analyzer_blind_signals",
                           "Signals whose queries return no series where some are expected.",
                           registry=self.registry)
        self.leader = Gauge("oximeter_analyzer_leader",
                            "1 while this analyzer leads its shard (always, without analyzer.ha); "
                            "0 on standby.", registry=self.registry)
        self.leader.set(1)
        # Every layer × severity the open-incidents gauge starts at 0 for (dashboards show 0, not "No data").
        self._open_labels: set[tuple[str, str]] = {(layer, sev) for layer in LAYERS for sev in SEVERITIES}
        for layer, sev in self._open_labels:
            self.open.labels(layer, sev).set(0)

    def update_learning(self, learning: Mapping[str, int]) -> None:
        """Set the learning gauge per signal (signals no longer learning are removed)."""
        self.learning.clear()
        for signal, count in learning.items():
            self.learning.labels(signal).set(count)

    def update(self, incidents: list[Incident], events: list[AnomalyEvent]) -> None:
        """Set the gauges from this cycle's state: every known layer × severity (and any other
        pair ever seen) is set, to 0 when nothing is open there; anomaly series that went to zero
        are removed."""
        counts: dict[tuple[str, str], int] = {}
        for inc in incidents:
            if inc.state == "open":
                counts[(inc.layer, inc.severity)] = counts.get((inc.layer, inc.severity), 0) + 1
        self._open_labels |= counts.keys()
        for layer, sev in self._open_labels:
            self.open.labels(layer, sev).set(counts.get((layer, sev), 0))
        self.anomalies.clear()
        for event in events:
            if event.active:
                self.anomalies.labels(event.signal, event.layer).inc()
