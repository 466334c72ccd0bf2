"""The simulator's stock exposition against the exporters' real output (tests/fixtures/real/): every
family it writes has the name, type, label names and buckets a real exporter gives it, and every
family an adapter rule reads that a real exporter writes, the simulator writes too. Fails when the
simulator drifts from the real exporters."""

from __future__ import annotations

from functools import cache

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from real_exposition import Sample, fixture, read

from analyzer.signals.stock_inputs import adapter_rules
from exporter.dcgm import DCGM_COUNTER_FIELDS, DCGM_DEFAULT_FIELDS, DCGM_FIELDS
from simulator.exposition import engine_families
from simulator.history import build_fleet
from simulator.kube_state import kube_state_families
from simulator.node_history import NodeHistory
from simulator.scenario import Scenario, ScenarioFault, Truth
from simulator.series import SeriesStore

# job -> its captures
CAPTURES = {
    "dcgm-exporter": ("dcgm-exporter.prom", "dcgm-exporter-derived.prom"),
    "vllm": ("vllm-v1.prom",),
    "kube-state-metrics": ("kube-state-metrics.prom",),
}
# Families only the simulator writes, and why no capture has them.
SIMULATION_ONLY = {
    "oximeter_simulation_info": "the marker that says an engine is simulated",
    "oximeter_sim_aborted_requests_total": "the simulator's own count of client aborts",
    # vLLM's later name for time_per_output_token (same buckets), newer than the capture's source.
    "vllm:inter_token_latency_seconds": "vLLM's name after the capture's source commit",
}


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


@cache
def _simulated() -> dict[str, tuple[dict[str, str], list[Sample]]]:
    """Each job's exposition on both nodes of a small stock fleet, as its /metrics would read."""
    # n1's engine was OOM-killed a second ago, so every kube-state-metrics family has a sample.
    sc = Scenario(name="t", nodes=2, gpus_per_node=2, base_rps=1.0, daily_shape=False,
                  truth=Truth(layer="none", rule="none"), telemetry="stock",
                  faults=[ScenarioFault(kind="engine_oom", node="n1", start=0.0)])
    fleet = build_fleet(sc, 0.01)
    fleet.apply_restarts(1.0)
    jobs: dict[str, list[Metric]] = {job: [] for job in CAPTURES}
    for name in fleet.nodes:
        node = NodeHistory(sc, fleet, name, SeriesStore([0.0]), 60.0, 0.0)
        jobs["dcgm-exporter"] += node.exporter.collect()
        jobs["vllm"] += engine_families(sc.model, node.engine, name)
    jobs["kube-state-metrics"] += kube_state_families(fleet, 1.0)
    out = {}
    for job, families in jobs.items():
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(families))  # type: ignore[arg-type]
        out[job] = read(generate_latest(registry).decode())
    return out


Shape = tuple[str, set[frozenset[str]], set[str]]


def _shapes(types: dict[str, str], samples: list[Sample]) -> dict[str, Shape]:
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


def test_every_simulated_family_has_the_real_shape() -> None:
    for job, captures in CAPTURES.items():
        real: dict[str, Shape] = {}
        for name in captures:
            for family, (kind, names, buckets) in _shapes(*fixture(name)).items():
                seen = real.get(family, (kind, set(), set()))
                real[family] = (kind, seen[1] | names, seen[2] | buckets)
        for family, (kind, names, buckets) in _shapes(*_simulated()[job]).items():
            if family in SIMULATION_ONLY:
                continue
            assert family in real, f"{job}: the simulator writes {family}, which no real {job} capture has"
            real_kind, real_names, real_buckets = real[family]
            # dcgm-exporter types some `counter` without `_total`, which client_python cannot write.
            assert kind == ("gauge" if family in DCGM_COUNTER_FIELDS else real_kind), (job, family, kind)
            assert names and names <= real_names, (job, family, names, real_names)
            assert buckets == real_buckets, (job, family)


def test_the_simulator_writes_every_real_family_an_adapter_reads() -> None:
    inputs = {i for rule in adapter_rules() for i in rule.inputs}
    for job, captures in CAPTURES.items():
        written = {s.name for s in _simulated()[job][1]}
        for name in captures:
            # dcgm-exporter's fields the default counters leave off are not the stand-in's to write.
            real = {s.name for s in fixture(name)[1]
                    if not s.name.startswith("DCGM_") or s.name in DCGM_DEFAULT_FIELDS}
            assert sorted(real & inputs - written) == [], (job, name)


def test_the_xid_series_take_the_real_shapes() -> None:
    """One node writes a "No Error" series per GPU, the other none before a GPU's first Xid."""
    xid = [s for s in _simulated()["dcgm-exporter"][1] if s.name == "DCGM_FI_DEV_XID_ERRORS"]
    assert {dict(s.labels)["Hostname"] for s in xid} == {"n1"}
    codes = {(dict(s.labels)["err_code"], dict(s.labels)["err_msg"], s.value) for s in xid}
    assert codes == {("0", "No Error", 0)}


def test_the_default_fields_are_the_real_default_counters() -> None:
    """The stand-in's (and config check's) default fields: those of dcgm-exporter's real
    default-counters.csv that Oximeter's exporter can write."""
    from real_exposition import REAL

    from analyzer.signals.stock_inputs import read_counters_csv

    enabled = read_counters_csv(REAL / "dcgm-default-counters.csv")
    assert enabled & {name for name, _, _ in DCGM_FIELDS} == DCGM_DEFAULT_FIELDS
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in enabled  # shipped commented out
    # dcgm-exporter's own Xid counters exist (listed, commented out) but are off by default.
    text = (REAL / "dcgm-default-counters.csv").read_text()
    assert "# DCGM_EXP_XID_ERRORS_TOTAL," in text and "# DCGM_EXP_XID_ERRORS_COUNT," in text
    assert not {"DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_XID_ERRORS_COUNT"} & enabled
