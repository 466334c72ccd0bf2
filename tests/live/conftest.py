"""One shared live stack per test session, with one cached backfill (ARCHITECTURE "Real components").

Rules are time-scaled by ``SCALE``: 10 minutes of real durations take one minute here, scrapes and
evaluations run every second, and Prometheus's lookback is scaled with them (5m -> 30s), so an
instant query sees only samples of the last 30 s: live data, not the backfill that ended earlier.
The backfill covers the scaled day (``offset 1d`` reads 1d/SCALE back) plus margin.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oximeter.backfill import BackfillSpec
from oximeter.stack import Stack, StackOptions

SCALE = 10.0
LOOKBACK_S = 300 / SCALE
BACKFILL = BackfillSpec(nodes=2, gpus_per_node=2, base_rps=1.0, days=0.125, step_s=15.0)
assert BACKFILL.days * 86400 >= 86400 / SCALE + 1800, "the scaled `offset 1d` must fall inside the backfill"


def live_options(**overrides: Any) -> StackOptions:
    """The live tests' stack: scaled rules, 1 s scrapes, 1 s Alertmanager grouping, the backfill."""
    base = StackOptions(
        nodes=BACKFILL.nodes, gpus_per_node=BACKFILL.gpus_per_node, seed=BACKFILL.seed,
        time_scale=SCALE, scrape_interval_s=1.0, eval_interval_s=1.0, lookback_delta_s=LOOKBACK_S,
        backfill=BACKFILL, alert_group_wait_s=1.0, alert_group_interval_s=1.0, alert_repeat_interval_s=60.0,
        traffic_rps_per_node=BACKFILL.base_rps,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture(scope="session")
def live_backfill_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's one backfill is built (and reused by every stack of the session)."""
    return tmp_path_factory.mktemp("backfill")


_STARTED: list[Stack] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the live stack's set-up time went (``--durations`` shows it only as one fixture)."""
    for stack in _STARTED:
        steps = dict(stack.timings_s)
        if stack.backfill is not None:
            steps.update({f"backfill.{k}": v for k, v in stack.backfill.timings_s.items()})
        text = ", ".join(f"{name} {seconds:.1f}" for name, seconds in steps.items())
        terminalreporter.write_line(f"live stack set-up (s): {text}")


@pytest.fixture(scope="session")
def live_stack(tmp_path_factory: pytest.TempPathFactory, live_backfill_dir: Path) -> Iterator[Stack]:
    """The shared stack, started once; always stopped at the end of the session."""
    stack = Stack(tmp_path_factory.mktemp("stack"), live_options(backfill_dir=live_backfill_dir))
    with stack:
        _STARTED.append(stack)
        yield stack


@pytest.fixture
def live_only(live_stack: Stack) -> Stack:
    """The stack once the backfill is beyond the lookback, so instant queries see live samples only."""
    assert live_stack.backfill is not None
    wait_s = live_stack.backfill.end_s + LOOKBACK_S + 35 - time.time()  # + the panels' 30 s range
    if wait_s > 0:
        time.sleep(wait_s)  # a clock boundary, not a readiness guess: nothing to poll for
    return live_stack
