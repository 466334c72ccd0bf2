"""The daily health digest: yesterday's numbers, collected from Prometheus, never by hand.

Three numbers with their colours: the largest queue length
(red over 50), the top-3 routes by 504, and the spread of GPU utilisation across the fleet,
``avg_over_time(stddev(oximeter_gpu_utilization_ratio)[1d:1m])`` (yellow over 0.30). Then each
service's peak use of its limits and whether the fleet could lose a node at its peak
(``reporter/digest_capacity.py``), incidents by layer and rule with MTTD/MTTR from the store, SLO
attainment and error budget left (TTFT p99 and availability), each SLO's budget left and burn
over the day (``reporter/digest_budget.py``), the noisiest signals of the day, GPU health by node
and a chart.

Counter totals are exact: the day's samples are fetched at a one-minute step and their increase
summed in Python (a reset counts from zero), rather than ``increase()``, which extrapolates to the
window's edges and would not match the day's ground truth.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo

from analyzer.incidents.model import Incident
from analyzer.incidents.store import IncidentQuery, IncidentStore
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.slo import SloSettings
from analyzer.signals.spec import SignalSpec
from reporter.digest_budget import BudgetRow, budget_rows, burn_chart
from reporter.digest_capacity import Headroom, NMinusOne, headroom, n_minus_one, placement
from reporter.digest_growth import Growth, growth
from reporter.prom import PromQuery, increases
from reporter.settings import DigestSettings

STEP_S = 60.0  # the contract's 1m resolution
CHART_STEP_S = 300.0
THROTTLE_REASONS = 'reason!="idle"'
# The chart's panels of catalogue signals (reporter/chart.py draws each one's limit across it).
CHART_SIGNALS = {"queue_wait_p99_s": "queue_wait_p99", "ratio_504": "error_504_ratio"}
# The analyzer's own gauge (scraped from its /metrics): how many anomaly events each signal has open.
ANOMALIES = "max by (signal, layer) (oximeter_anomalies_active)"
# The analyzer's own too: per signal, how many series have no same-time baseline yet; the newest
# value of the day's last hour (the analyzer may be scraped every few minutes).
LEARNING = "max by (signal) (last_over_time(oximeter_series_learning[1h]))"


def zone(name: str | None) -> tzinfo:
    """The configured IANA zone, or the host's local zone."""
    if name:
        return ZoneInfo(name)
    local = datetime.now().astimezone().tzinfo
    assert local is not None
    return local


def day_bounds(day: date, tz: tzinfo) -> tuple[datetime, datetime]:
    """Local midnight to the next local midnight, in UTC (23 or 25 hours apart on DST days).

    In UTC because Python subtracts two times of one zone as wall-clock times, ignoring DST.
    """
    start = datetime.combine(day, time(0), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return start.astimezone(UTC), end.astimezone(UTC)


def colour(value: float | None, threshold: float, over: str) -> str:
    """``over`` (red/yellow) when ``value`` exceeds ``threshold``, ``green`` below, ``none`` unknown."""
    if value is None or not math.isfinite(value):
        return "none"
    return over if value > threshold else "green"


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile`` over cumulative ``(le, count)`` pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][0] != math.inf or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank:
            if le == math.inf:
                return buckets[i - 1][0] if i > 0 else None
            if i == 0 and le <= 0:
                return le
            return prev_le + (le - prev_le) * ((rank - prev_count) / (count - prev_count))
        prev_le, prev_count = le, count
    return None


@dataclass(frozen=True)
class ServiceRow:
    """One service's day: how many requests it answered and how fast the slowest started (its
    objectives and their budgets are the digest's error budgets, from the ``slos:`` section)."""

    service: str
    requests: float
    ttft_p99_s: float | None


@dataclass(frozen=True)
class GpuHealth:
    """One node's GPUs over the day."""

    node: str
    ecc_corrected: float
    ecc_uncorrected: float
    xid: tuple[tuple[str, float], ...]
    throttled_minutes: float


@dataclass(frozen=True)
class NoisySignal:
    """How much one signal spoke during the day: minutes with an anomaly open, and incidents it was in."""

    signal: str
    layer: str
    anomalous_minutes: float
    peak_events: float  # most anomaly events of this signal open at once
    incidents: int
    max_ratio: float | None  # largest value / baseline among its incident evidence


