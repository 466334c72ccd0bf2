"""One vocabulary: layers bottom first, severities least first, the same words everywhere."""

from __future__ import annotations

from analyzer.diagnosis import LOWER_LAYERS
from oximeter.vocabulary import LAYERS, SEVERITIES, SEVERITY_RANK
from reporter.message import Severity
from simulator.scenario import LAYERS as SCENARIO_LAYERS


def test_layers_run_bottom_up() -> None:
    assert LAYERS[0] == "infrastructure" and LAYERS[-1] == "ingress"
    assert {"infrastructure", "platform", "engine", "dependency"} == LOWER_LAYERS
    assert (*LAYERS, "none") == SCENARIO_LAYERS


def test_severities_rank_least_first_and_the_reporter_speaks_them() -> None:
    assert SEVERITIES == ("info", "warning", "critical")
    assert SEVERITY_RANK["critical"] > SEVERITY_RANK["warning"] > SEVERITY_RANK["info"]
    assert {s.value for s in Severity} == set(SEVERITIES)
    assert max(Severity, key=SEVERITY_RANK.__getitem__) is Severity.CRITICAL
