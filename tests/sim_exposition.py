"""The simulator's stock expositions as their /metrics would read, and the shape of a family (type,
label names, buckets): what the contract tests compare against real exporters' output, recorded
(tests/fixtures/real/) or live (a real vLLM engine)."""

from __future__ import annotations

from functools import cache

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from real_exposition import Sample, read

from simulator.cadvisor import cadvisor_families
from simulator.exposition import engine_families
from simulator.history import build_fleet
from simulator.kube_state import kube_state_families
from simulator.node_history import NodeHistory
from simulator.scenario import Scenario, ScenarioFault, Truth
from simulator.series import SeriesStore

JOBS = ("dcgm-exporter", "vllm", "kube-state-metrics", "kubelet")
Shape = tuple[str, set[frozenset[str]], set[str]]


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


@cache
def simulated_stock() -> dict[str, tuple[dict[str, str], list[Sample]]]:
    """Each job's exposition on both nodes of a small stock fleet, as its /metrics would read."""
    # n1's engine was OOM-killed a second ago, so every kube-state-metrics family has a sample.
    sc = Scenario(name="t", nodes=2, gpus_per_node=2, base_rps=1.0, daily_shape=False,
                  truth=Truth(layer="none", rule="none"), telemetry="stock",
                  faults=[ScenarioFault(kind="engine_oom", node="n1", start=0.0)])
    fleet = build_fleet(sc, 0.01)
    fleet.apply_restarts(1.0)
    jobs: dict[str, list[Metric]] = {job: [] for job in JOBS}
    for name in fleet.nodes:
        node = NodeHistory(sc, fleet, name, SeriesStore([0.0]), 60.0, 0.0)
        jobs["dcgm-exporter"] += node.exporter.collect()
        jobs["vllm"] += engine_families(sc.model, node.engine, name)
        jobs["kubelet"] += cadvisor_families(fleet, name, 1.0)
    jobs["kube-state-metrics"] += kube_state_families(fleet, 1.0)
    out = {}
    for job, families in jobs.items():
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(families))  # type: ignore[arg-type]
        out[job] = read(generate_latest(registry).decode())
    return out


def shapes(types: dict[str, str], samples: list[Sample]) -> dict[str, Shape]:
    """family -> (type, the label-name sets of its samples, its histogram buckets)."""
    out: dict[str, Shape] = {}
    for family, kind in types.items():
        parts = ("_bucket", "_count", "_sum") if kind == "histogram" else ()
        names = {family, *(family + part for part in parts)}
        mine = [s for s in samples if s.name in names]
        label_sets = {frozenset(k for k, _ in s.labels if k != "le") for s in mine}
        buckets = {v for s in mine for k, v in s.labels if k == "le"}
        out[family] = (kind, label_sets, buckets)
    return out
