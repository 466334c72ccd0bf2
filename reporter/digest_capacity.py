"""Capacity at the day's peak, for the digest: each service's headroom to its limits, and N-1.

Headroom is the highest utilisation each service reached of four limits over the day, on its
busiest node: the gateway's concurrency limit (requests in flight over
``oximeter_concurrency_limit``), its queue bound (``oximeter_queue_length`` over
``oximeter_queue_limit``), the engine's KV cache (``vllm:kv_cache_usage_perc``) and the GPUs
(the busiest GPU's ``oximeter_gpu_utilization_ratio``). KV cache and GPUs are per node; a service
is charged with the nodes ``oximeter_target_info`` places it on.

N-1 asks whether the service could have carried its peak with its largest node down. Demand is
what the service's clients wanted at once, requests in flight plus requests queued, summed over
its nodes at the minute that sum was highest; capacity without the largest node is the sum of the
nodes' concurrency limits less the largest one. The fleet holds when every service does.

Every series is read at the digest's one-minute step and reduced here, so the peaks and the
minute they happened come from the same points a reader can check in Grafana.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from oximeter.prometheus import Series
from reporter.prom import PromQuery

# name, PromQL per (service, node) or per node, and which label the series are keyed by.
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("concurrency", "max by (service, node) (oximeter_inflight_requests / oximeter_concurrency_limit)",
     "service"),
    ("queue", "max by (service, node) (oximeter_queue_length / oximeter_queue_limit)", "service"),
    ("kv_cache", "max by (node) (vllm:kv_cache_usage_perc)", "node"),
    ("gpu", "max by (node) (oximeter_gpu_utilization_ratio)", "node"),
)
DEMAND = "max by (service, node) (oximeter_inflight_requests + oximeter_queue_length)"
CONCURRENCY_LIMIT = "max by (service, node) (oximeter_concurrency_limit)"
PLACEMENT = "max by (service, node) (max_over_time(oximeter_target_info[{span}]))"


@dataclass(frozen=True)
class Peak:
    """The highest utilisation of one limit: the ratio (1 = at the limit), where and when."""

    ratio: float
    node: str
    at: float  # epoch seconds of the first minute it was reached


@dataclass(frozen=True)
class Headroom:
    """One service's peaks against its limits (None: no series for that limit)."""

    service: str
    concurrency: Peak | None
    queue: Peak | None
    kv_cache: Peak | None
    gpu: Peak | None


@dataclass(frozen=True)
class NMinusOne:
    """Whether one service's peak fits on its nodes without the largest one."""

    service: str
    nodes: int
    peak_demand: float  # requests in flight + queued, summed over the nodes, at its highest minute
    at: float  # epoch seconds of that minute
    capacity: float  # sum of the nodes' concurrency limits
    largest_node: str
    without_largest: float  # capacity less the largest node's limit
    holds: bool


def _peak(series: Iterable[Series]) -> Peak | None:
    best: Peak | None = None
    for s in series:
        for t, v in s.points:
            if math.isfinite(v) and (best is None or v > best.ratio or (v == best.ratio and t < best.at)):
                best = Peak(v, s.label("node"), t)
    return best


def placement(prom: PromQuery, start: datetime, end: datetime) -> dict[str, set[str]]:
    """Which nodes each service ran on during the day (from ``oximeter_target_info``)."""
    span = f"{int((end - start).total_seconds())}s"
    where: dict[str, set[str]] = defaultdict(set)
    for s in prom.instant(PLACEMENT.format(span=span), end):
        if s.last >= 1:
            where[s.label("service")].add(s.label("node"))
    return dict(where)


def headroom(prom: PromQuery, start: datetime, end: datetime, step_s: float,
             nodes_of: dict[str, set[str]]) -> tuple[Headroom, ...]:
    """Each service's peak utilisation of its four limits over ``[start, end]``."""
    fetched = {name: (prom.range(expr, start, end, step_s), key) for name, expr, key in LIMITS}
    services = set(nodes_of)
    for series, key in fetched.values():
        if key == "service":
            services |= {s.label("service") for s in series}
    rows = []
    for service in sorted(services):
        peaks: dict[str, Peak | None] = {}
        for name, (series, key) in fetched.items():
            if key == "service":
                mine = [s for s in series if s.label("service") == service]
            else:
                mine = [s for s in series if s.label("node") in nodes_of.get(service, set())]
            peaks[name] = _peak(mine)
        rows.append(Headroom(service, **peaks))
    return tuple(rows)


def n_minus_one(prom: PromQuery, start: datetime, end: datetime, step_s: float) -> tuple[NMinusOne, ...]:
    """Per service: its peak demand against its concurrency limits with the largest node down."""
    demand: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for s in prom.range(DEMAND, start, end, step_s):
        for t, v in s.points:
            if math.isfinite(v):
                demand[s.label("service")][t] += v
    limits: dict[str, dict[str, float]] = defaultdict(dict)
    for s in prom.range(CONCURRENCY_LIMIT, start, end, step_s):
        values = [v for _, v in s.points if math.isfinite(v)]
        if values:  # a limit is configuration: its highest value of the day stands for the node
            limits[s.label("service")][s.label("node")] = max(values)
    rows = []
    for service in sorted(set(demand) & set(limits)):
        by_time = demand[service]
        at = min(by_time, key=lambda t: (-by_time[t], t))
        nodes = limits[service]
        largest = min(nodes, key=lambda n: (-nodes[n], n))
        capacity = sum(nodes.values())
        without = capacity - nodes[largest]
        rows.append(NMinusOne(service, len(nodes), by_time[at], at, capacity, largest, without,
                              by_time[at] <= without))
    return tuple(rows)
