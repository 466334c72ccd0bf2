"""The fault-kind registry: a kind is one entry, and an entry defined here, touching no other file,
reaches the GPU, the engine, a history, a scenario's truth and the generated sweep."""

from __future__ import annotations

import random

import pytest

from analyzer.diagnosis.rules import RULE_IDS
from drills.sweep import generate, patterns
from simulator.clock import VirtualClock
from simulator.engine import EngineParams
from simulator.fault_kinds import FAULT_KINDS, Effect, FaultKind, Sweep
from simulator.faults import FaultError
from simulator.fleet import Fleet
from simulator.history import generate as history
from simulator.scenario import OTHER_RULES, Scenario, known_rules

# A failing fan: the card computes slower and its memory, running hot, corrects errors.
TOY = "toy_fan_failure"
TOY_KIND = FaultKind("infrastructure", 2.0, "compute time multiplier; corrected ECC errors per minute",
                     per_gpu=True, effects=(Effect.COMPUTE, Effect.ECC_CORRECTED), rule="toy_fan_rule",
                     sweep=Sweep((1.5, 3.0)))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> FaultKind:
    monkeypatch.setitem(FAULT_KINDS, TOY, TOY_KIND)
    return TOY_KIND


def _fleet() -> Fleet:
    return Fleet(VirtualClock(), nodes=2, gpus_per_node=2, params=EngineParams(), model_name="m")


def test_a_registered_kind_slows_the_engine_and_counts_on_its_gpu(toy: FaultKind) -> None:
    fleet = _fleet()
    fleet.add_fault({"kind": TOY, "node": "n1", "gpu": 1, "start": 0.0, "strength": 3.0})
    assert fleet.conditions("n1", 10.0).slowdown == pytest.approx(3.0)
    assert fleet.conditions("n2", 10.0).slowdown == 1.0
    fleet.step_gpus("n1", 0.0, 0.5, 0.0)
    fleet.step_gpus("n1", 120.0, 0.5, 0.0)
    gpus = fleet.gpus_json("n1", 120.0, 0.0)["gpus"]
    assert [g["ecc_corrected_total"] for g in gpus] == [0, 6]  # 3 a minute for two minutes


def test_a_registered_kind_takes_its_effects_strength_bounds(toy: FaultKind) -> None:
    with pytest.raises(FaultError, match="compute time multiplier"):
        _fleet().add_fault({"kind": TOY, "node": "n1", "strength": 0.5})


def test_a_registered_kind_reaches_a_history_and_a_scenario_truth(toy: FaultKind) -> None:
    sc = Scenario.model_validate({
        "name": "toy", "nodes": 1, "gpus_per_node": 2, "base_rps": 0.2,
        "faults": [{"kind": TOY, "node": "n1", "gpu": 0, "start": "-20m", "strength": 60}],
        "truth": {"layer": "infrastructure", "entity": {"node": "n1", "gpu": "0"}, "rule": "toy_fan_rule"}})
    store, _fleet = history(sc, days=1 / 24, step_s=300.0, end_s=3600.0)
    ecc = {g: store.values("oximeter_gpu_ecc_errors_total", gpu=g, kind="corrected")[0] for g in ("0", "1")}
    assert ecc["1"][-1] == 0
    assert ecc["0"][-1] == pytest.approx(60 * 20, rel=0.01)


def test_a_registered_kind_is_drawn_by_the_sweep(toy: FaultKind) -> None:
    kinds = patterns()
    assert kinds["toy_fan_rule"].strength == (1.5, 3.0) and kinds["toy_fan_rule"].per_gpu
    rng = random.Random(5)
    docs = [generate(rng, i, kinds) for i in range(60)]
    drawn = [f for d in docs for f in d["faults"] if f["kind"] == TOY]
    assert drawn and all(1.5 <= f["strength"] <= 3.0 and "gpu" in f for f in drawn)
    toy_docs = [d for d in docs if d["truth"]["rule"] == "toy_fan_rule"]
    assert toy_docs
    for doc in toy_docs:
        doc.pop("x_strengths")
        assert Scenario.model_validate(doc).faults[0].kind == TOY


def test_every_rule_a_scenario_may_name_is_the_analyzers() -> None:
    assert TOY not in FAULT_KINDS  # the fixture's entry is gone again
    assert set(known_rules()) <= {*RULE_IDS, "none"}
    assert set(OTHER_RULES) <= set(known_rules())


def test_every_kind_the_sweep_draws_has_a_rule_and_every_effect_is_read() -> None:
    for name, kind in FAULT_KINDS.items():
        assert kind.effects, name
        assert kind.sweep is None or kind.rule is not None, name
    assert {e for k in FAULT_KINDS.values() for e in k.effects} == set(Effect)
