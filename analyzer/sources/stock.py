"""A stock fleet's raw series (dcgm-exporter, vLLM) read under Oximeter's names, for replays.

The live analyzer reads a stock fleet through the adapter recording rules
(``alert_rules/adapters/``) that Prometheus evaluates. A replay has no Prometheus, so this module
does on the raw history what those rules do, as the signals' query expressions
(``analyzer/query.py``) do for the signals' own rules: DCGM's units to base units,
``Hostname``/``UUID``/``modelName`` to ``node``/``uuid``/``gpu_model``, the clock-event bitmask
split per reason, each change of DCGM's last-Xid code counted as one event, and vLLM's queue and
latency histograms as the gateway's (engines summed, ``model`` and ``service`` from ``model_name``).
``tests/analyzer/test_analyzer_stock_replay.py`` checks every entry against the adapter rule of the
same record and inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from analyzer.query import aggregate
from analyzer.sources.raw import Labeled, RawStore

_MIB = 1048576.0
# DCGM field -> (record, scale to base units, the record's fixed labels), as the adapter rules.
DCGM_GAUGES: dict[str, tuple[str, float, Mapping[str, str]]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("oximeter_gpu_temperature_celsius", 1.0, {}),
    "DCGM_FI_DEV_GPU_UTIL": ("oximeter_gpu_utilization_ratio", 0.01, {}),
    "DCGM_FI_DEV_FB_USED": ("oximeter_gpu_memory_used_bytes", _MIB, {}),
    "DCGM_FI_DEV_POWER_USAGE": ("oximeter_gpu_power_watts", 1.0, {}),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("oximeter_gpu_power_limit_watts", 1.0, {}),
    "DCGM_FI_DEV_SM_CLOCK": ("oximeter_gpu_sm_clock_hertz", 1e6, {}),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("oximeter_gpu_sm_clock_max_hertz", 1e6, {}),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("oximeter_gpu_ecc_errors_total", 1.0, {"kind": "corrected"}),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("oximeter_gpu_ecc_errors_total", 1.0, {"kind": "uncorrected"}),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("oximeter_gpu_pcie_replay_total", 1.0, {}),
    "DCGM_EXP_XID_ERRORS_TOTAL": ("oximeter_gpu_xid_errors_total", 1.0, {}),
}
# Bit -> reason of DCGM's clock-event reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before 3.3).
CLOCK_EVENT_BITS: dict[str, int] = {"idle": 1, "power_cap": 4, "hw_slowdown": 8, "sw_thermal": 32,
                                    "hw_thermal": 64, "power_brake": 128}
CLOCK_EVENT_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
GPU_PRESENT_FIELDS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
# vLLM histogram -> the gateway histogram whose name the signals read.
VLLM_HISTOGRAMS: dict[str, str] = {
    "vllm:request_queue_time_seconds": "oximeter_queue_wait_seconds",
    "vllm:time_to_first_token_seconds": "oximeter_time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds": "oximeter_request_duration_seconds",
}
_DCGM_RENAMES = {"Hostname": "node", "UUID": "uuid", "modelName": "gpu_model"}
_DCGM_DROPPED = ("device", "DCGM_FI_DRIVER_VERSION", "pod", "namespace", "container")


def _gpu_labels(labels: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    out = {_DCGM_RENAMES.get(k, k): v for k, v in labels.items() if k not in _DCGM_DROPPED}
    return {**out, **(extra or {})}


def _model_labels(labels: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in labels.items() if k != "model_name"}
    if "model_name" in labels:
        out["model"] = out["service"] = labels["model_name"]
    return out


def _xid_events(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Per Xid code, the running count of the moments DCGM's last-Xid field turned to it."""
    previous = np.concatenate([[np.nan], codes[:-1]])
    turned = np.isfinite(codes) & (codes != previous) & np.isfinite(previous) & (codes > 0)
    for code in np.unique(codes[turned]):
        counted = np.cumsum(turned & (codes == code)).astype(np.float32)
        yield int(code), np.where(np.isfinite(codes), counted, np.nan).astype(np.float32)


def translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """Every record the adapters would write, from the store's stock series."""
    for field, (record, scale, extra) in DCGM_GAUGES.items():
        data = store.select(field)
        if data.labels:
            yield record, Labeled(data.values * np.float32(scale), tuple(_gpu_labels(la, extra)
                                                                          for la in data.labels))
    used, free, total = (store.select(f"DCGM_FI_DEV_FB_{k}") for k in ("USED", "FREE", "TOTAL"))
    if total.labels:
        yield "oximeter_gpu_memory_total_bytes", Labeled(total.values * np.float32(_MIB),
                                                         tuple(_gpu_labels(la) for la in total.labels))
    elif used.labels and used.labels == free.labels:
        yield "oximeter_gpu_memory_total_bytes", Labeled((used.values + free.values) * np.float32(_MIB),
                                                         tuple(_gpu_labels(la) for la in used.labels))
    present = [store.select(f) for f in GPU_PRESENT_FIELDS]
    for data in present:
        if data.labels:
            up = np.where(np.isnan(data.values), np.nan, 1.0).astype(np.float32)
            yield "oximeter_gpu_up", Labeled(up, tuple(_gpu_labels(la) for la in data.labels))
            break
    for field in CLOCK_EVENT_FIELDS:
        mask = store.select(field)
        if mask.labels:
            for reason, bit in CLOCK_EVENT_BITS.items():
                active = (np.floor(mask.values / bit) % 2).astype(np.float32)
                yield "oximeter_gpu_clock_event_active", Labeled(
                    active, tuple(_gpu_labels(la, {"reason": reason}) for la in mask.labels))
            break
    if not store.select("DCGM_EXP_XID_ERRORS_TOTAL").labels:
        last = store.select("DCGM_FI_DEV_XID_ERRORS")
        for col, labels in enumerate(last.labels):
            for code, counted in _xid_events(last.values[:, col]):
                yield "oximeter_gpu_xid_errors_total", Labeled(
                    counted[:, None], (_gpu_labels(labels, {"xid": str(code)}),))
    waiting = aggregate(store.select("vllm:num_requests_waiting"), ("engine",), "sum")
    yield "oximeter_queue_length", Labeled(waiting.values, tuple(_model_labels(la) for la in waiting.labels))
    for source, record in VLLM_HISTOGRAMS.items():
        for suffix in ("_bucket", "_sum", "_count"):
            data = aggregate(store.select(source + suffix), ("engine",), "sum")
            yield record + suffix, Labeled(data.values, tuple(_model_labels(la) for la in data.labels))


def with_stock_translated(store: RawStore) -> RawStore:
    """``store`` plus every series the adapter rules would record from its stock series."""
    names, labels, columns = list(store.names), list(store.labels), [store.values]
    for record, data in translated(store):
        names += [record] * len(data.labels)
        labels += list(data.labels)
        columns.append(data.values.astype(np.float32))
    return RawStore(store.index, names, labels, np.concatenate(columns, axis=1))
