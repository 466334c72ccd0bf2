"""Context-only symptoms (end-to-end p99) join incidents as impact but never open or root one."""

from __future__ import annotations

import pytest
from incident_cases import at, ev

from analyzer.events import AnomalyEvent
from analyzer.incidents import IncidentSettings, findings
from analyzer.topology import Topology, TopologySettings

TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0", "node-1"]}))
P99 = ev("request_p99", 15.6, 9.3, node="node-1", service="chat", route="/v1/chat/completions")
E504 = ev("error_504_ratio", 0.13, 0.01, onset=1, node="node-1", service="chat", route="/v1/chat/completions")


@pytest.mark.parametrize(("events", "expected"), [
    ([P99], []),
    ([P99, E504], [("ingress_errors", "error_504_ratio")]),
])
def test_context_only_signal(events: list[AnomalyEvent], expected: list[tuple[str, str]]) -> None:
    found = findings(events, TOPO, now=at(5), settings=IncidentSettings())
    assert [(f.diagnosis.rule, f.diagnosis.root_cause.signal) for f in found] == expected
