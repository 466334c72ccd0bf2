"""A stalled engine in a history: the gateway's queue age shows it at the first sample, as live."""

from __future__ import annotations

import pytest

from simulator.history import generate
from simulator.scenario import Scenario, ScenarioFault

STEP_S = 60.0


def test_a_stalled_engine_ages_the_queue_head_by_one_step_per_sample() -> None:
    stall = ScenarioFault(kind="engine_stall", node="n1", start=-1200.0, duration=600.0)
    scenario = Scenario.model_validate({
        "name": "stall", "nodes": 1, "gpus_per_node": 1, "base_rps": 2.0,
        # 12 slots and a 10 s predicted-wait limit: the queue the stall fills, sample by sample.
        "gateway": {"max_concurrency": 12, "max_queue_wait_s": 10},
        "faults": [stall.model_dump(exclude_none=True)],
        "truth": {"layer": "none", "entity": {}, "rule": "none"},
    })
    store, _fleet = generate(scenario, 2400 / 86400, STEP_S, 1_780_000_000.0)
    [age] = store.values("oximeter_queue_oldest_wait_seconds")
    [queued] = store.values("oximeter_queue_length")
    [unanswered] = store.values("oximeter_upstream_oldest_unanswered_seconds")
    stalled = age.index(max(age))
    # The stall starts 20 min into the 40: the queue's head waits through two samples (one step
    # apart) before patience and the predicted-wait refusals empty the queue.
    assert (stalled, queued[stalled - 1], queued[stalled]) == (21, 21.0, 21.0)
    assert age[stalled] - age[stalled - 1] == pytest.approx(STEP_S)
    assert max(age[:stalled - 1]) < 5.0 and max(age[stalled + 1:]) < 5.0
    # The requests it holds had their first token before the stall: none waits on a first byte.
    assert max(unanswered) < 1.0
