"""A node whose GPU telemetry cannot be read pages: the exporter keeps answering with
``oximeter_telemetry_up`` 0 for its node, and the time-scaled NodeTelemetryDown alert fires for
that node only, then resolves once the telemetry is back (later tests find a quiet stack again).
"""

from __future__ import annotations

from typing import Any

from shared_stack import SCALE

from alert_rules import load_groups, rule_files
from oximeter.inputs import parse_duration_s
from stack.local import Stack
from stack.procs import wait_until

ALERT = "NodeTelemetryDown"


def _rule_for_s(alert: str) -> float:
    """The alert's ``for``, as the rule files write it (the live stack divides it by SCALE)."""
    (rule,) = [r for path in rule_files() for g in load_groups(path) for r in g["rules"]
               if r.get("alert") == alert]
    return parse_duration_s(rule.get("for", "0s"))


# The scaled `for`, then evaluation and scrape intervals (1 s each here), many times over.
DEADLINE_S = 3 * _rule_for_s(ALERT) / SCALE + 60.0


def _alerts(stack: Stack) -> list[dict[str, Any]]:
    return [a for a in stack.alerts() if a["labels"]["alertname"] == ALERT]


def test_unreadable_telemetry_pages_for_its_node_only(live_stack: Stack) -> None:
    assert _alerts(live_stack) == []
    fault_id = live_stack.fault("telemetry_loss", "n2")
    try:
        wait_until(lambda: live_stack.query('oximeter_telemetry_up{node="n2"} == 0'), DEADLINE_S,
                   interval_s=0.5, what="n2's exporter reports telemetry_up 0")
        assert live_stack.query('oximeter_telemetry_up{node="n1"} == 1'), "n1 still reads its GPUs"
        wait_until(lambda: [a for a in _alerts(live_stack) if a["state"] == "firing"], DEADLINE_S,
                   interval_s=0.5, what=f"{ALERT} firing")
        assert [a["labels"]["node"] for a in _alerts(live_stack) if a["state"] == "firing"] == ["n2"]
    finally:
        live_stack.delete_fault(fault_id)
    wait_until(lambda: not _alerts(live_stack), DEADLINE_S, interval_s=0.5,
               what=f"{ALERT} resolved after the telemetry came back")
