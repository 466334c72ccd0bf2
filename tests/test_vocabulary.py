"""One vocabulary: layers bottom first, severities least first, the same words everywhere."""

from __future__ import annotations

import pytest

from analyzer.diagnosis.case import LOWER_LAYERS
from oximeter.vocabulary import LAYERS, SEVERITIES, SEVERITY_RANK, as_severity, priority
from reporter.message import Message
from simulator.scenario import LAYERS as SCENARIO_LAYERS


def test_layers_run_bottom_up() -> None:
    assert LAYERS[0] == "infrastructure" and LAYERS[-1] == "ingress"
    assert {"infrastructure", "platform", "engine", "dependency"} == LOWER_LAYERS
    assert (*LAYERS, "none") == SCENARIO_LAYERS


def test_severities_rank_least_first_and_the_reporter_speaks_them() -> None:
    assert SEVERITIES == ("info", "warning", "critical")
    assert SEVERITY_RANK["critical"] > SEVERITY_RANK["warning"] > SEVERITY_RANK["info"]
    assert [priority(s) for s in SEVERITIES] == ["P2", "P1", "P0"]
    assert Message("disk full", "critical").heading == "[P0] disk full"
    with pytest.raises(ValueError, match="unknown severity 'urgent'"):
        as_severity("urgent")
    with pytest.raises(ValueError, match="unknown severity"):
        Message.from_dict({"title": "t", "severity": "urgent"})
