"""Error-budget burn as the analyzer reads it, and the severity it gives an incident."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.burn import WINDOWS_S, Burn, CountBy, burn_specs, burns, fastest, grade, spec_name
from analyzer.diagnosis.burn_events import BURN_DETECTOR
from analyzer.diagnosis.case import BURN_SIGNAL, Diagnosis, RootCause, describe
from analyzer.diagnosis.correlate import Group
from analyzer.incidents.harm import graded
from analyzer.incidents.lifecycle import Finding
from analyzer.signals.query import select
from analyzer.signals.raw import RawStore
from analyzer.signals.slo import SloSettings

SLOS = SloSettings()  # availability 99.9 % (budget 0.001), queue wait within 1 s for 99 % (0.01)
N1 = (("node", "n1"), ("service", "chat"))
N2 = (("node", "n2"), ("service", "chat"))


def _snapshot(bad: dict[tuple[tuple[str, str], ...], dict[str, float]], total: float = 1000.0,
              ) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Availability counts per entity: ``bad[entity][window]`` bad answers of ``total`` in each window."""
    snap: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for window in WINDOWS_S:
        snap[spec_name("requests", "availability", "counted", window)] = {
            labels: by_window.get(window, 0.0) for labels, by_window in bad.items()}
        snap[spec_name("requests", "availability", "all", window)] = {labels: total for labels in bad}
    return snap


def _burn(**rates: float) -> Burn:
    return Burn("requests", "availability", N1, {w: rates.get(f"w{w}", 0.0) for w in WINDOWS_S})


@pytest.mark.parametrize(("rates", "expected"), [
    # The workbook's pairs: both windows of a pair must burn at least the factor.
    ({"w1h": 14.4, "w5m": 14.4}, "critical"),
    ({"w1h": 14.4, "w5m": 2.0}, "info"),  # the fault has stopped: the short window says so
    ({"w6h": 6.0, "w30m": 6.0}, "critical"),
    ({"w6h": 6.0, "w30m": 5.9, "w3d": 1.0}, "warning"),
    ({"w3d": 1.0, "w6h": 1.0}, "warning"),
    ({"w3d": 0.99, "w6h": 50.0}, "info"),
    ({}, "info"),
])
def test_grade_follows_the_burn_rate_alerts(rates: dict[str, float], expected: str) -> None:
    assert grade(_burn(**rates), SLOS) == expected


def test_burns_divide_the_bad_share_by_the_budget_per_node() -> None:
    # 20 bad answers of 1000 is 2 %: twenty times a 0.1 % budget; n2's 0.5 of 1000 half of it.
    snap = _snapshot({N1: dict.fromkeys(WINDOWS_S, 20.0), N2: dict.fromkeys(WINDOWS_S, 0.5)})
    found = {b.labels: b for b in burns(snap, SLOS) if b.sli == "availability"}
    assert found[N1].rates["5m"] == pytest.approx(20.0)
    assert found[N2].rates["1h"] == pytest.approx(0.5)
    assert fastest(list(found.values()), SLOS) == ("critical", found[N1])


def test_a_node_without_requests_burns_nothing() -> None:
    assert fastest(burns(_snapshot({N1: {}}, total=0.0), SLOS), SLOS) == ("info", None)


def _finding(node: str, severity: str) -> Finding:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    event = AnomalyEvent("error_504_ratio", "ingress", (("node", node), ("service", "chat")), t, t, None,
                         0.5, 0.0, 9.0, "over its line", "threshold")
    diagnosis = Diagnosis("ingress_errors", "ingress", RootCause(event.signal, event.labels), "504s",
                          severity, "", ("error_504_ratio",))  # type: ignore[arg-type]
    return Finding(Group((event,), frozenset({("node", node)})), diagnosis, ("chat",))


@pytest.mark.parametrize(("node", "rule_severity", "expected"), [
    ("n1", "info", "critical"),  # n1's answers burn twenty times the budget: a page, whatever the rule says
    ("n2", "critical", "warning"),  # a rule's fixed line without a burn behind it: evidence, a ticket at most
    ("n2", "info", "info"),
])
def test_severity_is_the_fastest_burn_the_finding_harms(node: str, rule_severity: str, expected: str) -> None:
    snap = _snapshot({N1: dict.fromkeys(WINDOWS_S, 20.0), N2: dict.fromkeys(WINDOWS_S, 0.5)})
    [out] = graded([_finding(node, rule_severity)], burns(snap, SLOS), SLOS)
    assert out.diagnosis.severity == expected


