"""A scheduling stall on n2 → an incident attributed to the scheduling layer on n2.

The diagnosis table's ``scheduling_bottleneck`` (queue wait up while GPU utilisation is low) needs
a gateway that admits too little, and the live simulator cannot do that: ``admission_limit`` is
history-only (the gateway is another process with its limit fixed at start). The live stall is
``engine_stall``: n2's engine makes no progress, its gateway's slots stay taken and requests queue,
wait and are refused with 429. The simulator keeps a stalled engine's GPUs busy (as a hung kernel
does), so the table's answer moves from ``scheduling_bottleneck`` to ``capacity_exhausted``:
scheduling layer and the right node either way. The incident is left to resolve on its own time.
The stall runs alongside the thermal fault on n1 (``conftest.py``); neither incident absorbs the other.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import Faults, new_incidents
from shared_stack import live_timeout_s, open_deadline_s

from stack.local import Stack
from stack.procs import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(live_timeout_s(open_deadline_s("queue_wait_p99"),
                                     open_deadline_s("queue_wait_p99", "gpu_utilization_p95")))
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
    assert (got["layer"], got["root_cause"]["signal"], got["root_cause"]["labels"]["node"]) == \
        ("scheduling", "queue_wait_p99", "n2"), got
    # Queue wait up while the GPUs' p95 utilisation window is still low reads as scheduling_bottleneck;
    # once the stalled GPUs' busy samples fill it, the same incident reads as capacity_exhausted.
    assert got["rule"] in ("scheduling_bottleneck", "capacity_exhausted"), got
    print(f"scheduling: incident after {detect_s:.0f} s ({got['rule']})")
