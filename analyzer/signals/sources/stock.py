"""A stock fleet's raw series (dcgm-exporter, vLLM) read under Oximeter's names: the translation
tables, the adapter recording rules Prometheus evaluates from them, and the same translation done
on a replay's raw history.

The live analyzer reads a stock fleet through the adapter recording rules
(``alert_rules/adapters/``). The plain translations among them — a DCGM field to its record in base
units, one bit of the clock-event mask per reason, vLLM's queue and latency histograms as the
gateway's — are written once, in the tables below: ``oximeter rules build`` renders them into the
marked part of the adapter files (:func:`render_dcgm`, :func:`render_vllm`), and a replay, which
has no Prometheus, applies them to the raw history (:func:`translated`). What the rules do beyond a
table (a GPU's ``up`` from any field it reports, the memory total from used + free + reserved,
each change of DCGM's last-Xid code counted as one event, one rule per code of
``oximeter/xids.py``) is written twice, as PromQL in :func:`render_dcgm` and as numpy here, and
``tests/analyzer/test_analyzer_stock_replay.py`` checks the replay against the rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from analyzer.signals.query import aggregate
from analyzer.signals.raw import Labeled, RawStore
from analyzer.signals.sources.cadvisor import cadvisor_translated
from analyzer.signals.sources.kube import kube_translated
from analyzer.signals.sources.kube_ready import ready_translated
from analyzer.signals.sources.vllm_info import cache_config_translated
from oximeter.dcgm_fields import DCGM_FIELDS, MIB
from oximeter.xids import APPLICATION_XIDS, PAGING_XIDS

_MIB = float(MIB)
# DCGM field -> (record, scale from DCGM's unit to the base unit, the record's fixed labels): the
# translated fields of the shared dcgm-exporter table (oximeter/dcgm_fields.py).
DCGM_GAUGES: dict[str, tuple[str, float, Mapping[str, str]]] = {
    f.name: (f.record, f.scale, dict(f.labels)) for f in DCGM_FIELDS if f.record is not None}
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
# dcgm-exporter label -> Oximeter's. The node is ``Hostname`` on released exporters and ``hostname``
# on newer ones (either is taken; ``Hostname`` wins where both are set). A MIG instance keeps its
# id, so each instance stays a series of its own.
_DCGM_RENAMES = {"hostname": "node", "Hostname": "node", "UUID": "uuid", "modelName": "gpu_model",
                 "GPU_I_ID": "gpu_instance"}
# Labels that change while the GPU does not (the workload's pod, the MIG profile's name, the driver
# version) or that name the value (the Xid's err_code and err_msg): dropped so a GPU is one series.
_DCGM_DROPPED = ("device", "DCGM_FI_DRIVER_VERSION", "pod", "namespace", "container", "pod_uid",
                 "GPU_I_PROFILE", "err_code", "err_msg")
# The labels that tell one GPU (or MIG instance) from another in dcgm-exporter's raw series.
_DCGM_GPU_KEY = ("UUID", "GPU_I_ID")


def _gpu_labels(labels: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    # hostname first, so that Hostname wins where both are set, as in the rules.
    keys = sorted(labels, key=lambda k: k != "hostname") if "hostname" in labels else labels
    out = {_DCGM_RENAMES.get(k, k): labels[k] for k in keys if k not in _DCGM_DROPPED}
    return {**out, **(extra or {})}


def _model_labels(labels: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in labels.items() if k != "model_name"}
    if "model_name" in labels:
        out["model"] = out["service"] = labels["model_name"]
    return out


def _xid_events(codes: np.ndarray, seen: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Per Xid code, the running count of the moments a GPU's last-Xid code turned to it.

    ``codes``: the GPU's last Xid code per step (NaN while it has no Xid series); ``seen``: whether
    the exporter reported the GPU at all at that step. A code is an event when the sample before
    was another code or no Xid series of a GPU the exporter did report: dcgm-exporter opens a new
    series per code (its ``err_code`` label) and none before the first Xid. A GPU that reappears
    with its exporter (a restart) holding an old code is no event.
    """
    previous = np.concatenate([[np.nan], codes[:-1]])
    was_seen = np.concatenate([[False], seen[:-1]])
    turned = np.isfinite(codes) & (codes > 0) & (codes != previous) & was_seen
    for code in np.unique(codes[turned]):
        counted = np.cumsum(turned & (codes == code)).astype(np.float32)
        yield int(code), np.where(np.isfinite(codes), counted, np.nan).astype(np.float32)


