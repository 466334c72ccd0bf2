"""Plain accumulators the models update; rendered live by a collector and in bulk by history.

Keeping the numbers here (not in prometheus_client objects) is what lets one model feed both
``/metrics`` and OpenMetrics backfill files without a registry per time step.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

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


def _fmt(value: float) -> str:
    # prometheus_client's float formatting, so live and backfilled ``le`` labels are identical.
    text = repr(float(value))
    return text
