"""A stock fleet's history (``telemetry: stock``) and its replay: the simulator presents what a
stock fleet exports, and the replay's translation (``analyzer/signals/sources/stock.py``) gives back the
series Oximeter's own exporter and gateway would have, as the adapter rules do in Prometheus."""

from __future__ import annotations

import math
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from alert_rules import ADAPTERS_DIR
from analyzer.signals.raw import RawStore
from analyzer.signals.sources.stock import (
    CLOCK_EVENT_BITS,
    CLOCK_EVENT_FIELDS,
    DCGM_GAUGES,
    VLLM_HISTOGRAMS,
    _xid_events,
    with_stock_translated,
)
from analyzer.signals.stock_inputs import adapter_rules
from exporter.dcgm import DCGM_DEFAULT_FIELDS
from simulator.history import generate
from simulator.scenario import Scenario, Truth

END_S = 1767808800.0


def _scenario(telemetry: str) -> Scenario:
    return Scenario(name="t", nodes=2, gpus_per_node=2, base_rps=1.0, daily_shape=False,
                    truth=Truth(layer="none", rule="none"), telemetry=telemetry)  # type: ignore[arg-type]


@cache
def _history(telemetry: str) -> RawStore:
    """Twenty minutes of the same fleet and traffic, as Oximeter's or a stock fleet presents it."""
    store, _fleet = generate(_scenario(telemetry), 20 / 1440, 60.0, END_S)
    with tempfile.TemporaryDirectory() as tmp:
        store.write_parquet(Path(tmp))
        return RawStore.from_history(tmp)


def test_every_translation_is_the_adapter_rule_of_that_record_and_input() -> None:
    rules = adapter_rules(ADAPTERS_DIR)

    def rule(record: str, labels: dict[str, str], source: str) -> bool:
        return any(r.record == record and dict(r.labels) == labels and source in r.inputs for r in rules)

    for source, (record, _scale, labels) in DCGM_GAUGES.items():
        assert rule(record, dict(labels), source), (source, record)
    for reason in CLOCK_EVENT_BITS:
        assert all(rule("oximeter_gpu_clock_event_active", {"reason": reason}, f) for f in CLOCK_EVENT_FIELDS)
    for source, record in VLLM_HISTOGRAMS.items():
        for suffix in ("_bucket", "_sum", "_count"):
            assert rule(record + suffix, {}, source + suffix)
    assert rule("oximeter_queue_length", {}, "vllm:num_requests_waiting")


def test_the_bit_of_each_clock_reason_is_the_adapters() -> None:
    text = (ADAPTERS_DIR / "dcgm.rules.yml").read_text(encoding="utf-8")
    for reason, bit in CLOCK_EVENT_BITS.items():
        block = text.split(f'reason: "{reason}"', 1)[1].split("- record:", 1)[0]
        assert f"/ {bit}) % 2" in block, reason


def test_each_change_of_the_last_xid_code_is_one_event() -> None:
    nan = math.nan
    codes = np.array([0, 0, 79, 79, 0, 79, nan, 13, 13, 0, 13, 79], dtype=np.float32)
    seen = np.array([True] * 6 + [False] + [True] * 5)
    events = {code: counted.tolist() for code, counted in _xid_events(codes, seen)}
    assert set(events) == {13, 79}
    assert events[79][-1] == 3 and events[79][2] == 1 and events[79][5] == 2  # 0→79, 0→79, 13→79
    # A GPU that comes back with its exporter (not seen the step before) holding a code: no event.
    assert events[13][8] == 0 and events[13][-1] == 1
    assert math.isnan(events[13][6])


def test_a_first_xid_series_is_an_event_on_a_gpu_already_reported() -> None:
    """dcgm-exporter writes no Xid series before a GPU's first Xid: its first code is the event."""
    codes = np.array([np.nan, np.nan, 48, 48], dtype=np.float32)
    events = dict(_xid_events(codes, np.ones(4, dtype=bool)))
    assert events[48].tolist()[2:] == [1, 1]


def test_a_stock_fleet_exports_no_oximeter_series_and_dcgm_exporters_defaults() -> None:
    raw = _history("stock")
    names = set(raw.names.tolist())
    # The simulator's own markers say it is a simulation; nothing else carries Oximeter's names.
    assert {n for n in names if n.startswith("oximeter_")} <= {"oximeter_simulation_info",
                                                                 "oximeter_sim_aborted_requests_total"}
    assert {n for n in names if n.startswith("DCGM_")} == set(DCGM_DEFAULT_FIELDS)
    assert not any("ECC" in n for n in names)
    assert {"kube_pod_container_status_restarts_total", "kube_pod_status_ready", "kube_node_status_condition",
            "vllm:num_requests_waiting", "vllm:request_queue_time_seconds_bucket"} <= names
    temps = raw.select("DCGM_FI_DEV_GPU_TEMP")
    assert sorted((la["Hostname"], la["gpu"]) for la in temps.labels) == [
        ("n1", "0"), ("n1", "1"), ("n2", "0"), ("n2", "1")]


@pytest.mark.parametrize(("record", "tolerance"), [
    ("oximeter_gpu_temperature_celsius", 1e-3),
    ("oximeter_gpu_utilization_ratio", 0.005),  # DCGM reports whole percent
    ("oximeter_gpu_memory_used_bytes", 1048576),  # and whole MiB
    ("oximeter_gpu_memory_total_bytes", 2 * 1048576),
    ("oximeter_gpu_sm_clock_hertz", 0.5e6),  # and whole MHz
    ("oximeter_gpu_up", 0),
])
def test_translated_gpu_series_are_what_oximeters_exporter_reports(record: str, tolerance: float) -> None:
    # The same fleet, seed and traffic: with no queue at the gateway, the engines and GPUs run alike.
    ours, stock = _history("oximeter"), with_stock_translated(_history("stock"))
    keys = ("node", "gpu", "uuid", "gpu_model")

    def by_gpu(store: RawStore) -> dict[tuple[str, ...], np.ndarray]:
        data = store.select(record)
        return {tuple(la[k] for k in keys): data.values[:, i] for i, la in enumerate(data.labels)}

    expected, got = by_gpu(ours), by_gpu(stock)
    assert set(got) == set(expected) and len(got) == 4
    for gpu, values in expected.items():
        assert np.nanmax(np.abs(got[gpu] - values)) <= tolerance, (record, gpu)


def test_translated_engine_queue_and_latency_carry_the_gateways_labels() -> None:
    stock = with_stock_translated(_history("stock"))
    for record in ("oximeter_queue_length", "oximeter_queue_wait_seconds_count",
                   "oximeter_time_to_first_token_seconds_bucket"):
        data = stock.select(record)
        assert data.labels and all(la["model"] == la["service"] == "sim-llama-3-8b" and "engine" not in la
                                   and "model_name" not in la for la in data.labels), record
    requests = stock.select("oximeter_time_to_first_token_seconds_count")
    assert {la["node"] for la in requests.labels} == {"n1", "n2"}
    assert float(np.nanmax(requests.values)) > 0
