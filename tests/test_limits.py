"""Limits named in generated files (``[[signal.field]]``) are filled with the catalogue's numbers."""

from __future__ import annotations

import pytest

from analyzer.service.limits import limits
from analyzer.signals.catalogue import build_catalogue
from analyzer.signals.recording_rules import render_alerts
from oximeter.limits import UnknownLimitError, fill, fill_data, ref

LIMITS = {"retry_ratio.threshold": 0.1, "queue_wait_p99.min_traffic": 50.0, "queue_wait_p99.threshold": 1.0}


@pytest.mark.parametrize(("text", "filled"), [
    ("x > [[queue_wait_p99.threshold]]", "x > 1"),
    ("More than [[retry_ratio.threshold * 100]] %", "More than 10 %"),  # 0.1 * 100, no float noise
    ("count >= [[ queue_wait_p99.min_traffic / 5 ]]", "count >= 10"),
    ("{{ $labels.node }} [5m] [5m:1m]", "{{ $labels.node }} [5m] [5m:1m]"),  # PromQL and Go templates pass
])
def test_fill(text: str, filled: str) -> None:
    assert fill(text, LIMITS) == filled


def test_fill_data_writes_a_whole_placeholder_as_its_number() -> None:
    data = {"steps": [{"value": ref("queue_wait_p99.threshold")}, {"value": ref("retry_ratio.threshold")}],
            "title": "wait over [[queue_wait_p99.threshold]] s"}
    assert fill_data(data, LIMITS) == {"steps": [{"value": 1}, {"value": 0.1}], "title": "wait over 1 s"}


def test_an_unknown_limit_is_named() -> None:
    with pytest.raises(UnknownLimitError, match=r"x.yml: \[\[gpu_temperature.threshold\]\] names no limit"):
        fill("t > [[gpu_temperature.threshold]]", LIMITS, "x.yml")
    with pytest.raises(ValueError, match="not a limit name"):
        ref("threshold")


def test_an_override_that_removes_an_alerts_limit_fails_the_build() -> None:
    """An alert cannot silently keep a number the configuration took away from its signal."""
    with pytest.raises(UnknownLimitError, match=r"scheduling.rules.yml: \[\[queue_wait_p99.threshold\]\]"):
        render_alerts(limits(build_catalogue({"queue_wait_p99": {"threshold": None}})))
