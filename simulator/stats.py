"""Plain accumulators the models update; rendered live by a collector and in bulk by history.

Keeping the numbers here (not in prometheus_client objects) is what lets one model feed both
``/metrics`` and OpenMetrics backfill files without a registry per time step.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, partial, reduce

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import Metric

from oximeter.buckets import VLLM_ITL_BUCKETS_S, VLLM_REQUEST_LATENCY_BUCKETS_S, VLLM_TTFT_BUCKETS_S

# vLLM v1 buckets, so quantiles match a real engine's resolution.
TTFT_BUCKETS = VLLM_TTFT_BUCKETS_S
ITL_BUCKETS = VLLM_ITL_BUCKETS_S
REQUEST_LATENCY_BUCKETS = VLLM_REQUEST_LATENCY_BUCKETS_S
# Dependency calls (vector DB) are milliseconds, not seconds.
DEPENDENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(slots=True)
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
        for le, c in zip(_les(tuple(self.bounds)), self.counts, strict=False):
            running += c
            out.append((le, running))
        out.append(("+Inf", self.count))
        return out


class PendingObservations:
    """Observations of one prometheus_client histogram child, held back and folded in at once.

    The history observes hundreds of thousands of values between two samples, and
    prometheus_client takes a lock and walks the buckets on every ``observe``. ``fold`` gives the
    child exactly the numbers one ``observe`` per value would: whole bucket counts, and the sum
    added in observation order (the same float rounding). It keeps the same numbers itself, so
    ``sample_values`` needs no collect.
    """

    def __init__(self, parent: PromHistogram, *labelvalues: str) -> None:
        self.child = parent.labels(*labelvalues)
        self.key = (parent._name, labelvalues)
        # prometheus_client keeps one value per upper bound (+Inf last) and derives _count.
        self._bounds: list[float] = self.child._upper_bounds
        self._counts = [0.0] * len(self._bounds)
        self._sum = 0.0
        self.values: list[float] = []
        self.observe = self.values.append

    def fold(self) -> bool:
        """Hand the pending values to the child; False when there were none."""
        values = self.values
        if not values:
            return False
        bounds = self._bounds
        # observe() puts NaN in the sum but in no bucket.
        counted = [v for v in values if v == v] if any(map(math.isnan, values)) else values
        counts = Counter(map(partial(bisect.bisect_left, bounds), counted))  # bucket index -> values
        child = self.child
        for i, n in sorted(counts.items()):
            child._buckets[i].inc(n)
            self._counts[i] += n
        child._sum.set(reduce(operator.add, values, child._sum.get()))
        self._sum = reduce(operator.add, values, self._sum)
        values.clear()
        return True

    def sample_names(self, name: str) -> list[str]:
        """The names of the samples ``sample_values`` gives, in the child's order."""
        tail = ["_count", "_sum"] if self._bounds[0] >= 0 else ["_count"]
        return [name + suffix for suffix in ["_bucket"] * len(self._bounds) + tail]

    def sample_values(self) -> list[float]:
        """Cumulative buckets, count and sum (prometheus_client leaves out the sum when a bucket
        bound is negative), computed as the child computes them."""
        out: list[float] = []
        acc = 0.0
        for count in self._counts:
            acc += count
            out.append(acc)
        out.append(acc)
        if self._bounds[0] >= 0:
            out.append(self._sum)
        return out


class PendingCount:
    """Increments of one prometheus_client counter child, held back and added at once (whole
    numbers, so one ``inc`` of the total is exact)."""

    def __init__(self, parent: PromCounter, *labelvalues: str) -> None:
        self.child = parent.labels(*labelvalues)
        self.key = (parent._name, labelvalues)
        self.total = 0
        self._value = 0.0

    def inc(self, amount: int = 1) -> None:
        """Count ``amount`` more."""
        self.total += amount

    def fold(self) -> bool:
        """Hand the pending total to the child; False when there was none."""
        if not self.total:
            return False
        self.child.inc(self.total)
        self._value += self.total
        self.total = 0
        return True

    def sample_names(self, name: str) -> list[str]:
        """The name of the sample ``sample_values`` gives."""
        return [name + "_total"]

    def sample_values(self) -> list[float]:
        """The counter's value."""
        return [self._value]


Pending = PendingCount | PendingObservations


class ChildSampler:
    """A registry's families at each step, rebuilding only the children that changed.

    The history writes every child it touches through a ``Pending*``, so the other children of
    those families keep the values of the first collect (the zero-initialised counters). Those
    families are split into one family per pending child plus one for the rest, kept as the same
    objects while unchanged
    (``SeriesStore.add`` then only copies their values); a changed child takes its new values
    from its ``Pending*``, in the samples of the first collect. Families without a pending child
    (levels read at scrape time) are collected every time.
    """

    def __init__(self, registry: CollectorRegistry, pendings: Sequence[Pending]) -> None:
        self.registry = registry
        self._pendings = pendings
        tracked = {p.key[0] for p in pendings}
        self._families: list[Metric] = []
        self._index: dict[tuple[str, tuple[str, ...]], int] = {}
        live: set[str] = set()
        keys = {p.key for p in pendings}
        for fam in registry.collect():
            if fam.name not in tracked:
                live.update(sample.name for sample in fam.samples)
                continue
            # One family per pending child, and one for all the children nobody writes.
            by_child: dict[tuple[str, ...] | None, Metric] = {}
            for sample in fam.samples:
                child = tuple(v for k, v in sample.labels.items() if k != "le")
                part_key = child if (fam.name, child) in keys else None
                part = by_child.get(part_key)
                if part is None:
                    part = by_child[part_key] = Metric(fam.name, fam.documentation, fam.type)
                    if part_key is not None:
                        self._index[(fam.name, child)] = len(self._families)
                    self._families.append(part)
                part.samples.append(sample)
        for pending in pendings:
            pos = self._index.get(pending.key)
            if pos is None:
                raise ValueError(f"pending child {pending.key} is not in the registry")
            # The child must collect exactly what the pending computes, starting from the same
            # numbers, with nothing but ``_created`` after it.
            samples = self._families[pos].samples
            names = pending.sample_names(self._families[pos].name)
            rest = [s.name for s in samples[len(names):]]
            if (
                [s.name for s in samples[: len(names)]] != names
                or [s.value for s in samples[: len(names)]] != pending.sample_values()
                or any(not n.endswith("_created") for n in rest)
            ):
                raise ValueError(f"pending child {pending.key} does not match its samples {samples}")
        self._live = registry.restricted_registry(live)

    def collect(self) -> list[Metric]:
        """Fold every pending child and return the registry's families as they are now."""
        families = self._families
        for pending in self._pendings:
            if pending.fold():
                pos = self._index[pending.key]
                old = families[pos]
                new = Metric(old.name, old.documentation, old.type)
                values = pending.sample_values()
                # ``_make`` without its Python-level length check: the fields come from a sample.
                make = partial(tuple.__new__, type(old.samples[0]))
                new.samples = [
                    *(make((s[0], s[1], v, *s[3:])) for s, v in zip(old.samples, values, strict=False)),
                    *old.samples[len(values):],
                ]
                families[pos] = new
        return [*families, *self._live.collect()]


@cache
def _les(bounds: tuple[float, ...]) -> tuple[str, ...]:
    return tuple(_fmt(b) for b in bounds)


def _fmt(value: float) -> str:
    # prometheus_client's float formatting, so live and backfilled ``le`` labels are identical.
    text = repr(float(value))
    return text
