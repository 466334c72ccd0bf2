"""dcgm-exporter's fields, as one table: what Oximeter's exporter writes under DCGM names
(``--naming dcgm``) and what the stock adapters translate into Oximeter's series.

Names, types and HELP texts follow dcgm-exporter's counters files (``etc/default-counters.csv``
and the fields a custom file can add; ``tests/fixtures/real/`` holds the real files and the tests
that keep this table to them). ``record``/``scale``/``labels``: the series in base units the
adapter rules (``alert_rules/adapters/dcgm.rules.yml``) and a replay write from the field; a field
without a record is read by a rule of its own (the last Xid, the framebuffer total) or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024  # DCGM's memory unit, in bytes


@dataclass(frozen=True)
class DcgmField:
    """One dcgm-exporter field."""

    name: str
    help: str  # dcgm-exporter's HELP text, as its counters files write it
    counter: bool = False  # typed `counter` in the counters files (`gauge` otherwise)
    default: bool = False  # enabled by dcgm-exporter's shipped etc/default-counters.csv
    # Only exporters built with its xid_total_collector know it; older ones refuse to start on it.
    new_exporters_only: bool = False
    record: str | None = None  # Oximeter's series it translates to
    scale: float = 1.0  # from DCGM's unit (percent, MiB, MHz) to the record's base unit
    labels: tuple[tuple[str, str], ...] = ()  # the record's fixed labels

    def counters_line(self) -> str:
        """The line (``FIELD, type, help``) that enables the field in a counters file."""
        return f"{self.name}, {'counter' if self.counter else 'gauge'}, {self.help}"


# Translated fields first, in the order the adapter rules are rendered. The ECC counts are volatile
# (since the driver loaded), as the exporter's counter.
DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", default=True,
              record="oximeter_gpu_temperature_celsius"),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", default=True,
              record="oximeter_gpu_utilization_ratio", scale=0.01),
    DcgmField("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", default=True,
              record="oximeter_gpu_memory_used_bytes", scale=float(MIB)),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", default=True,
              record="oximeter_gpu_power_watts"),
    DcgmField("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).",
              record="oximeter_gpu_power_limit_watts"),
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", default=True,
              record="oximeter_gpu_sm_clock_hertz", scale=1e6),
    DcgmField("DCGM_FI_DEV_MAX_SM_CLOCK", "Maximum SM clock frequency (in MHz).",
              record="oximeter_gpu_sm_clock_max_hertz", scale=1e6),
    DcgmField("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
              counter=True, record="oximeter_gpu_ecc_errors_total", labels=(("kind", "corrected"),)),
    DcgmField("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
              counter=True, record="oximeter_gpu_ecc_errors_total", labels=(("kind", "uncorrected"),)),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", counter=True, default=True,
              record="oximeter_gpu_pcie_replay_total"),
    DcgmField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
              counter=True, default=True, record="oximeter_gpu_remapped_rows",
              labels=(("kind", "correctable"),)),
    DcgmField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors",
              counter=True, default=True, record="oximeter_gpu_remapped_rows",
              labels=(("kind", "uncorrectable"),)),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether remapping of rows is pending",
              record="oximeter_gpu_row_remap_pending"),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", default=True,
              record="oximeter_gpu_row_remap_failure"),
    # dcgm-exporter's own Xid counter (labelled xid; since exporter start).
    DcgmField("DCGM_EXP_XID_ERRORS_TOTAL", "Total XID errors observed since exporter start.", counter=True,
              new_exporters_only=True, record="oximeter_gpu_xid_errors_total"),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", default=True),
    DcgmField("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", default=True),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", default=True),
    DcgmField("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB)."),
    DcgmField("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus (in B/s).",
              default=True),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus (in B/s).",
              default=True),
    DcgmField("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
              "Total number of NVLink flow-control CRC errors.", counter=True),
    DcgmField("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.",
              counter=True),
    DcgmField("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", counter=True),
    DcgmField("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.",
              counter=True),
)
FIELDS: dict[str, DcgmField] = {f.name: f for f in DCGM_FIELDS}
# The fields of this table that dcgm-exporter's etc/default-counters.csv enables.
DCGM_DEFAULT_FIELDS: frozenset[str] = frozenset(f.name for f in DCGM_FIELDS if f.default)
# The fields the counters files type `counter` (Oximeter's exporter writes them as gauges).
DCGM_COUNTER_FIELDS: frozenset[str] = frozenset(f.name for f in DCGM_FIELDS if f.counter)


def counters_line(name: str) -> str | None:
    """The counters-file line that enables field ``name``, for a field every dcgm-exporter release
    accepts; None for others (a line an older exporter would refuse to start on is no advice)."""
    field = FIELDS.get(name)
    return None if field is None or field.new_exporters_only else field.counters_line()
