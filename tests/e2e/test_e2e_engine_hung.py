"""A hung engine on n2 → an incident attributed to the engine layer on n2.

``engine_stall``: n2's engine makes no progress while it holds the requests it runs (its health
check still answers), so its token counters stand still: vLLM's own (requests running, no token
generated) and the gateway's (requests in flight, no answer delivered). Its gateway's slots stay
taken, requests queue, wait and are refused with 429 and cut with 504: that is the engine's
impact, whichever of them crossed its line first, and the incident names the engine. The stall
runs alongside the thermal fault on n1 (``conftest.py``); neither incident absorbs the other. The
incident is left to resolve on its own time.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import Faults, new_incidents
from shared_stack import live_timeout_s, open_deadline_s

from stack.local import Stack
from stack.procs import wait_until

pytestmark = pytest.mark.e2e
STALLED = ("engine_stalled", "upstream_stalled")


@pytest.mark.timeout(live_timeout_s(open_deadline_s(*STALLED)))
def test_a_hung_engine_is_an_engine_incident(live_stack: Stack, faults: Faults) -> None:
    api, before = faults.api, faults.before
    try:
        # It may open on a symptom (a fast burn, 429s) and be named once the stall has held.
        wait_until(lambda: [i for i in new_incidents(api, before, layer="engine", node="n2")
                            if i["rule"] == "engine_hung"],
                   open_deadline_s(*STALLED), interval_s=1.0, what="an engine_hung incident on n2")
        detect_s = time.monotonic() - faults.t0
    finally:
        live_stack.delete_fault(faults.stall_id)
    (got,) = new_incidents(api, before, node="n2")
    named = (got["layer"], got["rule"], got["root_cause"]["labels"]["node"])
    assert named == ("engine", "engine_hung", "n2"), got
    assert got["root_cause"]["signal"] in STALLED, got
    print(f"engine hung: incident after {detect_s:.0f} s ({got['root_cause']['signal']})")