def _by_gpu(store: RawStore, fields: tuple[str, ...]) -> dict[tuple[tuple[str, str], ...], np.ndarray]:
    """The fields' columns merged per GPU (its translated labels): the largest value per step."""
    columns: dict[tuple[tuple[str, str], ...], list[np.ndarray]] = {}
    for field in fields:
        data = store.select(field)
        for col, labels in enumerate(data.labels):
            columns.setdefault(tuple(sorted(_gpu_labels(labels).items())), []).append(data.values[:, col])
    merged = {}
    for key, cols in columns.items():
        stacked = np.stack(cols, axis=1)
        known = np.isfinite(stacked).any(axis=1)
        merged[key] = np.where(known, np.nanmax(np.where(np.isfinite(stacked), stacked, -np.inf), axis=1),
                               np.nan).astype(np.float32)
    return merged


def _xid_counters(store: RawStore) -> Iterator[Labeled]:
    """Per GPU and Xid code, the running count of events of DCGM's last-Xid field."""
    codes = _by_gpu(store, ("DCGM_FI_DEV_XID_ERRORS",))
    present = _by_gpu(store, (*GPU_PRESENT_FIELDS, "DCGM_FI_DEV_XID_ERRORS"))
    for key, last in codes.items():
        for code, counted in _xid_events(last, np.isfinite(present[key])):
            yield Labeled(counted[:, None], ({**dict(key), "xid": str(code)},))


