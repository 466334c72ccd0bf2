"""Shipped scenarios leave their fingerprint in a short history (in process, virtual clock)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.history import generate
from simulator.scenario import load_scenario
from simulator.series import SeriesStore

SCENARIOS = Path(__file__).parents[2] / "simulator" / "scenarios"
END_S = 1_800_021_600.0  # 14:00 UTC, near the daily peak


def series(store: SeriesStore, name: str, **labels: str) -> list[list[float]]:
    """Every matching series' values (NaN where not scraped)."""
    found = store.values(name, **labels)
    assert found, f"no series {name} {labels}"
    return found


def last(values: list[float]) -> float:
    return [v for v in values if not math.isnan(v)][-1]


Check = Callable[[SeriesStore], bool]
CASES: list[tuple[str, Check]] = [
    (
        "thermal_throttle",
        lambda s: (
            max(series(s, "oximeter_gpu_temperature_celsius", node="n1", gpu="2")[0]) > 85
            and min(series(s, "oximeter_gpu_sm_clock_hertz", node="n1", gpu="2")[0]) < 1e9
            and max(series(s, "oximeter_gpu_temperature_celsius", node="n2", gpu="2")[0]) < 85
        ),
    ),
    (
        "scheduling_bottleneck",
        lambda s: (
            min(series(s, "oximeter_concurrency_limit", node="n2")[0]) == 1
            and last(series(s, "oximeter_queue_wait_seconds_sum", node="n2")[0])
            > 10 * last(series(s, "oximeter_queue_wait_seconds_sum", node="n1")[0])
            and statistics.median(series(s, "oximeter_gpu_utilization_ratio", node="n2", gpu="0")[0]) < 0.35
        ),
    ),
    (
        "kv_pressure",
        lambda s: (
            last(series(s, "vllm:num_preemptions_total", node="n1")[0]) > 0
            and last(series(s, "vllm:num_preemptions_total", node="n2")[0]) == 0
        ),
    ),
    (
        "telemetry_lost",
        lambda s: (
            # -2h for 40 min in a 90-minute history: samples at minutes 1-9 are missing.
            sum(math.isnan(v) for v in series(s, "oximeter_gpu_up", node="n1", gpu="0")[0]) == 9
            and not any(math.isnan(v) for v in series(s, "oximeter_gpu_up", node="n2", gpu="0")[0])
        ),
    ),
]


@pytest.mark.parametrize(("name", "check"), CASES, ids=[c[0] for c in CASES])
def test_scenario_fingerprint(name: str, check: Check) -> None:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    store, _fleet = generate(scenario, 1.5 / 24, 60.0, END_S)
    assert check(store)


def test_a_scenario_may_name_every_diagnosis_rule_as_its_truth() -> None:
    from analyzer.diagnosis.rules import RULE_IDS
    from simulator.scenario import known_rules

    assert sorted(known_rules()) == sorted({*RULE_IDS, "none"})
