"""A scheduling stall on n2 → an incident attributed to the scheduling layer on n2.

The live simulator cannot make n2's gateway admit too little (``admission_limit`` is history-only:
the gateway is another process with its limit fixed at start), so the live scheduling fault is
``engine_stall``: n2's engine makes no progress, its gateway's slots stay taken and requests queue,
wait and are refused with 429. Its GPUs idle while it holds requests waiting, which the diagnosis
table names ``scheduling_bottleneck`` (requests wait in front of idle GPUs; the sentence says the
engine runs none of them), as soon as the gateway's first evidence of its queue (the 429s, within
a minute; the queue wait's p99 follows minutes later) is an event. The incident is left to resolve
on its own time. The stall runs alongside the thermal fault on n1 (``conftest.py``); neither
incident absorbs the other.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import Faults, new_incidents
from shared_stack import open_deadline_s

from oximeter.procs import wait_until
from oximeter.stack import Stack

pytestmark = pytest.mark.e2e


def test_scheduling_stall_is_a_scheduling_incident(live_stack: Stack, faults: Faults) -> None:
    api, before = faults.api, faults.before
    try:
        wait_until(lambda: new_incidents(api, before, layer="scheduling", node="n2"),
                   open_deadline_s("queue_wait_p99"), interval_s=1.0, what="a scheduling incident on n2")
        detect_s = time.monotonic() - faults.t0
        # It may open on its first member (429s) and be diagnosed once queue wait and utilisation agree.
        wait_until(lambda: [i for i in new_incidents(api, before, node="n2") if i["rule"] != "unclassified"],
                   open_deadline_s("queue_wait_p99", "gpu_utilization_p95"), interval_s=1.0,
                   what="the scheduling incident diagnosed")
    finally:
        live_stack.delete_fault(faults.stall_id)
    (got,) = new_incidents(api, before, node="n2")
    # The root cause is the gateway queue's evidence that crossed first: its 429s or its wait's p99.
    assert (got["layer"], got["root_cause"]["labels"]["node"]) == ("scheduling", "n2"), got
    assert got["root_cause"]["signal"] in ("rejected_429_ratio", "queue_wait_p99"), got
    assert got["rule"] == "scheduling_bottleneck", got
    assert "the engine runs none of them" in got["diagnosis"]["sentence"], got
    print(f"scheduling: incident after {detect_s:.0f} s ({got['rule']})")
