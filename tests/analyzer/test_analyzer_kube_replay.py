"""A stock fleet's container restarts in a replay: an OOM-killed engine and a crash-looping one
each give platform evidence (container_oom_killed, restart_loop) through the same records the
Kubernetes adapter rules write in Prometheus, computed here from the raw history."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from alert_rules import ADAPTERS_DIR, load_groups
from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.kube import increase
from drills.detected import signal_frames
from oximeter.promql import metric_names
from simulator.history import generate
from simulator.scenario import Scenario, ScenarioFault, Truth

END_S = 1767808800.0
SIGNALS = ("container_oom_killed", "restart_loop", "container_restarts", "pod_not_ready", "node_not_ready")


@cache
def _frames() -> dict[str, object]:
    """40 minutes of a two-node stock fleet: n1's engine OOM-killed at 20m, n2's crash-looping
    every 4 minutes from 10m to 30m."""
    sc = Scenario(name="t", nodes=2, gpus_per_node=1, base_rps=1.0, daily_shape=False,
                  truth=Truth(layer="none", rule="none"), telemetry="stock",
                  faults=[ScenarioFault(kind="engine_oom", node="n1", start=1200.0, strength=30.0),
                          ScenarioFault(kind="crash_loop", node="n2", start=600.0, duration=1200.0,
                                        strength=240.0)])
    store, _fleet = generate(sc, 40 / 1440, 60.0, END_S)
    with tempfile.TemporaryDirectory() as tmp:
        store.write_parquet(Path(tmp))
        raw = RawStore.from_history(tmp)
    frames, _step = signal_frames(raw, {name: CATALOGUE[name] for name in SIGNALS}, stock=True)
    return dict(frames)


def _nodes(signal: str) -> set[str]:
    events = evaluate_signal(CATALOGUE[signal], _frames()[signal])  # type: ignore[arg-type]
    assert all(e.layer == "platform" for e in events)
    return {dict(e.labels)["node"] for e in events}


def test_an_oom_killed_engine_is_platform_evidence() -> None:
    assert _nodes("container_oom_killed") == {"n1"}


def test_a_crash_loop_is_platform_evidence_the_5_minute_count_misses() -> None:
    # A crash every 4 minutes: at most 2 in any 5 min (container_restarts wants 2 or more and so
    # may fire once), 3 or more in 15 min: restart_loop.
    assert _nodes("restart_loop") == {"n2"}
    assert "n1" not in _nodes("container_restarts")


def test_increase_counts_a_reset_as_a_restart_from_zero() -> None:
    counts = np.array([[0.0], [1.0], [2.0], [0.0], [1.0], [np.nan]])
    assert increase(counts, 2)[:, 0][:5].tolist() == [0.0, 1.0, 2.0, 1.0, 1.0]
    assert np.isnan(increase(counts, 2)[5, 0])


def test_readiness_is_recorded_per_node_and_pod_and_brief_outages_are_no_event() -> None:
    # Both nodes stay Ready; each engine's pod is not Ready while its engine is down (n1 for the
    # 30 s after its OOM kill, n2 after each crash), far under pod_not_ready's 10 minutes.
    nodes = _frames()["node_not_ready"]
    assert {nodes.labels_of(c)["node"]: float(nodes.values[c].min()) for c in nodes.values.columns} == \
        {"n1": 1.0, "n2": 1.0}
    pods = _frames()["pod_not_ready"]
    ready = {pods.labels_of(c)["node"]: pods.values[c] for c in pods.values.columns}
    assert sorted(ready) == ["n1", "n2"]
    assert {pods.labels_of(c)["pod"] for c in pods.values.columns} == {"vllm-n1", "vllm-n2"}
    assert ready["n1"].min() == 0 and ready["n1"].iloc[-1] == 1 and ready["n2"].min() == 0
    assert _nodes("pod_not_ready") == set() and _nodes("node_not_ready") == set()


def test_the_replay_writes_the_records_the_adapter_rules_write() -> None:
    rules = {r["record"] for g in load_groups(ADAPTERS_DIR / "kubernetes.rules.yml") for r in g["rules"]}
    for signal in ("container_oom_killed", "restart_loop", "pod_not_ready", "node_not_ready"):
        assert metric_names(CATALOGUE[signal].promql) <= rules
