"""Error-budget burn per service and node, as the analyzer reads it: the bad and all requests of each
SLO indicator over the burn-rate alerts' windows, and the grade they give (page, ticket or none).

The counts are the generated rules' error ratios (``analyzer/signals/slo_rules.py``) split by node as well
as service, so the analyzer can tell which replica spends the budget: each window's share of bad
requests over its error budget is its burn rate (1: the budget lasts exactly the objective's
window). A page needs a long window and its short one both at or past a fast burn (1 h and 5 min
at ``page_fast_burn``, or 6 h and 30 min at ``page_slow_burn``); a ticket, the 3-day and 6 h
windows at ``ticket_burn``. On a history shorter than a window, the window holds what there is, as
Prometheus's ``increase`` over a range longer than its samples does.

A stuck queue finishes no request, so no count sees it: where the gateway exports the age of its
oldest waiting request (and of the oldest admitted one without a first byte), an age that stayed
beyond a queue-wait (time-to-first-token) objective's threshold, and beyond half a minute, for a
whole minute is every waiting request bad, and pages like the fastest burn. (A busy queue that
moves has a new oldest request every few seconds; a gateway that times waits out at a minute
keeps a stuck queue's oldest age near that minute.)

The same expressions run on Prometheus (their PromQL) and on a replayed history (evaluated here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzer.detection.detectors.counter import counter_increase
from analyzer.diagnosis.case import Labels, Snapshot
from analyzer.signals import query as q
from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.slo import HISTOGRAMS, Objective, SloSettings
from analyzer.signals.slo_rules import FAST_PAGE, SLOW_PAGE, TICKET_PAIR, WINDOWS, indicators
from analyzer.signals.spec import SignalSpec
from oximeter.inputs import parse_duration_s
from oximeter.vocabulary import SEVERITY_RANK, Severity

# The windows the burn-rate alerts compare, in seconds (the rules' 5m, 30m, 1h, 6h and 3d).
WINDOWS_S: dict[str, float] = {w: parse_duration_s(w, "burn window") for w in WINDOWS}
# Each entity a burn is read for: the service, and the node its requests were served on.
BY = ("service", "node")
# The model list that clients and the gateway's warm-up poll is no request served.
_SERVED = ("route", "!/v1/models")


@dataclass(frozen=True)
class CountBy(q.Expr):
    """``sum by (<by>) (increase(series[window]))``: a counter's increase per entity."""

    series: q.Selector
    window_s: float
    by: tuple[str, ...] = BY

    @property
    def promql(self) -> str:
        """The summed increase, kept by entity."""
        return f"sum by ({', '.join(self.by)}) (increase({self.series.promql}[{q.duration(self.window_s)}]))"

    def evaluate(self, store: RawStore) -> Labeled:
        """Reset-safe increase per raw series, summed by entity."""
        raw = self.series.evaluate(store)
        if not raw.labels:
            return raw
        inc = counter_increase(pd.DataFrame(raw.values, index=store.index), self.window_s).to_numpy()
        others = tuple(sorted({k for lab in raw.labels for k in lab} - set(self.by)))
        return q.aggregate(Labeled(inc, raw.labels), others, "sum")


# The age of the oldest request each latency indicator waits on, where the gateway exports one.
OLDEST: dict[str, str] = {"queue_wait": "oximeter_queue_oldest_wait_seconds",
                          "ttft": "oximeter_upstream_oldest_unanswered_seconds"}
# How long the oldest request's age must stay beyond the threshold: the queue has not moved since.
STUCK_S = 60.0
# The least age that says stuck whatever the threshold: no request waits that long in a queue that
# moves, and a single sample of a second's wait (one scrape of a busy queue) is not a stall.
STUCK_AGE_S = 30.0