@dataclass(frozen=True)
class Digest:
    """Everything the digest shows, as numbers (rendered by ``to_markdown`` and ``to_message``)."""

    day: date
    start: datetime
    end: datetime
    max_queue_length: float | None
    max_queue_where: str
    queue_colour: str
    top_504_routes: tuple[tuple[str, float], ...]
    gpu_spread: float | None
    spread_colour: str
    incidents: int
    by_layer: tuple[tuple[str, int], ...]
    by_rule: tuple[tuple[str, int], ...]
    mttd_s: float | None
    mttr_s: float | None
    services: tuple[ServiceRow, ...]
    gpu_health: tuple[GpuHealth, ...]
    headroom: tuple[Headroom, ...] = ()
    n_minus_one: tuple[NMinusOne, ...] = ()
    noisy_signals: tuple[NoisySignal, ...] = ()
    budgets: tuple[BudgetRow, ...] = ()  # each SLO's burn over the day and budget left, per service
    growth: tuple[Growth, ...] = ()  # steady rises over the day toward a capacity (leaks), with their dates
    # Signals with series still learning at the day's end (the analyzer's ``oximeter_series_learning``):
    # judged against their recent window alone until they have a day of history.
    learning: tuple[tuple[str, float], ...] = ()
    simulated_nodes: tuple[str, ...] = ()  # nodes whose exporter said ``oximeter_simulation_info``
    chart: dict[str, list[tuple[float, float]]] = field(default_factory=dict, compare=False)


