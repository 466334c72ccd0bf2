"""The live tests run on the session's shared stack (``tests/conftest.py``, ``tests/shared_stack.py``)."""

from __future__ import annotations

import time

import pytest
from shared_stack import LOOKBACK_S

from stack.local import Stack


@pytest.fixture
def live_only(live_stack: Stack) -> Stack:
    """The stack once the backfill is beyond the lookback, so instant queries see live samples only."""
    assert live_stack.backfill is not None
    wait_s = live_stack.backfill.end_s + LOOKBACK_S + 35 - time.time()  # + the panels' 30 s range
    if wait_s > 0:
        time.sleep(wait_s)  # a clock boundary, not a readiness guess: nothing to poll for
    return live_stack
