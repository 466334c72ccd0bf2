"""A dependency step in front of the engine: a response cache, then a vector-DB lookup on a miss.

When the vector DB slows or the cache hit rate falls (95 % → 60 %), requests wait
on the dependency, the gateway queue backs up and GPU utilisation *falls*. Hits and misses are
spread deterministically (a credit counter, not a coin), so virtual-clock tests are exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from simulator.fault_kinds import Effect
from simulator.faults import FaultBook
from simulator.stats import DEPENDENCY_BUCKETS, Histogram

DEPENDENCY = "vectordb"
CACHE = "response"


@dataclass
class DependencyModel:
    """One node's cache + vector DB; ``latency_s`` 0 turns the step off (the default live)."""

    node: str
    latency_s: float = 0.0
    hit_rate: float = 0.95
    duration: Histogram = field(default_factory=lambda: Histogram(DEPENDENCY_BUCKETS))
    hits: int = 0
    misses: int = 0
    _credit: float = 0.0

    @property
    def enabled(self) -> bool:
        """False when the step is switched off."""
        return self.latency_s > 0

    def call(self, now: float, book: FaultBook) -> float:
        """One request's dependency step at ``now``; returns the seconds it waits (0 on a hit)."""
        if not self.enabled:
            return 0.0
        drop = book.strongest(now, self.node, effect=Effect.RESPONSE_CACHE)
        self._credit += self.hit_rate if drop is None else drop.strength
        if self._credit >= 1.0:
            self._credit -= 1.0
            self.hits += 1
            return 0.0
        self.misses += 1
        slow = book.strongest(now, self.node, effect=Effect.DEPENDENCY_LATENCY)
        latency = self.latency_s * (1.0 if slow is None else slow.strength)
        self.duration.observe(latency)
        return latency

    def families(self) -> list[Metric]:
        """``oximeter_dependency_duration_seconds`` and ``oximeter_cache_requests_total``."""
        hist = HistogramMetricFamily(
            "oximeter_dependency_duration_seconds",
            "Duration of calls to a dependency (simulated vector DB).",
            labels=["node", "dependency"],
        )
        hist.add_metric(
            [self.node, DEPENDENCY],
            [(le, float(c)) for le, c in self.duration.cumulative()],
            self.duration.total,
        )
        cache = CounterMetricFamily(
            "oximeter_cache_requests", "Cache lookups by result.", labels=["node", "cache", "result"]
        )
        cache.add_metric([self.node, CACHE, "hit"], self.hits)
        cache.add_metric([self.node, CACHE, "miss"], self.misses)
        return [hist, cache]


class DependencyCollector(Collector):
    """Live collector over one node's dependency model."""

    def __init__(self, model: DependencyModel) -> None:
        self._model = model

    def collect(self) -> Iterator[Metric]:
        """Fresh families at scrape time."""
        yield from self._model.families()