def translated(store: RawStore) -> Iterator[tuple[str, Labeled]]:
    """Every record the adapters would write, from the store's stock series."""
    for field, (record, scale, extra) in DCGM_GAUGES.items():
        data = store.select(field)
        if data.labels:
            yield record, Labeled(data.values * np.float32(scale), tuple(_gpu_labels(la, extra)
                                                                          for la in data.labels))
    used, free, reserved, total = (store.select(f"DCGM_FI_DEV_FB_{k}")
                                   for k in ("USED", "FREE", "RESERVED", "TOTAL"))
    if total.labels:
        yield "oximeter_gpu_memory_total_bytes", Labeled(total.values * np.float32(_MIB),
                                                         tuple(_gpu_labels(la) for la in total.labels))
    elif used.labels and used.labels == free.labels:
        parts = used.values + free.values + (reserved.values if reserved.labels == used.labels else 0)
        yield "oximeter_gpu_memory_total_bytes", Labeled(parts * np.float32(_MIB),
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
    if not store.select("DCGM_EXP_XID_ERRORS_TOTAL").labels:  # the exporter's own count wins
        for counted in _xid_counters(store):
            yield "oximeter_gpu_xid_errors_total", counted
    yield from kube_translated(store)
    yield from ready_translated(store)
    yield from cache_config_translated(store)
    yield from cadvisor_translated(store)
    for source, record in VLLM_GAUGES.items():
        data = aggregate(store.select(source), ("engine",), "sum")
        yield record, Labeled(data.values, tuple(_model_labels(la) for la in data.labels))
    for source, record in VLLM_HISTOGRAMS.items():
        for suffix in ("_bucket", "_sum", "_count"):
            data = aggregate(store.select(source + suffix), ("engine",), "sum")
            yield record + suffix, Labeled(data.values, tuple(_model_labels(la) for la in data.labels))


def read_history(history: str | Path | RawStore, *, stock: bool = False) -> RawStore:
    """A history (``oximeter sim history``'s folder, or its raw series already read); ``stock``: a
    stock fleet's, with what the adapter rules record from it, as its Prometheus holds it."""
    raw = history if isinstance(history, RawStore) else RawStore.from_history(history)
    return with_stock_translated(raw) if stock else raw


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
GENERATED_BEGIN = "# -- rendered from analyzer/signals/sources/stock.py's tables by `oximeter rules build` --"
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


def _dcgm_expr(inner: str | list[str], scale: float, dropped: tuple[str, ...] = ()) -> list[str]:
    """A GPU's series with DCGM's labels renamed and the workload's dropped (and ``dropped``), left
    to Oximeter's exporter on a node that runs it."""
    renames = ", ".join(f'"{new}", "$1", "{old}", "(.+)")' for old, new in _DCGM_RENAMES.items())
    body = [inner] if isinstance(inner, str) else inner
    return [f"max without ({', '.join([*dropped, *_DCGM_RENAMES, *_DCGM_DROPPED])}) (",
            "  " + "label_replace(" * len(_DCGM_RENAMES), *(f"    {line}" for line in body[:-1]),
            f"    {body[-1]},", f"    {renames}){_scaled(scale)}",
            "  unless on (node) oximeter_telemetry_up"]


# The step on which a change of DCGM's last-Xid code is looked for: each change is true on exactly
# one step of this grid whatever the scrape interval (30s by default, 15s at least).
_XID_STEP = "15s"
_XID_WINDOW = "5m"
# dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT counts the Xids of a sliding window (its
# --xid-count-window-size, 5 minutes unless set): on that default it is the 5m count itself.
_XID_COUNT_WINDOW_MS = "300000"


def _xid_event(code: int) -> list[str]:
    """DCGM's last-Xid series that turned to ``code`` on this step: not that code one step before,
    on a GPU the exporter reported one step before (so a first Xid series counts, a GPU that comes
    back with its exporter holding an old code does not)."""
    on = f"on ({', '.join(_DCGM_GPU_KEY)})"
    before = " or ".join(f"{f} offset {_XID_STEP}" for f in (*GPU_PRESENT_FIELDS, "DCGM_FI_DEV_XID_ERRORS"))
    last = "DCGM_FI_DEV_XID_ERRORS"
    return [f"({last} == {code} unless {on} {last} offset {_XID_STEP} == {code})", f"  and {on} ({before})"]


def _xid_rules(code: int) -> list[str]:
    event = _xid_event(code)
    count = [f"count_over_time(({event[0]}", f"{event[1]})[{_XID_WINDOW}:{_XID_STEP}])",
             f'  or DCGM_EXP_XID_ERRORS_COUNT{{xid="{code}",window_size_in_ms="{_XID_COUNT_WINDOW_MS}"}} > 0']
    when = [f"max_over_time((({event[0]}", f"{event[1]}) * 0 + time())[{_XID_WINDOW}:{_XID_STEP}])"]
    dropped = ("instance", "job", "xid", "window_size_in_ms")
    return [*_rule("node_gpu_xid:oximeter_gpu_xid_errors:increase5m", {"xid": str(code)},
                   _dcgm_expr(count, 1.0, dropped)),
            *_rule("oximeter_gpu_xid_last_timestamp_seconds", {"xid": str(code)},
                   _dcgm_expr(when, 1.0, dropped))]


def render_dcgm() -> list[str]:
    """The rules of ``alert_rules/adapters/dcgm.rules.yml``."""
    present = f"group without () ({' or '.join(GPU_PRESENT_FIELDS)})"
    lines = ['# DCGM has no "up" field: a GPU it reports is one it can read; a lost GPU vanishes instead',
             "# (gpu_series_vanished), so up is never 0 here.",
             *_rule("oximeter_gpu_up", {}, _dcgm_expr(present, 1.0)),
             "# The plain translations: each DCGM field to its record in base units (% to a 0-1 ratio, MiB",
             "# to bytes, MHz to Hz), and one bit of the clock-event-reasons mask per reason (NVML's",
             "# nvmlClocksEventReason* bits; the field was called CLOCK_THROTTLE_REASONS before DCGM 3.3), 1",
             "# while it is active. Fields off in dcgm-exporter's default counters record nothing until",
             "# enabled."]
    for field, (record, scale, extra) in DCGM_GAUGES.items():
        lines += _rule(record, extra, _dcgm_expr(field, scale))
    either = " or ".join(CLOCK_EVENT_FIELDS)
    for reason, bit in CLOCK_EVENT_BITS.items():
        lines += _rule("oximeter_gpu_clock_event_active", {"reason": reason},
                       _dcgm_expr(f"floor(({either}) / {bit}) % 2", 1.0))
    total = ["DCGM_FI_DEV_FB_TOTAL",
             "  or (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED)",
             "  or (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)"]
    lines += ["# The default counters have no total: used + free (+ reserved where exported) is the card's",
              "# size.", *_rule("oximeter_gpu_memory_total_bytes", {}, _dcgm_expr(total, _MIB))]
    lines += [
        "# DCGM_FI_DEV_XID_ERRORS is the code of the last Xid (a gauge), not a count; dcgm-exporter labels",
        "# it err_code and err_msg, so each new code is a new series and the old one goes stale, and a",
        "# GPU has no such series before its first Xid. Per code: the changes to it in the last 5m (a",
        "# first Xid series counts; the same code twice in a row is one, unless DCGM_EXP_XID_ERRORS_COUNT",
        "# is enabled, which counts repeats), and the time of the latest, which the Xid alerts read.",
        "# One rule per code the rules and signals read: the paging set and the application faults."]
    for code in sorted((*PAGING_XIDS, *APPLICATION_XIDS)):
        lines += _xid_rules(code)
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
