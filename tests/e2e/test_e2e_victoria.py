"""The same analyzer configuration against VictoriaMetrics single-node finds the same thermal
incident: the PromQL source is not tied to Prometheus.

VictoriaMetrics scrapes the shared stack's targets with the Prometheus job definitions and has no
rule engine, so the analyzer reads every signal through its raw-PromQL fallback. It has no history
either: baselines are absent and the static thresholds judge. It watches the faults that
``conftest.py`` injected (``victoria`` fixture), from before they started.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import Faults, Victoria, incidents, new_incidents
from shared_stack import live_timeout_s, open_deadline_s

from stack.local import Stack
from stack.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(live_timeout_s(open_deadline_s("gpu_temperature", "gpu_sm_clock_ratio")))
def test_victoria_metrics_finds_the_thermal_incident(live_stack: Stack, faults: Faults,
                                                     victoria: Victoria) -> None:
    api, before = victoria.api, faults.victoria_before
    (got,) = wait_until(lambda: new_incidents(api, before, layer="infrastructure", node="n1", gpu="1"),
                        open_deadline_s("gpu_temperature", "gpu_sm_clock_ratio"), interval_s=1.0,
                        what="the thermal incident read from VictoriaMetrics")
    assert got["rule"] == "thermal_throttle", got
    # One incident for n1's fault; the stall on n2 may have its own, nothing else opened.
    mine = [i for i in incidents(api) if i["id"] not in before]
    assert [i["id"] for i in mine if i["root_cause"]["labels"].get("node") == "n1"] == [got["id"]], mine
    assert {i["root_cause"]["labels"].get("node") for i in mine} <= {"n1", "n2"}, mine
    print(f"victoria-metrics: thermal incident after {time.monotonic() - faults.t0:.0f} s ({got['rule']})")
    assert victoria.sink.problems == []
    victoria.stop()  # the faults were injected with it watching; nothing after this test reads it
