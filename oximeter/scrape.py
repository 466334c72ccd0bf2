"""Read a Prometheus text endpoint into plain numbers, straight from a process's ``/metrics``.

This is not a query engine: Prometheus does the real work. It serves checks that must read a
process's own counters even before Prometheus has two samples (the end-to-end tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One exposed sample."""

    name: str
    labels: Mapping[str, str]
    value: float


def scrape(url: str, timeout_s: float = 2.0) -> list[Sample]:
    """GET ``url`` and return every sample (histogram buckets keep their ``le`` label)."""
    response = requests.get(url, timeout=timeout_s)
    response.raise_for_status()
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    ]


def total(samples: list[Sample], name: str, **match: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``match``."""
    return sum(
        s.value for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
    )


def buckets(samples: list[Sample], histogram: str) -> dict[float, float]:
    """Cumulative bucket counts of ``histogram`` summed over all other labels, keyed by ``le``."""
    out: dict[float, float] = {}
    for s in samples:
        if s.name == f"{histogram}_bucket":
            le = float(s.labels["le"])
            out[le] = out.get(le, 0.0) + s.value
    return out


def quantile(q: float, cumulative: Mapping[float, float]) -> float:
    """``histogram_quantile`` as Prometheus computes it (linear within the bucket); NaN if empty."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return math.nan
    rank = q * cumulative[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return bounds[-1]


def delta(new: Mapping[float, float], old: Mapping[float, float]) -> dict[float, float]:
    """Bucket increase between two scrapes; a counter reset (new < old) counts from zero."""
    out = {}
    for le, value in new.items():
        before = old.get(le, 0.0)
        out[le] = value - before if value >= before else value
    return out
