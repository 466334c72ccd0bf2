"""``--naming dcgm``: the readings also under dcgm-exporter 4.x names, units and labels.

So existing DCGM dashboards keep working; ``--naming dcgm-exporter`` (the simulator's stand-in for
a stock fleet) writes only these, with dcgm-exporter's default fields. Names and HELP follow
dcgm-exporter's ``etc/default-counters.csv`` (and the fields a custom counters file can add: ECC,
NVLink errors, the max SM clock, row-remap pending, the framebuffer total); all are gauges,
because client_python cannot write a counter without ``_total`` (dcgm-exporter types some of these
``counter``, a difference Prometheus's rules do not see). Units are DCGM's: percent, MiB, MHz, W,
°C. Labels: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, and for the
stand-in the driver version that the default counters add as a label. The last Xid carries
``err_code`` and ``err_msg`` as dcgm-exporter 3.3.6-3.4.2 and later write them, so each code is a
series of its own. A GPU that is down exports nothing here: DCGM has no ``up`` series, and a blank
reading is not a zero.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence

from prometheus_client.core import GaugeMetricFamily

from exporter.backends.base import GpuReading
from oximeter.dcgm_fields import FIELDS, MIB

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
# The stand-in's value of the DCGM_FI_DRIVER_VERSION label (a label field of the default counters).
SIMULATED_DRIVER_VERSION = "simulated"
# dcgm-exporter's err_msg of the Xid codes Oximeter reads (internal/pkg/collector/xid_errors.go);
# others read "Unknown Error" here.
XID_MESSAGES: dict[int, str] = {
    0: "No Error", 13: "Graphics Engine Exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 74: "NVLINK Error",
    79: "GPU has fallen off the bus", 92: "High single-bit ECC error rate", 94: "Contained ECC error",
    95: "Uncontained ECC error", 119: "GSP RPC Timeout", 120: "GSP Error",
}
# The framebuffer the driver keeps for itself (DCGM_FI_DEV_FB_RESERVED) as the stand-in writes it, a
# share of the card (a real card keeps some hundreds of MiB).
_RESERVED_SHARE = 0.006


def _blank_until_first_xid(node: str) -> bool:
    """Whether this node's exporter writes no Xid series before the GPU's first Xid (an exporter
    with an embedded host engine has no value until then) rather than a "No Error" series at 0;
    both happen on real fleets, so the stand-in splits its nodes between them: a name ending in an
    even number (or, without one, an even checksum) has none."""
    digits = re.search(r"\d+$", node)
    return (int(digits.group()) if digits else zlib.crc32(node.encode())) % 2 == 0


def _last_xid(r: GpuReading) -> float | None:
    if r.xid is None:
        return None
    seen = [s for s in r.xid if s.count > 0]
    # DCGM reports the code of the most recent Xid, 0 while there has been none.
    return float(max(seen, key=lambda s: s.last_timestamp_seconds).xid) if seen else 0.0


def _mib(value: int | None) -> float | None:
    return None if value is None else float(value // MIB)


def _reserved_mib(r: GpuReading) -> float | None:
    # The stand-in's share (NVML's reading has no reserved memory): free is what is left of it.
    if r.memory_total_bytes is None:
        return None
    return float(int(r.memory_total_bytes * _RESERVED_SHARE) // MIB)


def _free_mib(r: GpuReading) -> float | None:
    if r.memory_total_bytes is None or r.memory_used_bytes is None:
        return None
    return float(max(0, r.memory_total_bytes - r.memory_used_bytes) // MIB)


def _mhz(value: float | None) -> float | None:
    return None if value is None else round(value / 1e6)


def _percent(ratio: float | None) -> float | None:
    return None if ratio is None else round(ratio * 100)


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


def _nvlink_errors(kind: str) -> Callable[[GpuReading], float | None]:
    """The GPU's count of one NVLink error kind summed over its links (DCGM's *_COUNT_TOTAL)."""
    def total(r: GpuReading) -> float | None:
        counts = [dict(link.errors).get(kind) for link in r.nvlinks or ()]
        known = [c for c in counts if c is not None]
        return float(sum(known)) if known else None
    return total


# Field -> the reading's value in DCGM's unit, or None: the fields written here, in this order
# (names, types and HELP from the shared table, oximeter/dcgm_fields.py).
_VALUES: dict[str, Callable[[GpuReading], float | None]] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda r: _mhz(r.sm_clock_hertz),
    "DCGM_FI_DEV_MAX_SM_CLOCK": lambda r: _mhz(r.sm_clock_max_hertz),
    "DCGM_FI_DEV_GPU_TEMP": lambda r: _num(r.temperature_celsius),
    "DCGM_FI_DEV_POWER_USAGE": lambda r: _num(r.power_watts),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda r: _num(r.power_limit_watts),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda r: _num(r.pcie_replay_total),
    "DCGM_FI_PROF_PCIE_TX_BYTES": lambda r: _num(r.pcie_transmit_bytes_per_second),
    "DCGM_FI_PROF_PCIE_RX_BYTES": lambda r: _num(r.pcie_receive_bytes_per_second),
    "DCGM_FI_DEV_GPU_UTIL": lambda r: _percent(r.utilization_ratio),
    "DCGM_FI_DEV_XID_ERRORS": _last_xid,
    "DCGM_FI_DEV_FB_FREE": _free_mib,
    "DCGM_FI_DEV_FB_USED": lambda r: _mib(r.memory_used_bytes),
    "DCGM_FI_DEV_FB_RESERVED": _reserved_mib,
    "DCGM_FI_DEV_FB_TOTAL": lambda r: _mib(r.memory_total_bytes),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda r: _num(r.ecc_corrected_total),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda r: _num(r.ecc_uncorrected_total),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda r: _num(r.remapped_rows_uncorrectable),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda r: _num(r.remapped_rows_correctable),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda r: _flag(r.row_remap_failure),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda r: _flag(r.row_remap_pending),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _nvlink_errors("crc_flit"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": _nvlink_errors("crc_data"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": _nvlink_errors("replay"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": _nvlink_errors("recovery"),
}
# (name, help, reading -> value in DCGM's unit or None), the fields written here.
DCGM_FIELDS: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = tuple(
    (name, FIELDS[name].help, value) for name, value in _VALUES.items())


def dcgm_families(node: str, gpus: Sequence[GpuReading], fields: frozenset[str] | None = None,
                  stand_in: bool = False) -> list[GaugeMetricFamily]:
    """One gauge family per DCGM field (those in ``fields`` when given), one sample per GPU that is
    up and has the reading (the last Xid: one per GPU, labelled with its code). ``stand_in``: as a
    stock dcgm-exporter writes them, with the driver-version label and, on half the nodes, no Xid
    series before a GPU's first Xid."""
    extra = ("DCGM_FI_DRIVER_VERSION",) if stand_in else ()
    families = []
    for name, help_text, value_of in DCGM_FIELDS:
        if fields is not None and name not in fields:
            continue
        if name == "DCGM_FI_DEV_FB_RESERVED" and not stand_in:
            continue  # not in the reading: only the stand-in, which makes it up, writes it
        xid = name == "DCGM_FI_DEV_XID_ERRORS"
        family = GaugeMetricFamily(name, help_text, labels=(*DCGM_LABELS, *extra,
                                                            *(("err_code", "err_msg") if xid else ())))
        for r in gpus:
            if not r.up:
                continue
            value = value_of(r)
            if stand_in and name == "DCGM_FI_DEV_FB_FREE" and value is not None:
                value = max(0.0, value - (_reserved_mib(r) or 0.0))
            if value is None or (xid and stand_in and value == 0 and _blank_until_first_xid(node)):
                continue
            ident = r.identity
            code = ([str(int(value)), XID_MESSAGES.get(int(value), "Unknown Error")] if xid else [])
            family.add_metric([str(ident.index), ident.uuid, ident.pci_bus_id, f"nvidia{ident.index}",
                               ident.model, node, *(SIMULATED_DRIVER_VERSION for _ in extra), *code], value)
        families.append(family)
    return families
