"""An engine leak on a stock fleet: the kubelet's cAdvisor working set of the engine container,
joined to its node by kube_pod_info, is the process memory process_rss_trend reads (the node's
memory capacity its host total), in a replay as the adapter rules record it in Prometheus."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from alert_rules import ADAPTERS_DIR, load_groups
from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.cadvisor import cadvisor_translated
from drills.detected import signal_frames
from oximeter.promql import metric_names
from simulator.fleet import BASE_RSS_BYTES, HOST_MEMORY_BYTES
from simulator.history import generate
from simulator.scenario import Scenario, ScenarioFault, Truth

END_S = 1767808800.0
SPEC = CATALOGUE["process_rss_trend"]


@cache
def _frame() -> SeriesFrame:
    """100 minutes of a two-node stock fleet whose n2 engine leaks 64 MiB a minute from 30 min."""
    sc = Scenario(name="t", nodes=2, gpus_per_node=1, base_rps=0.5, daily_shape=False,
                  truth=Truth(layer="none", rule="none"), telemetry="stock",
                  faults=[ScenarioFault(kind="rss_leak", node="n2", start=1800.0, strength=64.0)])
    store, _fleet = generate(sc, 100 / 1440, 60.0, END_S)
    with tempfile.TemporaryDirectory() as tmp:
        store.write_parquet(Path(tmp))
        raw = RawStore.from_history(tmp)
    frames, _step = signal_frames(raw, {"process_rss_trend": SPEC}, stock=True)
    return frames["process_rss_trend"]


def test_the_engine_container_is_the_process_as_a_share_of_its_node() -> None:
    frame = _frame()
    labels = [frame.labels_of(c) for c in frame.values.columns]
    assert sorted((la["node"], la["process"]) for la in labels) == [("n1", "vllm"), ("n2", "vllm")]
    n1 = next(c for c in frame.values.columns if frame.labels_of(c)["node"] == "n1")
    assert frame.values[n1].dropna().iloc[0] == np.float32(BASE_RSS_BYTES / HOST_MEMORY_BYTES)


def test_a_leaking_engine_on_a_stock_fleet_is_seen() -> None:
    events = evaluate_signal(SPEC, _frame())
    assert {(dict(e.labels)["node"], dict(e.labels)["process"]) for e in events} == {("n2", "vllm")}
    assert all(e.time_to_full_s is not None and e.time_to_full_s > 0 for e in events)


def _store(rows: dict[str, tuple[dict[str, str], float]]) -> RawStore:
    index = pd.date_range("2026-01-07T00:00:00Z", periods=2, freq="60s")
    names = [name.split("#")[0] for name in rows]
    values = np.array([[v for _, v in rows.values()]] * 2, dtype=np.float32)
    return RawStore(index, names, [la for la, _ in rows.values()], values)


def test_only_containers_on_vllm_nodes_count_and_not_the_pod_cgroup() -> None:
    pod = {"namespace": "llm", "pod": "vllm-0"}
    kubelet = {"id": "/c", "image": "i", "name": "c", "job": "kubelet"}
    store = _store({
        "container_memory_working_set_bytes#1": ({**pod, **kubelet, "container": "vllm", "node": "g1"}, 5.0),
        "container_memory_working_set_bytes#2": ({**pod, **kubelet, "container": "", "node": "g1"}, 6.0),
        "container_memory_working_set_bytes#3": ({**kubelet, "namespace": "web", "pod": "app",
                                                  "container": "app", "node": "g2"}, 7.0),
        "kube_pod_info#1": ({**pod, "node": "g1", "uid": "u"}, 1.0),
        "kube_pod_info#2": ({"namespace": "web", "pod": "app", "node": "g2", "uid": "v"}, 1.0),
        "vllm:num_requests_running#1": ({"model_name": "m", "engine": "0", "node": "g1"}, 0.0),
        "kube_node_status_capacity#1": ({"node": "g1", "resource": "memory", "unit": "byte"}, 100.0),
        "kube_node_status_capacity#2": ({"node": "g1", "resource": "cpu", "unit": "core"}, 8.0),
    })
    out = {name: (data.labels, data.values[0].tolist()) for name, data in cadvisor_translated(store)}
    assert out == {
        "oximeter_process_resident_memory_bytes": (
            ({**pod, "node": "g1", "container": "vllm", "process": "vllm"},), [5.0]),
        "oximeter_host_memory_total_bytes": (({"node": "g1"},), [100.0]),
    }


def test_the_replay_writes_the_records_the_adapter_rules_write() -> None:
    rules = {r["record"] for g in load_groups(ADAPTERS_DIR / "kubernetes.rules.yml") for r in g["rules"]}
    assert metric_names(SPEC.promql) <= rules
