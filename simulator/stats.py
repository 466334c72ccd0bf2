"""Plain accumulators the models update; rendered live by a collector and in bulk by history.

Keeping the numbers here (not in prometheus_client objects) is what lets one model feed both
``/metrics`` and OpenMetrics backfill files without a registry per time step.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import Metric

# vLLM v1 buckets (vllm/v1/metrics/loggers.py), so quantiles match a real engine's resolution.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# Dependency calls (vector DB) are milliseconds, not seconds.
DEPENDENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Histogram:
    """Cumulative-on-render histogram: per-bucket counts, sum and count."""

    bounds: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        """Record ``n`` observations of ``value``."""
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n
        self.count += n

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, ``+Inf`` last, as exposition formats want them."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, c in zip(self.bounds, self.counts, strict=False):
            running += c
            out.append((_fmt(bound), running))
        out.append(("+Inf", self.count))
        return out


class PendingObservations:
    """Observations of one prometheus_client histogram child, held back and folded in at once.

    The history observes hundreds of thousands of values between two samples, and
    prometheus_client takes a lock and walks the buckets on every ``observe``. ``fold`` gives the
    child exactly the numbers one ``observe`` per value would: whole bucket counts, and the sum
    added in observation order (the same float rounding).
    """

    def __init__(self, parent: PromHistogram, *labelvalues: str) -> None:
        self.child = parent.labels(*labelvalues)
        self.key = (parent._name, labelvalues)
        # prometheus_client keeps one value per upper bound (+Inf last) and derives _count.
        self._bounds: list[float] = self.child._upper_bounds
        self.values: list[float] = []
        self.observe = self.values.append

    def fold(self) -> bool:
        """Hand the pending values to the child; False when there were none."""
        values = self.values
        if not values:
            return False
        bounds = self._bounds
        counts = [0] * len(bounds)
        for value in values:
            if value == value:  # observe() puts NaN in the sum but in no bucket
                counts[bisect.bisect_left(bounds, value)] += 1
        child = self.child
        for bucket, n in zip(child._buckets, counts, strict=True):
            if n:
                bucket.inc(n)
        child._sum.set(reduce(operator.add, values, child._sum.get()))
        values.clear()
        return True


class PendingCount:
    """Increments of one prometheus_client counter child, held back and added at once (whole
    numbers, so one ``inc`` of the total is exact)."""

    def __init__(self, parent: PromCounter, *labelvalues: str) -> None:
        self.child = parent.labels(*labelvalues)
        self.key = (parent._name, labelvalues)
        self.total = 0

    def inc(self, amount: int = 1) -> None:
        """Count ``amount`` more."""
        self.total += amount

    def fold(self) -> bool:
        """Hand the pending total to the child; False when there was none."""
        if not self.total:
            return False
        self.child.inc(self.total)
        self.total = 0
        return True


Pending = PendingCount | PendingObservations


class ChildSampler:
    """A registry's families at each step, re-collecting only the children that changed.

    The history writes every child it touches through a ``Pending*``, so the other children of
    those families keep the values of the first collect (the zero-initialised counters). Those
    families are split into one family per child, kept as the same objects while unchanged
    (``SeriesStore.add`` then only copies their values); a changed child is collected alone.
    Families without a pending child (levels read at scrape time) are collected every time.
    """

    def __init__(self, registry: CollectorRegistry, pendings: Sequence[Pending]) -> None:
        self._pendings = pendings
        tracked = {p.key[0] for p in pendings}
        self._families: list[Metric] = []
        self._index: dict[tuple[str, tuple[str, ...]], int] = {}
        live: set[str] = set()
        for fam in registry.collect():
            if fam.name not in tracked:
                live.update(sample.name for sample in fam.samples)
                continue
            by_child: dict[tuple[str, ...], Metric] = {}
            for sample in fam.samples:
                child = tuple(v for k, v in sample.labels.items() if k != "le")
                part = by_child.get(child)
                if part is None:
                    part = by_child[child] = Metric(fam.name, fam.documentation, fam.type)
                    self._index[(fam.name, child)] = len(self._families)
                    self._families.append(part)
                part.samples.append(sample)
        missing = [p.key for p in pendings if p.key not in self._index]
        if missing:
            raise ValueError(f"pending children not in the registry: {missing}")
        self._live = registry.restricted_registry(live)

    def collect(self) -> list[Metric]:
        """Fold every pending child and return the registry's families as they are now."""
        families = self._families
        for pending in self._pendings:
            if pending.fold():
                pos = self._index[pending.key]
                old = families[pos]
                new = Metric(old.name, old.documentation, old.type)
                fresh = next(iter(pending.child.collect())).samples
                # A child collects its samples in the parent's order, without the parent's labels.
                new.samples = [s._replace(value=f.value) for s, f in zip(old.samples, fresh, strict=True)]
                families[pos] = new
        return [*families, *self._live.collect()]


def _fmt(value: float) -> str:
    # prometheus_client's float formatting, so live and backfilled ``le`` labels are identical.
    text = repr(float(value))
    return text
