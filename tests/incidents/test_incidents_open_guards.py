"""No incident from a normal peak: what may open an incident, and what may be its root cause."""

from __future__ import annotations

from dataclasses import replace

import pytest
from incident_cases import at, ev

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Case
from analyzer.diagnosis.opening import distinct
from analyzer.diagnosis.rules import unclassified
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import IncidentSettings, IncidentTracker, findings


def _opened(events: list[AnomalyEvent]) -> list[str]:
    tracker = IncidentTracker(IncidentSettings())
    changes, _ = tracker.step(findings(events, Topology(), now=at(20)), at(20))
    assert len([c for c in changes if c.kind == "opened"]) == len(tracker.incidents)
    return [f"{i.rule}:{i.root_cause.signal}" for i in tracker.incidents]


def _as(detector: str, event: AnomalyEvent) -> AnomalyEvent:
    return replace(event, detector=detector)


@pytest.mark.parametrize(("events", "opened"), [
    # One p99 over its baseline, nothing else wrong, no rule: the noise of a peak.
    ([_as("baseline_ratio", ev("ttft_p99", 0.45, 0.2, node="n1", service="chat"))], []),
    # Two anomalous signals: enough without a rule.
    ([_as("baseline_ratio", ev("ttft_p99", 0.45, 0.2, node="n1", service="chat")),
      _as("baseline_ratio", ev("request_p99", 9.0, 3.0, node="n1", service="chat", route="/v1/chat"))],
     ["unclassified:ttft_p99"]),
    # One static-limit breach: enough too.
    ([_as("threshold", ev("queue_length", 30, 20, node="n1", service="chat"))],
     ["unclassified:queue_length"]),
    ([_as("threshold", ev("gpu_temperature", 88, 85, node="n1", gpu="0"))], ["unclassified:gpu_temperature"]),
    # A GPU busy at its daily peak is load, not a fault (98 % against its 95 % limit).
    ([_as("threshold", ev("gpu_utilization_p95", 0.98, 0.95, node="n2", gpu="0"))], []),
    # At about its baseline: the normal level, even with a second signal beside it.
    ([_as("robust_deviation", ev("queue_wait_p99", 0.204, 0.2, node="n1", service="chat")),
      _as("robust_deviation", ev("ttft_p99", 0.31, 0.3, node="n1", service="chat"))], []),
])
def test_what_may_open_an_incident(events: list[AnomalyEvent], opened: list[str]) -> None:
    assert _opened(events) == opened


@pytest.mark.parametrize(("detector", "value", "reference", "clear"), [
    ("baseline_ratio", 1.04, 1.0, False),
    ("baseline_ratio", 1.06, 1.0, True),
    ("drop", 0.94 / 1.04, 0.94, False),  # a hit rate a hair under its baseline
    ("peer_outlier", 1.2, 1.0, True),
    ("threshold", 0.96, 0.95, True),  # a static limit stands on its own
    ("counter_growth", 101, 100, True),
])
def test_distinct_from_its_reference(detector: str, value: float, reference: float, clear: bool) -> None:
    assert distinct(_as(detector, ev("queue_wait_p99", value, reference, node="n1"))) is clear


def test_an_anomaly_at_its_baseline_never_roots_an_unclassified_incident() -> None:
    flat = _as("robust_deviation", ev("gpu_utilization_peer", 0.98, 0.97, onset=1, node="n2", gpu="0"))
    real = _as("baseline_ratio", ev("ttft_p99", 0.9, 0.3, onset=5, node="n2", service="chat"))
    verdict = unclassified(Case((flat, real), frozenset({"n2"})))
    assert verdict.root_cause.signal == "ttft_p99"