@dataclass(frozen=True)
class LeastBy(q.Expr):
    """``max by (<by>) (min_over_time(series[window]))``: the least a gauge was over the window,
    its highest per entity."""

    series: q.Selector
    window_s: float
    by: tuple[str, ...] = BY

    @property
    def promql(self) -> str:
        """The rolling minimum, kept by entity."""
        return (f"max by ({', '.join(self.by)}) "
                f"(min_over_time({self.series.promql}[{q.duration(self.window_s)}]))")

    def evaluate(self, store: RawStore) -> Labeled:
        """Rolling minimum per raw series, the highest per entity."""
        data = q.OverTime(self.series, self.window_s, 0.0).evaluate(store)
        others = tuple(sorted({k for lab in data.labels for k in lab} - set(self.by)))
        return q.aggregate(data, others, "max")


def _le(threshold_s: float) -> str:
    # A whole bound is "1" from Prometheus 3 and "1.0" from client libraries (slo_rules' _le); the
    # dot unescaped, as the matcher is written into PromQL as it stands.
    return f"~{int(threshold_s)}(.0)?" if threshold_s.is_integer() else f"{threshold_s!r}"


def _scope(objective: Objective) -> dict[str, str]:
    return {k: v for k, v in (("service", objective.service), ("model", objective.model)) if v}


def selectors(objective: Objective, sli: str) -> tuple[q.Selector, q.Selector, bool]:
    """``(counted, all, counted_is_bad)``: a latency indicator counts the requests within its
    threshold, availability the bad answers."""
    scope = _scope(objective)
    if sli == "availability":
        assert objective.availability is not None
        metric = "oximeter_requests_total"
        bad = {"code": f"~{objective.availability.code_regex()}", _SERVED[0]: _SERVED[1], **scope}
        return q.select(metric, bad), q.select(metric, {_SERVED[0]: _SERVED[1], **scope}), True
    latency = next(lat for lat in objective.latency if lat.indicator == sli)
    metric = HISTOGRAMS[sli].metric
    served = dict([_SERVED]) if sli == "request_duration" else {}
    within = q.select(f"{metric}_bucket", {"le": _le(latency.threshold_s), **served, **scope})
    return within, q.select(f"{metric}_count", {**served, **scope}), False


def spec_name(objective: str, sli: str, part: str, window: str) -> str:
    """The name a burn count is fetched and snapshotted under."""
    return f"slo:{objective}:{sli}:{part}:{window}"


def burn_specs(slos: SloSettings) -> dict[str, SignalSpec]:
    """Every count a burn is read from: per objective, indicator and window, the requests counted
    and all requests, by service and node."""
    out: dict[str, SignalSpec] = {}
    for objective in slos.objectives:
        for sli, _target, _bad in indicators(objective):
            counted, every, _ = selectors(objective, sli)
            for window, seconds in WINDOWS_S.items():
                for part, selector in (("counted", counted), ("all", every)):
                    name = spec_name(objective.name, sli, part, window)
                    out[name] = SignalSpec.of(CountBy(selector, seconds), name=name, layer="ingress",
                                              kind="gauge", entity_labels=BY)
            if sli in OLDEST:
                name = spec_name(objective.name, sli, "oldest", "1m")
                oldest = LeastBy(q.select(OLDEST[sli], _scope(objective)), STUCK_S)
                out[name] = SignalSpec.of(oldest, name=name, layer="ingress", kind="gauge", entity_labels=BY)
    return out


@dataclass(frozen=True)
class Burn:
    """One indicator's burn rates on one entity (service and node), by window; NaN: no requests."""

    slo: str
    sli: str
    labels: Labels
    rates: Mapping[str, float]
    # One minus the target: the share of bad requests the window allows.
    budget: float = 1.0
    # The oldest waiting request's age, at least, over the last minute, where the gateway exports
    # it; past the objective's threshold the queue is stuck (``stuck``).
    oldest_s: float = 0.0
    threshold_s: float = math.inf
    # The bad requests each window counted (how many the rate rests on).
    bad: Mapping[str, float] = field(default_factory=dict)

    @property
    def stuck(self) -> bool:
        """Whether the oldest waiting request stayed past the threshold (and half a minute) for a minute."""
        return self.oldest_s >= max(self.threshold_s, STUCK_AGE_S)

    @property
    def service(self) -> str:
        """The service the requests were for."""
        return dict(self.labels).get("service", "")

    @property
    def node(self) -> str:
        """The node that served them ('' when the series name none)."""
        return dict(self.labels).get("node", "")

    def both(self, long: str, short: str) -> float:
        """The burn both windows show (the lower of the two); 0 without requests."""
        pair = [self.rates.get(long, math.nan), self.rates.get(short, math.nan)]
        return min(pair) if all(math.isfinite(v) for v in pair) else 0.0


