"""Context-only symptoms (end-to-end p99) join incidents as impact but never open or root one;
which signals are context only is the configured catalogue's call (``analyzer.signals``)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from incident_cases import at, ev

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import IncidentSettings, findings
from analyzer.service.settings import AnalyzerSettings
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.spec import SignalSpec

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


# The catalogue the daemon builds from a config file: a built-in latency p99 switched to context
# only, and two user-added signals, one context only and one that opens (the default).
CONFIGURED = AnalyzerSettings.model_validate({"signals": {
    "ttft_p99": {"opens_incident": False},
    "rag_latency_p99": {"layer": "dependency", "kind": "latency", "promql": "rag_p99", "ratio": 1.5,
                        "opens_incident": False},
    "rag_errors": {"layer": "dependency", "kind": "ratio", "promql": "rag_errors", "threshold": 0.05},
}}).catalogue()
TTFT = ev("ttft_p99", 4.0, 1.0, node="node-1", service="chat")
QUEUE = ev("queue_length", 40.0, 2.0, onset=1, node="node-1", service="chat")
RAG = ev("rag_latency_p99", 0.9, 0.2, layer="dependency", node="node-1")
RAG_ERRORS = ev("rag_errors", 0.2, 0.01, layer="dependency", node="node-1")


@pytest.mark.parametrize(("events", "catalogue", "expected"), [
    ([TTFT], CATALOGUE, [("unclassified", "ttft_p99")]),  # built in, a lone TTFT p99 opens
    ([TTFT], CONFIGURED, []),
    ([RAG], CONFIGURED, []),
    ([RAG_ERRORS], CONFIGURED, [("unclassified", "rag_errors")]),
    ([TTFT, QUEUE], CATALOGUE, [("unclassified", "ttft_p99")]),
    ([TTFT, QUEUE], CONFIGURED, [("unclassified", "queue_length")]),  # context only: never the root
])
def test_the_configured_catalogue_decides_what_opens(events: list[AnomalyEvent],
                                                     catalogue: Mapping[str, SignalSpec],
                                                     expected: list[tuple[str, str]]) -> None:
    found = findings(events, TOPO, now=at(5), settings=IncidentSettings(), catalogue=catalogue)
    assert [(f.diagnosis.rule, f.diagnosis.root_cause.signal) for f in found] == expected
