"""On stock inputs every incident says which rules it was judged without (the gateway-only
signals), in the words ``oximeter config check`` uses; on Oximeter's own inputs it says nothing."""

from __future__ import annotations

import pytest
from incident_cases import T0, at, ev

from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentTracker, findings
from analyzer.service.incidents_cli import render
from analyzer.service.settings import AnalyzerSettings
from reporter.render import render_change
from reporter.settings import ReporterSettings

GATEWAY_ONLY = {"rejected_429_ratio", "error_504_ratio", "queue_limit_ratio", "retry_ratio",
                "empty_output_ratio", "upstream_stalled"}


@pytest.mark.parametrize(("inputs", "unjudged"), [("oximeter", set()), ("mixed", set()),
                                                   ("stock", GATEWAY_ONLY)])
def test_not_judged_names_the_gateway_only_signals(inputs: str, unjudged: set[str]) -> None:
    settings = AnalyzerSettings(inputs=inputs)  # type: ignore[arg-type]
    lines = settings.not_judged()
    named = {s for line in lines for s in line.rpartition("unavailable signals: ")[2].split(", ") if s}
    assert named == unjudged
    # The same lines `oximeter config check` prints, never a second wording; ECC is not the gateway's.
    assert set(lines) <= {m.removeprefix("analyzer.inputs: stock: ") for m in settings.missing_inputs()}
    assert all("only Oximeter's gateway" in line for line in lines)


def incident_change(incident: Incident, kind: str) -> Change:
    return Change(incident.id, kind, 1, T0, incident.severity, kind)  # type: ignore[arg-type]


def _opened(inputs: str) -> Incident:
    tracker = IncidentTracker(not_judged=AnalyzerSettings(inputs=inputs).not_judged())  # type: ignore[arg-type]
    found = findings([ev("gpu_temperature", 91, 70, node="node-0", gpu="0")], Topology(), now=at(3))
    _, touched = tracker.step(found, at(3))
    (incident,) = touched
    return incident


@pytest.mark.parametrize(("inputs", "said"), [("oximeter", False), ("stock", True)])
def test_an_incident_says_what_it_was_judged_without(inputs: str, said: bool) -> None:
    incident = _opened(inputs)
    assert any("rejected_429_ratio, error_504_ratio" in line for line in incident.not_judged) is said
    assert Incident.from_dict(incident.to_dict()) == incident  # kept by the store and the API
    assert ("not judged on these inputs:" in render(incident)) is said
    opened = render_change(incident_change(incident, "opened"), incident, ReporterSettings())
    sections = {s.title: s.body for s in opened.sections}
    assert ("only Oximeter's gateway" in sections.get("Not judged on these inputs", "")) is said
    assert ("docs/runbook.md#not_judged" in sections.get("Not judged on these inputs", "")) is said
    # Said once, when the incident opens; later messages of the same incident do not repeat it.
    later = render_change(incident_change(incident, "resolved"), incident, ReporterSettings())
    assert "Not judged on these inputs" not in {s.title for s in later.sections}
