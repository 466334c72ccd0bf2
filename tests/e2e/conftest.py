"""The end-to-end faults: a thermal throttle on n1 and an engine stall on n2, injected together.

Two faults at once on different nodes are what a fleet sees on a bad night, and the suite's time
budget cannot afford them one after the other (each waits out real, scaled persistence). Each test
asserts its own node's incident, and that the other fault did not merge into it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from e2e_helpers import Faults, analyzer_url, incidents

from oximeter.stack import Stack, StackError

THERMAL_S = 60.0  # the latency rise thermal_throttle needs persists for a scaled 5 minutes (30 s)


@pytest.fixture(scope="session")
def faults(live_stack: Stack) -> Iterator[Faults]:
    api = analyzer_url(live_stack)
    before = {i["id"] for i in incidents(api)}
    t0 = time.monotonic()
    live_stack.fault("thermal_throttle", "n1", gpu=1, strength=0.45, duration_s=THERMAL_S)  # ends by itself
    stall = live_stack.fault("engine_stall", "n2")  # the scheduling test ends it once diagnosed
    yield Faults(api, before, t0, stall)
    with contextlib.suppress(StackError):  # already deleted by the scheduling test
        live_stack.delete_fault(stall)