def test_counts_are_the_same_query_on_prometheus_and_on_a_history() -> None:
    index = pd.date_range("2026-01-01", periods=11, freq="60s", tz="UTC")
    # Two instances of one node's 503s (summed), one of n2's; a reset on n2 half-way.
    values = np.array([np.arange(11) * 2.0, np.arange(11) * 1.0, np.r_[np.arange(6), np.arange(5)] * 3.0]).T
    labels = [{"node": "n1", "service": "chat", "instance": "a", "code": "503"},
              {"node": "n1", "service": "chat", "instance": "b", "code": "503"},
              {"node": "n2", "service": "chat", "instance": "c", "code": "503"}]
    store = RawStore(index, ["oximeter_requests_total"] * 3, labels, values.astype(np.float32))
    expr = CountBy(select("oximeter_requests_total", {"code": "~5.."}), 300.0)
    assert expr.promql == ('sum by (service, node) (increase(oximeter_requests_total{code=~"5.."}[5m]))')
    got = expr.evaluate(store)
    by_node = {lab["node"]: got.values[-1, i] for i, lab in enumerate(got.labels)}
    assert set(got.labels[0]) == {"node", "service"}
    assert by_node == {"n1": pytest.approx(15.0), "n2": pytest.approx(12.0)}


def test_every_objective_has_its_counts_for_every_window() -> None:
    specs = burn_specs(SLOS)
    # Availability and queue wait, counted and all, and the queue's oldest wait.
    assert len(specs) == 2 * len(WINDOWS_S) * 2 + 1
    within = specs[spec_name("requests", "queue_wait", "counted", "1h")]
    assert within.promql == ('sum by (service, node) (increase('
                             'oximeter_queue_wait_seconds_bucket{le=~"1(.0)?"}[1h]))')


def test_a_queue_whose_oldest_request_waited_past_the_threshold_a_whole_minute_pages() -> None:
    # 15 s scrapes: n1's queue stopped moving (its oldest request ages with the clock); n2's is busy
    # but moves: its oldest request is past the second every scrape, yet always a fresh one.
    index = pd.date_range("2026-01-01", periods=12, freq="15s", tz="UTC")
    stuck = np.arange(12) * 15.0
    draining = np.tile([1.2, 2.5, 1.4, 1.9], 3)
    labels = [{"node": node, "service": "chat", "model": "m"} for node in ("n1", "n2")]
    store = RawStore(index, ["oximeter_queue_oldest_wait_seconds"] * 2, labels,
                     np.array([stuck, draining]).T.astype(np.float32))
    spec = burn_specs(SLOS)[spec_name("requests", "queue_wait", "oldest", "1m")]
    assert spec.promql == ('max by (service, node) (min_over_time(oximeter_queue_oldest_wait_seconds[1m]))')
    assert spec.expr is not None
    got = spec.expr.evaluate(store)
    snap = {spec.name: {tuple(sorted(lab.items())): float(v) for lab, v in zip(got.labels, got.values[-1],
                                                                                strict=True)}}
    # No request finished on n1 for a minute: nothing counted, yet every waiting request is bad.
    found = {b.node: b for b in burns(snap, SLOS) if b.sli == "queue_wait"}
    assert found["n1"].stuck and grade(found["n1"], SLOS) == "critical"
    assert not found["n2"].stuck and grade(found["n2"], SLOS) == "info"
    assert fastest(list(found.values()), SLOS) == ("critical", found["n1"])


def test_a_finding_that_harms_no_one_and_needs_no_ticket_opens_nothing() -> None:
    snap = _snapshot({N1: dict.fromkeys(WINDOWS_S, 20.0), N2: dict.fromkeys(WINDOWS_S, 0.5)})
    found = [_finding("n2", "info"), _finding("n2", "warning"), _finding("n1", "info")]
    quiet, ticket, harmful = graded(found, burns(snap, SLOS), SLOS)
    assert (quiet.may_open, ticket.may_open, harmful.may_open) == (False, True, True)


def test_a_fast_burn_seen_on_its_short_window_alone_opens_a_ticket_until_the_long_ones_agree() -> None:
    # n1's last 5 minutes burn 60 times (a fault's onset); its hour does not yet: the workbook's
    # pairs say nothing, the finding holding the node's ``slo_burn`` event opens as a ticket.
    snap = _snapshot({N1: dict.fromkeys(WINDOWS_S, 0.5) | {"5m": 60.0}})
    t = datetime(2026, 1, 1, tzinfo=UTC)
    burn = AnomalyEvent(BURN_SIGNAL, "ingress", N1, t, t, None, 60.0, None, 60.0, "fast", BURN_DETECTOR)
    lone = Finding(Group((burn,), frozenset({("node", "n1")})),
                   Diagnosis("unclassified", "ingress", RootCause(BURN_SIGNAL, N1), "burns", "info", "",
                             (BURN_SIGNAL,)), ("chat",))
    [opened] = graded([lone], burns(snap, SLOS), SLOS)
    assert (opened.diagnosis.severity, opened.may_open) == ("warning", True)
    assert describe(burn) == "error budget burn 60×"  # as chat reads the opening
    # Once the burn has stopped (its event cleared), the same finding is quiet again.
    over = replace(lone, group=Group((replace(burn, cleared_at=t),), lone.group.nodes))
    [quiet] = graded([over], burns(snap, SLOS), SLOS)
    assert (quiet.diagnosis.severity, quiet.may_open) == ("info", False)
    # The long windows agreeing make it a page.
    [paged] = graded([lone], burns(_snapshot({N1: dict.fromkeys(WINDOWS_S, 20.0)}), SLOS), SLOS)
    assert paged.diagnosis.severity == "critical"
