"""The seam between the collector and a source of GPU readings.

A backend returns frozen dataclasses; a field that the source cannot provide is ``None`` and the
collector leaves that series out. A reading is never replaced by 0: an absent series is honest,
a zero that means "unknown" hides a broken sensor: a reading is never invented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from oximeter.errors import OximeterError

if TYPE_CHECKING:
    from exporter.settings import ExporterSettings

# Clock event reasons the collector exports, in NVML's vocabulary translated to ours.
CLOCK_EVENT_REASONS: tuple[str, ...] = ("hw_thermal", "sw_thermal", "hw_slowdown", "power_cap",
                                        "power_brake", "idle")

@dataclass(frozen=True)
class GpuIdentity:
    """What names a GPU in every series: index on the node, UUID, model and PCI bus id."""

    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True)
class XidStat:
    """How often one Xid code was seen on a GPU, and when last (Unix seconds)."""

    xid: int
    count: int
    last_timestamp_seconds: float


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU and the GPU memory it holds."""

    pid: int
    name: str
    used_memory_bytes: int


# NVLink error counters the collector exports, in our vocabulary (NVML's DL_* counters).
NVLINK_ERROR_KINDS: tuple[str, ...] = ("crc_flit", "crc_data", "replay", "recovery")


@dataclass(frozen=True)
class NvLinkStat:
    """One NVLink of a GPU: whether it is up, its error counters (by ``NVLINK_ERROR_KINDS``) and
    the data it has carried; ``None`` where the source cannot say."""

    link: int
    up: bool
    errors: tuple[tuple[str, int], ...] = ()
    transmit_bytes: int | None = None
    receive_bytes: int | None = None


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one scrape; ``None`` means not available, and the series is left out.

    ``up`` False means the GPU did not answer (lost, unknown error or too slow): only
    ``oximeter_gpu_up 0`` and the Xid counters (kept by the event listener) are exported then.
    """

    identity: GpuIdentity
    up: bool
    utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hertz: float | None = None
    sm_clock_max_hertz: float | None = None
    clock_event_reasons: frozenset[str] | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    pcie_replay_total: int | None = None
    # PCIe data rate each way (host to GPU is receive), as the driver samples it now.
    pcie_transmit_bytes_per_second: float | None = None
    pcie_receive_bytes_per_second: float | None = None
    xid: tuple[XidStat, ...] | None = None
    processes: tuple[GpuProcess, ...] | None = None
    # None: the GPU has no NVLink (or the source cannot read it); a PCIe-only card exports none.
    nvlinks: tuple[NvLinkStat, ...] | None = None


@dataclass(frozen=True)
class HostProcess:
    """Resident memory (RSS, not VIRT) of one named inference process."""

    name: str
    rss_bytes: int


@dataclass(frozen=True)
class NodeSnapshot:
    """Everything a backend read for its node at one scrape.

    ``errors`` are reasons for ``oximeter_exporter_collect_errors_total``, one entry per failure.
    ``host_processes`` is None when the backend does not know them (the collector then asks the
    host itself); the simulator supplies its simulated processes here.
    """

    gpus: tuple[GpuReading, ...]
    errors: tuple[str, ...] = ()
    host_processes: tuple[HostProcess, ...] | None = None
    # False when the source itself could not be read this scrape (unreachable, lost, garbage):
    # exported as ``oximeter_telemetry_up`` 0, so a node whose GPUs never reported can page.
    read_ok: bool = True
    # The host's physical memory (what a leaking process's RSS fills); None: the collector asks
    # the host itself, as for the processes.
    host_memory_total_bytes: int | None = None
    # False on a host with no GPU telemetry to read at all (a CPU host): no oximeter_telemetry_up,
    # so its absence of GPUs is not reported as telemetry that cannot be read.
    gpu_source: bool = True


class GpuBackend(Protocol):
    """A source of GPU readings, read at scrape time."""

    name: str
    simulation: bool

    def start(self) -> None:
        """Acquire resources (library init, listener thread); raise on a fatal set-up error."""

    def read(self) -> NodeSnapshot:
        """Read every GPU of the node; must not raise for a failing GPU or a lost source."""

    def close(self) -> None:
        """Release resources; safe to call twice."""


class BackendClass(Protocol):
    """What ``BACKENDS`` names: a class that builds its backend from the exporter's settings."""

    def from_settings(self, settings: ExporterSettings, node: str) -> GpuBackend:
        """The backend the settings describe, reading ``node``'s GPUs."""
        ...


class BackendStartError(OximeterError):
    """The backend cannot start at all (no NVML library, no driver): the exporter exits."""
