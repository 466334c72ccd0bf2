"""bench/attribution_eval.py's overload truth: a node's requests queued beyond the SLO with no fault
on it (read from the history's exact queue-wait histogram) make a capacity incident there a real
overload, not a miss; anything else extra still counts against the scenario."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client.core import HistogramMetricFamily

from analyzer.detection.events import iso_utc
from simulator.series import SeriesStore
from tests.script_module import load_script

ae = load_script("bench/attribution_eval.py")
STEP_S, T0, STEPS = 60.0, 1_767_780_000.0, 30


def _at(step: int) -> float:
    return T0 + (step + 1) * STEP_S


def _history(tmp_path: Path, late: dict[str, range]) -> Path:
    """50 requests a minute per node; in ``late[node]``'s minutes 5 of them wait past 1 s."""
    store = SeriesStore([_at(i) for i in range(STEPS)])
    totals = {node: [0, 0] for node in late}
    for i in range(STEPS):
        for node, minutes in late.items():
            totals[node][0] += 50
            totals[node][1] += 45 if i in minutes else 50
            count, fast = totals[node]
            fam = HistogramMetricFamily("oximeter_queue_wait_seconds", "wait", labels=["service"])
            fam.add_metric(["chat"], [("0.5", fast), ("1.0", fast), ("+Inf", count)], sum_value=0.0)
            store.add(i, [fam], {"node": node, "job": "oximeter-gateway"})
    store.write_parquet(tmp_path)
    return tmp_path


def _incident(rule: str, node: str, opened: int, resolved: int | None = None) -> dict[str, Any]:
    def stamp(step: int) -> str:
        return str(iso_utc(datetime.fromtimestamp(_at(step), UTC)))

    return {"layer": "scheduling", "rule": rule, "root_cause": {"labels": {"node": node}},
            "first_onset": stamp(opened), "resolved_at": None if resolved is None else stamp(resolved)}


def test_queueing_past_the_slo_without_a_fault_is_an_overload_and_with_one_is_not(tmp_path: Path) -> None:
    fault = {"node": "n2", "start_epoch_s": _at(10), "end_epoch_s": _at(22)}
    spans = ae.overloaded(_history(tmp_path, {"n1": range(12, 16), "n2": range(12, 16), "n3": range(0)}),
                          [fault])
    assert spans["n3"] == [] and spans["n2"] == []  # n2's queue is its fault's doing
    (lo, hi), = spans["n1"]
    assert lo <= _at(12) and _at(15) <= hi <= _at(15) + 300

    end = _at(STEPS - 1)
    assert ae._on_overload(_incident("capacity_exhausted", "n1", 14, 18), spans, end)
    assert ae._on_overload(_incident("capacity_exhausted", "n1", 14), spans, end)  # still open
    assert not ae._on_overload(_incident("capacity_exhausted", "n1", 25, 28), spans, end)  # after it
    assert not ae._on_overload(_incident("capacity_exhausted", "n3", 14, 18), spans, end)  # elsewhere
    assert not ae._on_overload(_incident("unclassified", "n1", 14, 18), spans, end)  # named wrong
