"""Issue 4, must show 5: a thermal-throttle fault on n1 fires the temperature alert, for n1 only.

Rules are time-scaled (``for: 1m`` is 6 s here); the promtool unit tests keep the real durations.
The fault is removed and the alert left to resolve, so later tests find a quiet stack again.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from oximeter.procs import wait_until
from oximeter.stack import Stack

ALERT = "GpuTemperatureHigh"


def _firing(stack: Stack) -> list[dict[str, Any]]:
    return [a for a in stack.alerts() if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]


def test_thermal_throttle_fires_for_n1_only(live_stack: Stack) -> None:
    assert _firing(live_stack) == []
    started = time.time()
    fault_id = live_stack.fault("thermal_throttle", "n1", gpu=1, strength=0.45)
    try:
        wait_until(lambda: _firing(live_stack), timeout_s=60, interval_s=0.5, what=f"{ALERT} firing")
        firing = _firing(live_stack)
        assert [(a["labels"]["node"], a["labels"]["gpu"]) for a in firing] == [("n1", "1")]
        assert float(firing[0]["value"]) > 85
        assert live_stack.endpoints is not None and live_stack.endpoints.alertmanager is not None
        am = f"{live_stack.endpoints.alertmanager}/api/v2/alerts"

        def in_alertmanager() -> list[dict[str, Any]]:
            alerts: list[dict[str, Any]] = requests.get(am, params={"filter": f'alertname="{ALERT}"'},
                                                        timeout=5).json()
            return alerts
        wait_until(in_alertmanager, timeout_s=30, what=f"{ALERT} in Alertmanager")
        received = in_alertmanager()
        assert [(a["labels"]["node"], a["labels"]["gpu"]) for a in received] == [("n1", "1")]
    finally:
        live_stack.delete_fault(fault_id)
    window = f"{time.time() - started:.0f}s"
    ever = live_stack.query(f'max_over_time(ALERTS{{alertname="{ALERT}", alertstate="firing"}}[{window}])')
    assert [(a["metric"]["node"], a["metric"]["gpu"]) for a in ever] == [("n1", "1")]
    wait_until(lambda: not any(a["labels"]["alertname"] == ALERT for a in live_stack.alerts()),
               timeout_s=90, interval_s=0.5, what=f"{ALERT} resolved after the fault was removed")