def _sum_by(rows: Iterable[tuple[dict[str, str], float]], *keys: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, value in rows:
        out[tuple(labels.get(k, "") for k in keys)] += value
    return dict(out)


def _services(requests: list[tuple[dict[str, str], float]], ttft: list[tuple[dict[str, str], float]]
              ) -> tuple[ServiceRow, ...]:
    services = sorted({labels.get("service", "") for labels, _ in requests})
    rows = []
    for service in services:
        total = sum(v for labels, v in requests if labels.get("service", "") == service)
        buckets = _sum_by(((labels, v) for labels, v in ttft if labels.get("service", "") == service), "le")
        pairs = [(float(le[0]), count) for le, count in buckets.items()]
        rows.append(ServiceRow(service, total, histogram_quantile(0.99, pairs)))
    return tuple(rows)


def _incidents(store: IncidentStore | None, start: datetime, end: datetime
               ) -> list[Incident]:
    if store is None:
        return []
    since = max(end, datetime.now(start.tzinfo)) - start
    found = store.query(IncidentQuery(since=since, limit=10_000), max(end, datetime.now(start.tzinfo)))
    return [i for i in found if i.first_onset < end and (i.resolved_at is None or i.resolved_at >= start)]


def _gpu_health(prom: PromQuery, start: datetime, end: datetime) -> tuple[GpuHealth, ...]:
    ecc = _sum_by(increases(prom.range("oximeter_gpu_ecc_errors_total", start, end, STEP_S)), "node", "kind")
    xid = _sum_by(increases(prom.range("oximeter_gpu_xid_errors_total", start, end, STEP_S)), "node", "xid")
    throttled = prom.range(f"max by (node, gpu) (oximeter_gpu_clock_event_active{{{THROTTLE_REASONS}}})",
                           start, end, STEP_S)
    minutes: dict[str, float] = defaultdict(float)
    for s in throttled:
        minutes[s.label("node")] += sum(STEP_S / 60 for _, v in s.points if v >= 1)
    nodes = sorted({k[0] for k in ecc} | {k[0] for k in xid} | set(minutes))
    return tuple(GpuHealth(
        node, ecc.get((node, "corrected"), 0.0), ecc.get((node, "uncorrected"), 0.0),
        tuple(sorted(((x, v) for (n, x), v in xid.items() if n == node and v > 0), key=lambda p: int(p[0])
                     if p[0].isdigit() else 0)),
        minutes.get(node, 0.0)) for node in nodes)


def _noisy(prom: PromQuery, start: datetime, end: datetime, incidents: list[Incident],
           top: int) -> tuple[NoisySignal, ...]:
    minutes: dict[tuple[str, str], float] = defaultdict(float)
    peak: dict[tuple[str, str], float] = defaultdict(float)
    for s in prom.range(ANOMALIES, start, end, STEP_S):
        key = (s.label("signal"), s.label("layer"))
        for _, v in s.points:
            if math.isfinite(v) and v > 0:
                minutes[key] += STEP_S / 60
                peak[key] = max(peak[key], v)
    counted: dict[tuple[str, str], int] = defaultdict(int)
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for inc in incidents:
        for key in {(e.signal, e.layer) for e in inc.evidence}:
            counted[key] += 1
        for e in inc.evidence:
            if e.baseline:
                ratios[(e.signal, e.layer)].append(e.value / e.baseline)
    rows = [NoisySignal(signal, layer, minutes.get((signal, layer), 0.0), peak.get((signal, layer), 0.0),
                        counted.get((signal, layer), 0), max(ratios[(signal, layer)], default=None))
            for signal, layer in set(minutes) | set(counted)]
    rows.sort(key=lambda r: (-r.anomalous_minutes, -r.incidents, r.signal, r.layer))
    return tuple(rows[:top])


def worst(spec: SignalSpec) -> str:
    """The signal's largest value across its entities, where its traffic guard holds: one line to
    draw against the limit it is judged by (the signal's own query, so per node and route)."""
    query = spec.promql
    if spec.min_traffic is not None:
        query = f"({query}) and ({spec.min_traffic.promql}) >= {spec.min_traffic.minimum:g}"
    return f"max({query})"


def _chart(prom: PromQuery, start: datetime, end: datetime,
           catalogue: Mapping[str, SignalSpec]) -> dict[str, list[tuple[float, float]]]:
    exprs = {key: worst(catalogue[signal]) for key, signal in CHART_SIGNALS.items()}
    exprs["gpu_utilization"] = "avg(oximeter_gpu_utilization_ratio)"
    out = {}
    for name, expr in exprs.items():
        result = prom.range(expr, start, end, CHART_STEP_S)
        out[name] = [(t, v) for t, v in (result[0].points if result else ()) if math.isfinite(v)]
    return out


def collect(prom: PromQuery, store: IncidentStore | None, day: date, settings: DigestSettings,
            *, with_chart: bool = True, catalogue: Mapping[str, SignalSpec] = CATALOGUE,
            slos: SloSettings | None = None) -> Digest:
    """Query yesterday (``day``) from Prometheus and the store (``catalogue``: the signals the chart
    draws, with the configuration's overrides; ``slos``: the objectives whose budgets it shows, the
    configuration's defaults when None)."""
    slos = slos or SloSettings()
    start, end = day_bounds(day, zone(settings.timezone))
    span = f"{int((end - start).total_seconds())}s"
    queue = prom.instant(f"max by (service, node) (max_over_time(oximeter_queue_length[{span}]))", end)
    top_queue = max(queue, key=lambda s: s.last, default=None)
    max_queue = top_queue.last if top_queue is not None else None
    where = ",".join(f"{k}={v}" for k, v in top_queue.labels) if top_queue is not None else "-"
    spread_result = prom.instant(f"avg_over_time(stddev(oximeter_gpu_utilization_ratio)[{span}:1m])", end)
    spread = spread_result[0].last if spread_result else None
    requests = increases(prom.range("oximeter_requests_total", start, end, STEP_S))
    routes = _sum_by(((labels, v) for labels, v in requests if labels.get("code") == "504"), "route")
    top_routes = sorted(((k[0], v) for k, v in routes.items() if v > 0), key=lambda p: (-p[1], p[0]))[:3]
    ttft = increases(prom.range("oximeter_time_to_first_token_seconds_bucket", start, end, STEP_S))
    incidents = _incidents(store, start, end)
    by_layer = _sum_by((({"layer": i.layer}, 1.0) for i in incidents), "layer")
    by_rule = _sum_by((({"rule": i.rule}, 1.0) for i in incidents), "rule")
    detect = [(i.opened_at - i.first_onset).total_seconds() for i in incidents]
    repair = [(i.resolved_at - i.first_onset).total_seconds() for i in incidents if i.resolved_at]
    return Digest(
        day=day, start=start, end=end, max_queue_length=max_queue, max_queue_where=where,
        queue_colour=colour(max_queue, settings.queue_length_red, "red"),
        top_504_routes=tuple(top_routes), gpu_spread=spread,
        spread_colour=colour(spread, settings.gpu_spread_yellow, "yellow"),
        incidents=len(incidents), by_layer=tuple((k[0], int(v)) for k, v in sorted(by_layer.items())),
        by_rule=tuple((k[0], int(v)) for k, v in sorted(by_rule.items())),
        mttd_s=sum(detect) / len(detect) if detect else None,
        mttr_s=sum(repair) / len(repair) if repair else None,
        services=_services(requests, ttft),
        gpu_health=_gpu_health(prom, start, end),
        headroom=headroom(prom, start, end, STEP_S, placement(prom, start, end)),
        n_minus_one=n_minus_one(prom, start, end, STEP_S),
        noisy_signals=_noisy(prom, start, end, incidents, settings.top_signals),
        budgets=budget_rows(prom, slos, start, end, STEP_S),
        growth=growth(prom, catalogue, start, end, STEP_S),
        learning=tuple(sorted(((s.label("signal"), s.last) for s in prom.instant(LEARNING, end)
                               if math.isfinite(s.last) and s.last > 0), key=lambda p: (-p[1], p[0]))),
        simulated_nodes=tuple(sorted({s.label("node") for s in prom.instant(
            f"max by (node) (max_over_time(oximeter_simulation_info[{span}]))", end) if s.last >= 1})),
        chart={**_chart(prom, start, end, catalogue), **burn_chart(prom, slos, start, end, CHART_STEP_S)}
        if with_chart else {})
