"""The digest's error budgets: per objective, indicator and service, the day's bad requests, the
burn they are (the day's bad share over the budget: 1 spends the budget exactly as fast as its
window allows) and the budget left over the objective's window ending with the day; and the day's
1 h burn per objective for the chart.

The requests are those the analyzer's burn rates count (``analyzer/diagnosis/burn.py``'s selectors, so
the digest, the analyzer and the generated rules agree on what is bad). The day's counts are
exact (summed from one-minute samples, as the rest of the digest); the window's come from
Prometheus's ``increase`` over it, all that Prometheus keeps of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from analyzer.diagnosis.burn import selectors
from analyzer.signals.query import duration
from analyzer.signals.slo import DAY_S, SloSettings
from analyzer.signals.slo_rules import indicators
from reporter.prom import PromQuery, increases

CHART_PREFIX = "burn "  # the chart's burn lines: "burn <objective>/<indicator>"


@dataclass(frozen=True)
class BudgetRow:
    """One indicator of one objective on one service, over the day and over its window."""

    slo: str
    sli: str
    service: str
    target: float
    requests: float
    bad: float
    # The day's bad share over the budget; None without requests.
    day_burn: float | None
    # The share of the window's budget not yet spent (negative when overspent); None without requests.
    budget_left: float | None
    window_days: float


def _by_service(series: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in series:
        out[labels.get("service", "")] = out.get(labels.get("service", ""), 0.0) + value
    return out


def budget_rows(prom: PromQuery, slos: SloSettings, start: datetime, end: datetime,
                step_s: float) -> tuple[BudgetRow, ...]:
    """Every objective's indicators per service, over the day [start, end) and the window ending then."""
    rows = []
    for objective in slos.objectives:
        window = f"{duration(objective.window_s)}"
        for sli, target, _bad in indicators(objective):
            budget = 1.0 - target
            counted, every, counted_is_bad = selectors(objective, sli)
            day_counted = _by_service(increases(prom.range(counted.promql, start, end, step_s)))
            day_all = _by_service(increases(prom.range(every.promql, start, end, step_s)))
            span = {name: _by_service([(dict(s.labels), s.last) for s in prom.instant(
                        f"sum by (service) (increase({sel.promql}[{window}]))", end)])
                    for name, sel in (("counted", counted), ("all", every))}
            for service in sorted(day_all):
                total = day_all[service]
                part = day_counted.get(service, 0.0)
                bad = part if counted_is_bad else total - part
                span_all = span["all"].get(service, 0.0)
                span_part = span["counted"].get(service, 0.0)
                span_bad = span_part if counted_is_bad else span_all - span_part
                left = None if span_all <= 0 or not math.isfinite(span_bad) else \
                    1.0 - span_bad / span_all / budget
                rows.append(BudgetRow(objective.name, sli, service, target, total, max(bad, 0.0),
                                      max(bad, 0.0) / total / budget if total > 0 else None, left,
                                      objective.window_s / DAY_S))
    return tuple(rows)


def burn_chart(prom: PromQuery, slos: SloSettings, start: datetime, end: datetime,
               step_s: float) -> dict[str, list[tuple[float, float]]]:
    """Each indicator's 1 h burn over the day, all services together (``burn <objective>/<sli>``)."""
    out = {}
    for objective in slos.objectives:
        for sli, target, _bad in indicators(objective):
            counted, every, counted_is_bad = selectors(objective, sli)
            share = f"sum(increase({counted.promql}[1h])) / sum(increase({every.promql}[1h]))"
            bad = share if counted_is_bad else f"(1 - {share})"
            result = prom.range(f"{bad} / {1.0 - target:.6g}", start, end, step_s)
            out[f"{CHART_PREFIX}{objective.name}/{sli}"] = [
                (t, v) for t, v in (result[0].points if result else ()) if math.isfinite(v)]
    return out
