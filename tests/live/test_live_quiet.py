"""Issue 4, must show 4: after a backfill, fault-free live traffic fires no alert but Watchdog.

Ten minutes of real durations, compressed by the rules' time scale (``conftest.SCALE``): the soak
window starts when Prometheus starts (so the hand-over from backfill to live is inside it) and is
read back from Prometheus's own ``ALERTS`` series, so no firing between two polls is missed.
"""

from __future__ import annotations

import time

from shared_stack import BACKFILL, SCALE

from stack.local import ANALYZER_JOB, Stack

SOAK_S = 600 / SCALE
# Without the analyzer daemon (issue 8) its scrape job is absent, and ScrapeJobMissing says so.
NO_ANALYZER = {("ScrapeJobMissing", "oximeter-analyzer")}


def test_quiet_after_backfill(live_stack: Stack) -> None:
    assert live_stack.prometheus_started_s is not None and live_stack.backfill is not None
    end = live_stack.prometheus_started_s + SOAK_S + 2
    if end > time.time():
        time.sleep(end - time.time())  # the soak is a duration by definition
    window = f"{time.time() - live_stack.prometheus_started_s:.0f}s"
    firing = live_stack.query(
        f'max_over_time(ALERTS{{alertstate="firing", alertname!="Watchdog"}}[{window}])')
    fired = {(a["metric"]["alertname"], a["metric"].get("job", "")) for a in firing}
    allowed = set() if live_stack.options.addons else NO_ANALYZER
    assert fired - allowed == set(), [a["metric"] for a in firing]

    # The soak could have failed: the rule engine ran throughout (Watchdog fired every evaluation),
    # traffic flowed on every node, and the baselines the alerts compare with were there.
    watchdog = live_stack.query(
        f'count_over_time(ALERTS{{alertname="Watchdog", alertstate="firing"}}[{window}])')
    evaluations = SOAK_S / live_stack.options.eval_interval_s
    assert len(watchdog) == 1 and float(watchdog[0]["value"][1]) >= 0.8 * evaluations
    expected = SOAK_S * BACKFILL.base_rps  # per node (the shared stack's traffic is flat)
    ok = live_stack.query(f'sum by (node) (increase(oximeter_requests_total{{code="200"}}[{window}]))')
    flowed = {r["metric"]["node"]: float(r["value"][1]) >= 0.3 * expected for r in ok}
    assert flowed == {"n1": True, "n2": True}
    baseline = live_stack.query("service_node:oximeter_time_to_first_token_seconds:p99_5m_offset1d")
    assert sorted(r["metric"]["node"] for r in baseline) == ["n1", "n2"]
    past = live_stack.query("count(oximeter_gpu_up)", at_s=live_stack.backfill.start_s + 600)
    assert float(past[0]["value"][1]) == BACKFILL.nodes * BACKFILL.gpus_per_node


def test_backfill_and_live_are_the_same_series(live_stack: Stack) -> None:
    """Stable ``instance`` names: every target's ``up`` continues its backfilled series."""
    assert live_stack.backfill is not None
    # The analyzer add-on is live only (the history has no analyzer): its target has no past.
    query = f'group by (job, instance) (last_over_time(up{{job!="{ANALYZER_JOB}"}}[1m]))'
    past = live_stack.query(query, at_s=live_stack.backfill.end_s)
    now = live_stack.query(query)
    assert sorted(map(str, (r["metric"] for r in now))) == sorted(map(str, (r["metric"] for r in past)))
    assert len(now) == 3 * BACKFILL.nodes
