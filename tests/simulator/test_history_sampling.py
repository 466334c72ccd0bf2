"""The history's cheap sampling paths give exactly what the plain ones give.

Gateway increments folded once per step (``PendingObservations``, ``PendingCount``) against
``observe``/``inc`` one by one, ``ChildSampler`` against ``registry.collect()`` at every step of a
history with rejections, aborts and restarts, and ``SeriesStore.add``'s reuse of where a
family's samples went against fresh families.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from simulator.exposition import _hist
from simulator.history import build_fleet, generate
from simulator.node_history import NodeHistory
from simulator.scenario import Scenario, ScenarioFault
from simulator.series import SeriesStore
from simulator.stats import TTFT_BUCKETS, ChildSampler, PendingCount, PendingObservations
from simulator.stats import Histogram as StatsHistogram

# Bucket edges, a bound of 0, values past the last bound, repeats and a NaN (no bucket, NaN sum).
VALUES = [0.0, 0.004, 0.005, 0.0051, 0.1, 0.3, 7.0, 1e9, 0.1, 0.5, 2.5, math.nan, 0.7]
BUCKETS = (0.0, 0.005, 0.1, 0.5, 2.5)


def _samples(families: Any, *, created: bool = False) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    """(name, labels, value) of every sample (``_created`` only when asked), sorted; values as
    text so that NaN compares."""
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), repr(s.value))
        for f in families
        for s in f.samples
        if created or not s.name.endswith("_created")
    )


def _metrics(registry: CollectorRegistry) -> tuple[Histogram, Counter]:
    hist = Histogram("h_seconds", "h", ["a"], buckets=BUCKETS, registry=registry)
    counter = Counter("c", "c", ["a"], registry=registry)
    for label in ("x", "y"):
        counter.labels(label)  # y is never written: it must stay at 0 in its own family
    return hist, counter


def test_folded_increments_equal_one_by_one_and_the_sampler_equals_collect() -> None:
    plain, folded = CollectorRegistry(), CollectorRegistry()
    hist, counter = _metrics(plain)
    fhist, fcounter = _metrics(folded)
    pending_h = PendingObservations(fhist, "x")
    pending_c = PendingCount(fcounter, "x")
    sampler = ChildSampler(folded, [pending_h, pending_c])
    for step, chunk in enumerate((VALUES[:5], [], VALUES[5:])):
        for value in chunk:
            hist.labels("x").observe(value)
            counter.labels("x").inc(3)
            pending_h.observe(value)
            pending_c.inc(3)
        sampled = sampler.collect()
        assert _samples(sampled) == _samples(plain.collect()), step
        # The sampler hands out the registry's own samples, _created included.
        assert _samples(sampled, created=True) == _samples(folded.collect(), created=True), step
    assert pending_h.fold() is False and pending_c.fold() is False  # nothing left pending
    x_sum = next(s.value for f in sampled for s in f.samples if s.name == "h_seconds_sum")
    assert math.isnan(x_sum)


def test_sampler_refuses_a_child_written_before_it() -> None:
    registry = CollectorRegistry()
    hist, _counter = _metrics(registry)
    hist.labels("x").observe(1.0)
    with pytest.raises(ValueError, match="does not match"):
        ChildSampler(registry, [PendingObservations(hist, "x")])


def _scenario() -> Scenario:
    faults = [
        ScenarioFault(kind="admission_limit", node="n1", start=-1500.0, duration=600.0, strength=1),
        ScenarioFault(kind="traffic_spike", node="n1", start=-1500.0, duration=600.0, strength=6.0),
        ScenarioFault(kind="engine_restart", node="n1", start=-700.0, duration=60.0, strength=30),
        ScenarioFault(kind="engine_stall", node="n1", start=-400.0, duration=200.0),
        ScenarioFault(kind="scrape_gap", node="n1", start=-300.0, duration=120.0),
    ]
    return Scenario.model_validate(
        {
            "name": "sampling",
            "nodes": 1,
            "gpus_per_node": 1,
            "base_rps": 2.0,
            "faults": [f.model_dump(exclude_none=True) for f in faults],
            "truth": {"layer": "none", "entity": {}, "rule": "none"},
        }
    )


def test_history_gateway_samples_equal_a_full_collect_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    codes: set[str] = set()
    steps: list[int] = []
    sampler_collect = ChildSampler.collect

    def collect(self: ChildSampler) -> list[Metric]:
        sampled = sampler_collect(self)
        full = list(self.registry.collect())
        assert _samples(sampled, created=True) == _samples(full, created=True)
        steps.append(1)
        answered = [s for f in full for s in f.samples if s.name == "oximeter_requests_total" and s.value]
        codes.update(s.labels["code"] for s in answered)
        return sampled

    monkeypatch.setattr(ChildSampler, "collect", collect)
    store, _fleet = generate(_scenario(), 2400 / 86400, 60.0, 1_780_000_000.0)
    # 40 steps less the two in the scrape gap; rejections (429) and restart drops (502) happened.
    assert len(steps) == 38
    assert {"200", "429", "502"} <= codes
    assert any(v > 0 for row in store.values("oximeter_rejected_requests_total") for v in row if v == v)


def _gauge(name: str, **values: float) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, "g", labels=["k"])
    for label, value in values.items():
        fam.add_metric([label], value)
    return fam


def test_store_reuses_placement_only_for_the_same_samples() -> None:
    store = SeriesStore([1.0, 2.0, 3.0, 4.0])
    same = _gauge("g", a=1.0, b=2.0)
    store.add(0, [same], {"node": "n1"})
    store.add(1, [same], {"node": "n1"})  # the same object: values copied
    store.add(2, [_gauge("g", b=5.0, a=6.0)], {"node": "n1"})  # same name, other order
    store.add(3, [_gauge("g", a=7.0)], {"node": "n2"})  # other extra labels
    assert store.values("g", k="a", node="n1")[0][:3] == [1.0, 1.0, 6.0]
    assert store.values("g", k="b", node="n1")[0][:3] == [2.0, 2.0, 5.0]
    assert math.isnan(store.values("g", k="a", node="n1")[0][3])
    assert store.values("g", k="a", node="n2")[0][3] == 7.0


def test_engine_histogram_samples_equal_add_metric() -> None:
    h = StatsHistogram(TTFT_BUCKETS)
    for value in (0.0005, 0.03, 0.03, 7.0, 5000.0):
        h.observe(value)
    plain = HistogramMetricFamily("vllm:x", "d", labels=["model_name", "engine"])
    plain.add_metric(["m", "0"], [(le, float(c)) for le, c in h.cumulative()], h.total)
    assert _hist("vllm:x", "d", ["model_name", "engine"], ["m", "0"], h).samples == plain.samples


def test_weekend_lookup_equals_datetime_at_every_moment_of_the_day() -> None:
    history = NodeHistory(_scenario(), build_fleet(_scenario(), 1.0), "n1", SeriesStore([0.0]), 60.0, 0.0)
    friday = 1_767_312_000.0  # 2026-01-02 00:00 UTC: Friday, then the weekend, then Monday
    walls = [friday + day * 86400.0 + offset for day in range(-1, 4)
             for offset in (-1e-3, -5e-7, -4e-7, -1e-9, 0.0, 1e-9, 4e-7, 5e-7, 1e-3, 4321.5, 86399.9)]
    for wall in [*walls, *reversed(walls)]:
        assert history._weekend(wall) == (datetime.fromtimestamp(wall, UTC).weekday() >= 5), wall