def grade(burn: Burn, slos: SloSettings) -> Severity:
    """``critical`` (page), ``warning`` (ticket) or ``info``, by the burn-rate alerts' rule; a
    stuck queue pages."""
    if burn.stuck:
        return "critical"
    if burn.both(*FAST_PAGE) >= slos.page_fast_burn or burn.both(*SLOW_PAGE) >= slos.page_slow_burn:
        return "critical"
    if burn.both(*TICKET_PAIR) >= slos.ticket_burn:
        return "warning"
    return "info"


def headline(burn: Burn, slos: SloSettings) -> float:
    """The burn a reader is told: that of the fastest pair of windows the grade rests on (the
    1 h and 5 min pair when nothing fires)."""
    if burn.stuck:  # every waiting request is bad: the whole share, over the budget
        return 1.0 / burn.budget
    pairs = {"critical": (FAST_PAGE, SLOW_PAGE), "warning": (TICKET_PAIR,)}
    return max(burn.both(*pair) for pair in pairs.get(grade(burn, slos), (FAST_PAGE,)))


def _counts(snapshot: Snapshot, name: str) -> dict[Labels, float]:
    return {tuple((k, v) for k, v in labels if k in BY): value
            for labels, value in snapshot.get(name, {}).items()}


def burns(snapshot: Snapshot, slos: SloSettings) -> list[Burn]:
    """Every indicator's burn on every entity the snapshot has counts for (``burn_specs``' series)."""
    out = []
    for objective in slos.objectives:
        thresholds: dict[str, float] = {lat.indicator: lat.threshold_s for lat in objective.latency}
        for sli, target, _bad in indicators(objective):
            budget = 1.0 - target
            counted_is_bad = selectors(objective, sli)[2]
            rates: dict[Labels, dict[str, float]] = {}
            counts: dict[Labels, dict[str, float]] = {}
            for window in WINDOWS_S:
                counted = _counts(snapshot, spec_name(objective.name, sli, "counted", window))
                every = _counts(snapshot, spec_name(objective.name, sli, "all", window))
                for labels, total in every.items():
                    part = counted.get(labels, 0.0 if counted_is_bad else math.nan)
                    bad = part if counted_is_bad else total - part
                    ratio = min(max(bad / total, 0.0), 1.0) if total > 0 and math.isfinite(bad) else math.nan
                    rates.setdefault(labels, {})[window] = ratio / budget
                    counts.setdefault(labels, {})[window] = bad if math.isfinite(bad) else 0.0
            oldest = _counts(snapshot, spec_name(objective.name, sli, "oldest", "1m"))
            for labels in oldest.keys() - rates.keys():  # a queue so stuck that nothing has finished
                rates[labels] = dict.fromkeys(WINDOWS_S, math.nan)
            out += [Burn(objective.name, sli, labels, by_window, budget, oldest.get(labels, 0.0),
                         thresholds.get(sli, math.inf), counts.get(labels, {}))
                    for labels, by_window in sorted(rates.items())]
    return out


def fastest(found: list[Burn], slos: SloSettings) -> tuple[Severity, Burn | None]:
    """The highest grade among ``found`` and the burn that gives it (the fastest such), or
    ``("info", None)`` when none burns at all."""
    best: tuple[int, float, Burn] | None = None
    for burn in found:
        rank, rate = SEVERITY_RANK[grade(burn, slos)], headline(burn, slos)
        if not np.isfinite(rate) or rate <= 0:
            continue
        if best is None or (rank, rate) > best[:2]:
            best = (rank, rate, burn)
    if best is None:
        return "info", None
    return grade(best[2], slos), best[2]
