"""``--naming dcgm``: the readings also under dcgm-exporter 4.x names, units and labels.

So existing DCGM dashboards keep working. Names and HELP follow dcgm-exporter's
``etc/default-counters.csv`` (plus the ECC/remap fields it ships commented out); all are gauges,
as the issue asks (DCGM's counter-typed fields lack ``_total``, which the naming lint would
reject); units are DCGM's: percent, MiB, MHz, W, °C. Labels: ``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``. A GPU that is down exports nothing here: DCGM has no
``up`` series, and a blank reading is not a zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client.core import GaugeMetricFamily

from exporter.backends.base import GpuReading

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
_MIB = 1024 * 1024
# The fields dcgm-exporter's etc/default-counters.csv enables (of those exported here): ECC, NVLink
# errors, the max SM clock, clock-event reasons and row-remap pending ship commented out.
DCGM_DEFAULT_FIELDS: frozenset[str] = frozenset({
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
})


def _last_xid(r: GpuReading) -> float | None:
    if r.xid is None:
        return None
    seen = [s for s in r.xid if s.count > 0]
    # DCGM reports the code of the most recent Xid, 0 while there has been none.
    return float(max(seen, key=lambda s: s.last_timestamp_seconds).xid) if seen else 0.0


def _mib(value: int | None) -> float | None:
    return None if value is None else float(value // _MIB)


def _free_mib(r: GpuReading) -> float | None:
    if r.memory_total_bytes is None or r.memory_used_bytes is None:
        return None
    return float(max(0, r.memory_total_bytes - r.memory_used_bytes) // _MIB)


def _mhz(value: float | None) -> float | None:
    return None if value is None else round(value / 1e6)


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


# (name, help, reading -> value in DCGM's unit or None)
DCGM_FIELDS: tuple[tuple[str, str, Callable[[GpuReading], float | None]], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda r: _mhz(r.sm_clock_hertz)),
    ("DCGM_FI_DEV_MAX_SM_CLOCK", "Maximum SM clock frequency (in MHz).",
     lambda r: _mhz(r.sm_clock_max_hertz)),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda r: _num(r.temperature_celsius)),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda r: _num(r.power_watts)),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).",
     lambda r: _num(r.power_limit_watts)),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.",
     lambda r: _num(r.pcie_replay_total)),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus (in B/s).",
     lambda r: _num(r.pcie_transmit_bytes_per_second)),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus (in B/s).",
     lambda r: _num(r.pcie_receive_bytes_per_second)),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
     lambda r: None if r.utilization_ratio is None else round(r.utilization_ratio * 100)),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", _last_xid),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _free_mib),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda r: _mib(r.memory_used_bytes)),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).",
     lambda r: _mib(r.memory_total_bytes)),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
     lambda r: _num(r.ecc_corrected_total)),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     lambda r: _num(r.ecc_uncorrected_total)),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors",
     lambda r: _num(r.remapped_rows_uncorrectable)),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
     lambda r: _num(r.remapped_rows_correctable)),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed",
     lambda r: _flag(r.row_remap_failure)),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending",
     lambda r: _flag(r.row_remap_pending)),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.",
     _nvlink_errors("crc_flit")),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.",
     _nvlink_errors("crc_data")),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.",
     _nvlink_errors("replay")),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.",
     _nvlink_errors("recovery")),
)


def dcgm_families(node: str, gpus: Sequence[GpuReading],
                  fields: frozenset[str] | None = None) -> list[GaugeMetricFamily]:
    """One gauge family per DCGM field (those in ``fields`` when given), one sample per GPU that is
    up and has the reading."""
    families = []
    for name, help_text, value_of in DCGM_FIELDS:
        if fields is not None and name not in fields:
            continue
        family = GaugeMetricFamily(name, help_text, labels=DCGM_LABELS)
        for r in gpus:
            if not r.up:
                continue
            value = value_of(r)
            if value is not None:
                ident = r.identity
                family.add_metric([str(ident.index), ident.uuid, ident.pci_bus_id,
                                   f"nvidia{ident.index}", ident.model, node], value)
        families.append(family)
    return families
