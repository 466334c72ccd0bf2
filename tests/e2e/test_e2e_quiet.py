"""Issue 8: after the backfill, the fault-free stack stays quiet: no incident, no chat message.

The soak is the scaled ten minutes the live soak uses (``tests/live/test_live_quiet.py``), counted
from Prometheus's start so the hand-over from backfill to live traffic is inside it; it could fail:
the analyzer's own metrics show it read the source on every cycle throughout.
"""

from __future__ import annotations

import time

import pytest
from e2e_helpers import VictoriaStore, analyzer_url, headline, incidents, kind_of
from shared_stack import ANALYZER_STEP_S, SCALE

from oximeter.scrape import scrape, total
from reporter.sink import ChatSink
from stack.local import Stack
from stack.procs import wait_until

SOAK_S = 600 / SCALE

pytestmark = pytest.mark.e2e


def test_fault_free_stack_opens_no_incident(live_stack: Stack, chat_sink: ChatSink,
                                            victoria_store: VictoriaStore) -> None:
    # VictoriaMetrics (the faults' second store) starts scraping inside the soak rather than after
    # it, as the faults' second analyzer needs samples from before they begin.
    assert live_stack.prometheus_started_s is not None
    end = live_stack.prometheus_started_s + SOAK_S + 2
    if end > time.time():
        time.sleep(end - time.time())  # the soak is a duration by definition
    api = analyzer_url(live_stack)
    # ... and half the daemon's cycles it could hold (a loaded machine runs fewer in the same time,
    # so the soak waits for them rather than failing the count).
    wait_until(lambda: cycles(api) >= SOAK_S / ANALYZER_STEP_S / 2, SOAK_S, interval_s=1.0,
               what="the soak's analyzer cycles")
    assert [(i["layer"], i["rule"], i["root_cause"]) for i in incidents(api)] == []
    # The daemon's catch-up digest of the backfilled day may be there; nothing else may.
    others = [(kind_of(m), headline(m)) for m in chat_sink.messages if kind_of(m) not in ("digest", "image")]
    assert others == []
    assert chat_sink.problems == []
    assert total(scrape(f"{api}/metrics"), "oximeter_analyzer_source_up") == 1.0


def cycles(api: str) -> float:
    """How many cycles the analyzer daemon has completed."""
    return total(scrape(f"{api}/metrics"), "oximeter_analyzer_cycle_seconds_count")
