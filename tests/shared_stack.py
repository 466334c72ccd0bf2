"""The test session's one live stack (ARCHITECTURE "Real components, and keeping the suite fast").

``tests/live`` (issue 4) and ``tests/e2e`` (issue 8) share it: one cached backfill, Prometheus with
rules time-scaled by ``SCALE`` (10 minutes of real durations take one minute), 2 s scrapes and
evaluations, Prometheus's lookback scaled with them (5m -> 30s, so an instant query sees live
samples, not the backfill that ended earlier), Alertmanager with 1 s grouping routing to the
analyzer daemon's relay, and the analyzer (``stack/demo_stack.py``'s configuration, persistence
scaled alike) telling a local WeCom sink. The backfill covers the scaled day (``offset 1d`` reads
1d/SCALE back) plus margin; the analyzer's own baselines read the same-time windows it has.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from pathlib import Path
from typing import Any

from dashboards.promql import Timing
from stack.backfill import BackfillSpec
from stack.demo_stack import ALERT_GROUP_WAIT_S, BACKFILL_GAP_S, analyzer_addon, analyzer_config
from stack.local import Stack, StackOptions

SCALE = 10.0
LOOKBACK_S = 300 / SCALE
# Traffic at a constant rate, in the history and live: the suite must take as long and judge the same
# traffic whatever hour CI starts it (with the daily shape, a night start carried 0.44 req/s per
# node and the queue's p99 waited four minutes for the requests its guard needs). 2 req/s per node
# (the daily shape's evening peak) fills that guard (analyzer.signals.shared_queries.P99_MIN_COUNT in
# 5 min) within the quiet soak, well inside the gateway's 8 concurrent requests.
BACKFILL = BackfillSpec(nodes=2, gpus_per_node=2, base_rps=2.0, days=0.125, step_s=15.0, daily_shape=False)
# The history ends BACKFILL_GAP_S before the stack starts (stack/demo_stack.py says why).
assert BACKFILL.days * 86400 >= 86400 / SCALE + 1800 + BACKFILL_GAP_S, \
    "the scaled `offset 1d` must fall inside the backfill"
# The analyzers' query step and cycle, the demo's: a 1 s cycle doubled their CPU (the shared one's
# and VictoriaMetrics' each took about a fifth of a core) for detections a second sooner.
ANALYZER_STEP_S = 2.0
# Prometheus's (and VictoriaMetrics') scrape and rule-evaluation interval, the demo's: at 1 s,
# Prometheus, every target's /metrics and the ALERTS series cost twice the CPU, and every scaled
# rule window (the shortest, [1m], is 6 s) still holds three samples at 2 s.
SCRAPE_S = 2.0
# How the panel tests expand dashboard queries, as Grafana would against this stack: its scrape
# interval as $__interval and a 30 s range. The longest scaled window a panel or rule reads ([5m] at
# scale 10) fills ``PANEL_WARMUP_S`` after Prometheus starts.
PANEL_TIMING = Timing(scrape_interval_s=SCRAPE_S, interval_s=SCRAPE_S, range_s=30.0)
PANEL_WARMUP_S = 45.0
STARTED: list[Stack] = []


def live_options(**overrides: Any) -> StackOptions:
    """The live tests' stack: scaled rules, 2 s scrapes, 1 s Alertmanager grouping, the backfill."""
    base = StackOptions(
        nodes=BACKFILL.nodes, gpus_per_node=BACKFILL.gpus_per_node, seed=BACKFILL.seed,
        time_scale=SCALE, scrape_interval_s=SCRAPE_S, eval_interval_s=SCRAPE_S, lookback_delta_s=LOOKBACK_S,
        backfill=BACKFILL, alert_group_wait_s=1.0, alert_group_interval_s=1.0, alert_repeat_interval_s=60.0,
        traffic_rps_per_node=BACKFILL.base_rps, daily_shape=BACKFILL.daily_shape,
    )
    return dataclasses.replace(base, **overrides)


def shared_options(workspace: Path, backfill_dir: Path, chat_url: str) -> StackOptions:
    """``live_options`` plus the analyzer daemon (telling ``chat_url``) and the relay's token."""
    token_file = workspace / "relay.token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("e2e-relay-token", encoding="utf-8")
    addon = analyzer_addon(workspace, chat_url, token_file, scale=SCALE, step_s=ANALYZER_STEP_S,
                           interval_s=ANALYZER_STEP_S)
    return live_options(backfill_dir=backfill_dir, relay_token_file=token_file, addons=(addon,),
                        alert_group_wait_s=ALERT_GROUP_WAIT_S)


def _analyzer_settings() -> dict[str, Any]:
    """The shared analyzer's configuration as the stack writes it (persistence already scaled)."""
    return analyzer_config(Path("."), "http://127.0.0.1:1", scale=SCALE, step_s=ANALYZER_STEP_S,
                           interval_s=ANALYZER_STEP_S)


def open_deadline_s(*signals: str) -> float:
    """How long a live fault may take to open (and be named by) an incident of ``signals``.

    What the configuration makes it take: the slowest signal's window plus its persistence, and a
    stronger cause's dwell before it takes over, all scaled. Three times that, plus thirty analyzer
    cycles, leaves room for a loaded machine without depending on how fast this one is.
    """
    config = _analyzer_settings()
    catalogue = config["analyzer"]["signals"]
    from analyzer.signals.catalogue import CATALOGUE

    need = max(CATALOGUE[s].window_s / SCALE + catalogue[s]["for_s"] for s in signals)
    need += config["incidents"]["root_cause_dwell_s"]
    return 3 * need + 30 * ANALYZER_STEP_S


def live_timeout_s(*deadlines_s: float) -> int:
    """pytest-timeout's limit for an end-to-end test that waits out ``deadlines_s`` one after
    another, so that a miss fails with its deadline's message rather than as a timeout. On top of
    them: the suite's default limit, for what the test sets up first (a stack, when it is the first
    to need it), and the faults' wait for judged queues (``tests/e2e/conftest.py``), paid by the
    first test to use them (a ceiling for the others)."""
    return int(_default_timeout_s() + open_deadline_s("queue_wait_p99") + sum(deadlines_s))


@functools.cache
def _default_timeout_s() -> float:
    """pytest-timeout's limit for every test (pyproject.toml), read once."""
    config = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text(encoding="utf-8"))
    return float(config["tool"]["pytest"]["ini_options"]["timeout"])


def resolve_deadline_s(fault_s: float, *signals: str) -> float:
    """How long an incident of ``signals`` may take to resolve once a ``fault_s`` fault started:
    the fault, its anomalies clearing (a window), the quiet time before resolving; as above."""
    config = _analyzer_settings()
    from analyzer.signals.catalogue import CATALOGUE

    clear = max(CATALOGUE[s].window_s / SCALE for s in signals) + config["incidents"]["resolve_after_s"]
    return fault_s + 3 * clear + 30 * ANALYZER_STEP_S


def setup_summary() -> list[str]:
    """Where each started stack's set-up time went (``--durations`` shows it as one fixture)."""
    lines = []
    for stack in STARTED:
        steps = dict(stack.timings_s)
        if stack.backfill is not None:
            steps.update({f"backfill.{k}": v for k, v in stack.backfill.timings_s.items()})
        lines.append("live stack set-up (s): " + ", ".join(f"{n} {s:.1f}" for n, s in steps.items()))
    return lines
