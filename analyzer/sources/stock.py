"""A stock fleet's raw series (dcgm-exporter, vLLM) read under Oximeter's names: the translation
tables, the adapter recording rules Prometheus evaluates from them, and the same translation done
on a replay's raw history.

The live analyzer reads a stock fleet through the adapter recording rules
(``alert_rules/adapters/``). The plain translations among them — a DCGM field to its record in base
units, one bit of the clock-event mask per reason, vLLM's queue and latency histograms as the
gateway's — are written once, in the tables below: ``oximeter rules build`` renders them into the
marked part of the adapter files (:func:`render_dcgm`, :func:`render_vllm`), and a replay, which
has no Prometheus, applies them to the raw history (:func:`translated`). What the rules do beyond a
table (a GPU's ``up`` from any field it reports, the memory total from used + free, each change
of DCGM's last-Xid code counted as one event) is written by hand in both, and
``tests/analyzer/test_analyzer_stock_replay.py`` checks the replay against the rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from analyzer.query import aggregate
from analyzer.sources.raw import Labeled, RawStore

_MIB = 1048576.0
# DCGM field -> (record, scale from DCGM's unit to the base unit, the record's fixed labels). The ECC
# counts are volatile (since the driver loaded), as the exporter's counter.
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
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("oximeter_gpu_remapped_rows", 1.0, {"kind": "correctable"}),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("oximeter_gpu_remapped_rows", 1.0, {"kind": "uncorrectable"}),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("oximeter_gpu_row_remap_pending", 1.0, {}),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("oximeter_gpu_row_remap_failure", 1.0, {}),
    # dcgm-exporter's own Xid counter (an exporter field, labelled xid) is already a counter.
    "DCGM_EXP_XID_ERRORS_TOTAL": ("oximeter_gpu_xid_errors_total", 1.0, {}),
}
# Bit -> reason of DCGM's clock-event reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before 3.3).
CLOCK_EVENT_BITS: dict[str, int] = {"idle": 1, "power_cap": 4, "hw_slowdown": 8, "sw_thermal": 32,
                                    "hw_thermal": 64, "power_brake": 128}
CLOCK_EVENT_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
GPU_PRESENT_FIELDS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
# vLLM gauge -> the gateway gauge whose name the signals read (summed over the node's engines).
VLLM_GAUGES: dict[str, str] = {
    # Requests waiting for a slot in the engine's scheduler: the queue a gateway would hold.
    "vllm:num_requests_waiting": "oximeter_queue_length",
}
# vLLM histogram -> the gateway histogram whose name the signals read.
VLLM_HISTOGRAMS: dict[str, str] = {
    # Time in the engine's waiting queue: the gateway's queue wait, measured inside the engine.
    "vllm:request_queue_time_seconds": "oximeter_queue_wait_seconds",
    # TTFT as the engine measures it (from its arrival there): the SLO signal reads it where no
    # gateway does.
    "vllm:time_to_first_token_seconds": "oximeter_time_to_first_token_seconds",
    # End-to-end request time inside the engine (no route label: the engine does not know it).
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
    for source, record in VLLM_GAUGES.items():
        data = aggregate(store.select(source), ("engine",), "sum")
        yield record, Labeled(data.values, tuple(_model_labels(la) for la in data.labels))
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


# -- the adapter rules ------------------------------------------------------------------------------
# The lines (indentation aside) that enclose the rendered part of an adapter rules file.
GENERATED_BEGIN = "# -- rendered from analyzer/sources/stock.py's tables by `oximeter rules build` --"
GENERATED_END = "# -- end of the rendered rules --"


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else repr(value)


def _scaled(scale: float) -> str:
    """`` * 1048576``, `` / 100`` or '' (DCGM's unit to the base unit)."""
    if scale == 1.0:
        return ""
    return f" / {_number(1 / scale)}" if scale < 1 else f" * {_number(scale)}"


def _rule(record: str, labels: Mapping[str, str], expr: list[str]) -> list[str]:
    head = [f"      - record: {record}"]
    if labels:
        head.append("        labels: {" + ", ".join(f'{k}: "{v}"' for k, v in labels.items()) + "}")
    return [*head, "        expr: |", *(f"          {line}" for line in expr)]


def _dcgm_expr(inner: str, scale: float) -> list[str]:
    """A GPU's series with DCGM's labels renamed and the workload's dropped, left to Oximeter's
    exporter on a node that runs it."""
    renames = ", ".join(f'"{new}", "$1", "{old}", "(.+)")' for old, new in _DCGM_RENAMES.items())
    return [f"max without ({', '.join([*_DCGM_RENAMES, *_DCGM_DROPPED])}) (",
            "  " + "label_replace(" * len(_DCGM_RENAMES), f"    {inner},", f"    {renames}){_scaled(scale)}",
            "  unless on (node) oximeter_telemetry_up"]


def render_dcgm() -> list[str]:
    """The table-made rules of ``alert_rules/adapters/dcgm.rules.yml``."""
    lines = []
    for field, (record, scale, extra) in DCGM_GAUGES.items():
        lines += _rule(record, extra, _dcgm_expr(field, scale))
    either = " or ".join(CLOCK_EVENT_FIELDS)
    for reason, bit in CLOCK_EVENT_BITS.items():
        lines += _rule("oximeter_gpu_clock_event_active", {"reason": reason},
                       _dcgm_expr(f"floor(({either}) / {bit}) % 2", 1.0))
    return lines


def render_vllm() -> list[str]:
    """The table-made rules of ``alert_rules/adapters/vllm.rules.yml``: engines summed, ``model``
    and ``service`` from ``model_name``, left to Oximeter's gateway where it runs."""
    sources = [*VLLM_GAUGES.items(), *((f"{s}{suffix}", f"{r}{suffix}") for s, r in VLLM_HISTOGRAMS.items()
                                      for suffix in ("_bucket", "_sum", "_count"))]
    lines = []
    for source, record in sources:
        lines += _rule(record, {}, [
            "label_replace(label_replace(label_replace(",
            f"  sum without (engine) ({source}),",
            '  "model", "$1", "model_name", "(.+)"), "service", "$1", "model_name", "(.+)"), '
            '"model_name", "", "", "")',
            "  unless on (node, model) oximeter_target_info"])
    return lines


def spliced(text: str, rules: list[str], where: str) -> str:
    """``text`` (a rules file) with the part between the generated markers replaced by ``rules``."""
    lines = text.splitlines()
    bare = [line.strip() for line in lines]
    try:
        begin, end = bare.index(GENERATED_BEGIN), bare.index(GENERATED_END)
    except ValueError:
        raise ValueError(f"{where}: no rendered part (the lines {GENERATED_BEGIN!r} and "
                         f"{GENERATED_END!r})") from None
    return "\n".join([*lines[:begin + 1], *rules, *lines[end:]]) + "\n"
