"""NVML backend: the only module that imports ``pynvml`` (nvidia-ml-py).

Failure modes: NOT_SUPPORTED or FUNCTION_NOT_FOUND → that series is absent, no error;
GPU_IS_LOST / UNKNOWN → ``oximeter_gpu_up 0`` and an error counted, the other GPUs and the
exporter carry on; TIMEOUT or any other NVML error on one field → that field absent, error
counted. NVML's "not available" sentinels (all bits set) are never exported. Xid critical errors
arrive on a background thread blocked in ``nvmlEventSetWait`` and are counted per code
(``exporter/backends/nvml_xid.py``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Self

from exporter.backends.base import (
    BackendStartError,
    GpuIdentity,
    GpuProcess,
    GpuReading,
    NodeSnapshot,
    NvLinkStat,
)
from exporter.backends.nvml_xid import XidListener
from exporter.deadline import DeadlineReader

if TYPE_CHECKING:
    from exporter.settings import ExporterSettings

log = logging.getLogger(__name__)

# NVML_VALUE_NOT_AVAILABLE for unsigned int and unsigned long long results.
_UINT_NA = 0xFFFFFFFF
_ULL_NA = 0xFFFFFFFFFFFFFFFF

# Our reason name -> pynvml constant (nvmlClocksEventReason*, the current name of the old
# "throttle reasons"; same bits).
_REASON_CONSTANTS: tuple[tuple[str, str], ...] = (
    ("hw_thermal", "nvmlClocksEventReasonHwThermalSlowdown"),
    ("sw_thermal", "nvmlClocksEventReasonSwThermalSlowdown"),
    ("hw_slowdown", "nvmlClocksEventReasonHwSlowdown"),
    ("power_cap", "nvmlClocksEventReasonSwPowerCap"),
    ("power_brake", "nvmlClocksEventReasonHwPowerBrakeSlowdown"),
    ("idle", "nvmlClocksEventReasonGpuIdle"),
)


# Our NVLink error kind -> NVML's counter constant (nvmlDeviceGetNvLinkErrorCounter).
_NVLINK_COUNTERS: tuple[tuple[str, str], ...] = (
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
)
# NVML counts NVLink data throughput in KiB.
_KIB = 1024


class _GpuGoneError(Exception):
    """The GPU stopped answering (lost or unknown error): the whole reading is down."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Slot:
    index: int
    handle: Any
    identity: GpuIdentity


def _uint(value: Any) -> int | None:
    return None if value is None or int(value) == _UINT_NA else int(value)


def _ull(value: Any) -> int | None:
    return None if value is None or int(value) == _ULL_NA else int(value)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """Reads every GPU of this host through NVML at scrape time."""

    name = "nvml"
    simulation = False

    def __init__(self, *, nvml: Any | None = None, timeout_s: float = 2.0,
                 xid_poll_ms: int = 500) -> None:
        self._nvml_override = nvml
        self._nvml: Any = None
        self._timeout_s = timeout_s
        self._slots: list[_Slot] = []
        self._reader: DeadlineReader[int, tuple[GpuReading, list[str]]] | None = None
        self._absent: tuple[type[BaseException], ...] = ()
        self._process_names: dict[int, str] = {}
        self._xids = XidListener(xid_poll_ms)
        self._started = False

    @classmethod
    def from_settings(cls, settings: ExporterSettings, node: str) -> Self:
        """This host's GPUs (``node`` only labels them, which the collector does)."""
        return cls(timeout_s=settings.gpu_timeout_s)

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> None:
        """nvmlInit, open every GPU, start the Xid listener. Raises BackendStartError."""
        nvml: Any = self._nvml_override
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise BackendStartError(f"nvidia-ml-py is not installed: {exc}") from None
            nvml = pynvml
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise BackendStartError(f"NVML initialisation failed: {exc}") from None
        self._started = True
        names = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLLibraryMismatchError")
        self._absent = tuple(cls for cls in (getattr(nvml, n, None) for n in names) if cls is not None)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self.close()
            raise BackendStartError(f"NVML cannot count GPUs: {exc}") from None
        self._slots = [self._open(index) for index in range(count)]
        self._reader = DeadlineReader(max_workers=count, thread_name_prefix="oximeter-nvml")
        self._xids.start(nvml, ((slot.index, slot.handle) for slot in self._slots))

    def close(self) -> None:
        """Stop the listener, free the event set, nvmlShutdown. Safe to call twice."""
        if self._started:
            self._xids.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if not self._started:
            return
        self._started = False
        nvml = self._nvml
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.warning("nvmlShutdown failed: %s", exc)

    # -- reading -----------------------------------------------------------------------------
    def read(self) -> NodeSnapshot:
        """Every GPU, in parallel under the deadline; a late or failing GPU is reported down."""
        if self._reader is None:
            raise RuntimeError("NvmlBackend.read() before start()")
        calls = {slot.index: partial(self._read_gpu, slot) for slot in self._slots}
        results, failed = self._reader.run(calls, self._timeout_s)
        errors = self._xids.take_errors()
        gpus: list[GpuReading] = []
        for slot in self._slots:
            if slot.index in results:
                reading, gpu_errors = results[slot.index]
                errors.extend(gpu_errors)
            else:
                if slot.index in failed:
                    log.error("reading GPU %d raised %r", slot.index, failed[slot.index])
                errors.append("backend" if slot.index in failed else "timeout")
                reading = self._down(slot)
            gpus.append(reading)
        return NodeSnapshot(gpus=tuple(gpus), errors=tuple(errors))

    def _down(self, slot: _Slot) -> GpuReading:
        return GpuReading(identity=slot.identity, up=False, xid=self._xids.stats(slot.index))

    def _call(self, errors: list[str], fn: Any, *args: Any) -> Any:
        nvml = self._nvml
        try:
            return fn(*args)
        except self._absent:
            return None
        except nvml.NVMLError_GpuIsLost:
            raise _GpuGoneError("gpu_lost") from None
        except nvml.NVMLError_Unknown:
            raise _GpuGoneError("nvml_unknown") from None
        except nvml.NVMLError_Timeout:
            errors.append("timeout")
            return None
        except nvml.NVMLError as exc:
            log.debug("%s failed: %s", getattr(fn, "__name__", fn), exc)
            errors.append("nvml_error")
            return None

    def _open(self, index: int) -> _Slot:
        """Handle and identity of GPU ``index``; a GPU lost at start-up is retried at each read."""
        slot = _Slot(index=index, handle=None, identity=GpuIdentity(index, "", "", ""))
        try:
            self._reopen(slot)
        except _GpuGoneError as gone:
            log.warning("GPU %d unavailable at start-up (%s)", index, gone.reason)
        return slot

    def _reopen(self, slot: _Slot) -> None:
        nvml = self._nvml
        errors: list[str] = []
        handle = self._call(errors, nvml.nvmlDeviceGetHandleByIndex, slot.index)
        if handle is None:
            raise _GpuGoneError("nvml_error")
        uuid = self._call(errors, nvml.nvmlDeviceGetUUID, handle)
        model = self._call(errors, nvml.nvmlDeviceGetName, handle)
        pci = self._call(errors, nvml.nvmlDeviceGetPciInfo, handle)
        bus_id = _text(pci.busId) if pci is not None else ""
        slot.identity = GpuIdentity(slot.index, _text(uuid or ""), _text(model or ""), bus_id)
        slot.handle = handle

    def _read_gpu(self, slot: _Slot) -> tuple[GpuReading, list[str]]:
        nvml = self._nvml
        errors: list[str] = []
        try:
            if slot.handle is None:
                self._reopen(slot)
            h = slot.handle
            call = partial(self._call, errors)
            util = call(nvml.nvmlDeviceGetUtilizationRates, h)
            memory = call(nvml.nvmlDeviceGetMemoryInfo, h)
            temperature = call(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            power_mw = call(nvml.nvmlDeviceGetPowerUsage, h)
            limit_mw = call(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
            sm_mhz = call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
            sm_max_mhz = call(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM)
            reasons = _ull(call(nvml.nvmlDeviceGetCurrentClocksEventReasons, h))
            ecc_corrected = call(nvml.nvmlDeviceGetTotalEccErrors, h,
                                 nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC)
            ecc_uncorrected = call(nvml.nvmlDeviceGetTotalEccErrors, h,
                                   nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
            rows = call(nvml.nvmlDeviceGetRemappedRows, h)
            replays = call(nvml.nvmlDeviceGetPcieReplayCounter, h)
            pcie_tx = call(nvml.nvmlDeviceGetPcieThroughput, h, nvml.NVML_PCIE_UTIL_TX_BYTES)
            pcie_rx = call(nvml.nvmlDeviceGetPcieThroughput, h, nvml.NVML_PCIE_UTIL_RX_BYTES)
            processes = call(nvml.nvmlDeviceGetComputeRunningProcesses, h)
            nvlinks = self._nvlinks(call, h)
        except _GpuGoneError as gone:
            errors.append(gone.reason)
            return self._down(slot), errors
        rows = rows if rows is not None else (None, None, None, None)
        pending, failure = _uint(rows[2]), _uint(rows[3])
        reading = GpuReading(
            identity=slot.identity,
            up=True,
            utilization_ratio=_divided(_uint(util.gpu) if util is not None else None, 100),
            memory_used_bytes=_ull(memory.used) if memory is not None else None,
            memory_total_bytes=_ull(memory.total) if memory is not None else None,
            temperature_celsius=_divided(_uint(temperature), 1),
            power_watts=_divided(_uint(power_mw), 1000),
            power_limit_watts=_divided(_uint(limit_mw), 1000),
            sm_clock_hertz=_hertz(_uint(sm_mhz)),
            sm_clock_max_hertz=_hertz(_uint(sm_max_mhz)),
            clock_event_reasons=None if reasons is None else frozenset(
                name for name, const in _REASON_CONSTANTS if reasons & int(getattr(nvml, const))),
            ecc_corrected_total=_ull(ecc_corrected),
            ecc_uncorrected_total=_ull(ecc_uncorrected),
            remapped_rows_correctable=_uint(rows[0]),
            remapped_rows_uncorrectable=_uint(rows[1]),
            row_remap_pending=None if pending is None else bool(pending),
            row_remap_failure=None if failure is None else bool(failure),
            pcie_replay_total=_uint(replays),
            pcie_transmit_bytes_per_second=_per_kib(_uint(pcie_tx)),
            pcie_receive_bytes_per_second=_per_kib(_uint(pcie_rx)),
            xid=self._xids.stats(slot.index),
            processes=None if processes is None else self._processes(processes),
            nvlinks=nvlinks,
        )
        return reading, errors

    def _nvlinks(self, call: Any, h: Any) -> tuple[NvLinkStat, ...] | None:
        """Every NVLink of the GPU, in link order; None when it has none. Links are numbered from
        0: the first link NVML does not know (invalid argument or not supported) ends the list."""
        nvml = self._nvml
        links: list[NvLinkStat] = []
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            state = call(self._link_state, h, link)
            if state is None:
                break
            counts = [(kind, _ull(call(nvml.nvmlDeviceGetNvLinkErrorCounter, h, link, getattr(nvml, const))))
                      for kind, const in _NVLINK_COUNTERS]
            fields = call(nvml.nvmlDeviceGetFieldValues, h,
                          [(nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link),
                           (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)])
            tx, rx = (None, None) if fields is None else (self._field_bytes(f) for f in fields)
            links.append(NvLinkStat(link=link, up=int(state) == int(nvml.NVML_FEATURE_ENABLED),
                                    errors=tuple((k, v) for k, v in counts if v is not None),
                                    transmit_bytes=tx, receive_bytes=rx))
        return tuple(links) or None

    def _link_state(self, h: Any, link: int) -> Any:
        """The link's state; None past the GPU's last link (NVML answers invalid argument there)."""
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetNvLinkState(h, link)
        except nvml.NVMLError_InvalidArgument:
            return None

    def _field_bytes(self, field: Any) -> int | None:
        """A throughput field value (KiB) in bytes; None when NVML could not read it."""
        nvml = self._nvml
        if int(field.nvmlReturn) != int(nvml.NVML_SUCCESS):
            return None
        value = _ull(field.value.ullVal)
        return None if value is None else value * _KIB

    def _processes(self, raw: Any) -> tuple[GpuProcess, ...]:
        found: list[GpuProcess] = []
        for proc in raw:
            used = getattr(proc, "usedGpuMemory", None)
            # None (and the sentinel) is NVML's "not available" (WDDM, some MIG set-ups).
            if used is None or int(used) == _ULL_NA:
                continue
            pid = int(proc.pid)
            found.append(GpuProcess(pid=pid, name=self._process_name(pid), used_memory_bytes=int(used)))
        return tuple(found)

    def _process_name(self, pid: int) -> str:
        name = self._process_names.get(pid)
        if name is None:
            try:
                name = os.path.basename(_text(self._nvml.nvmlSystemGetProcessName(pid))) or "unknown"
            except self._nvml.NVMLError:
                name = "unknown"
            if len(self._process_names) > 4096:  # pids churn; keep the cache bounded
                self._process_names.clear()
            self._process_names[pid] = name
        return name


def _divided(value: int | None, divisor: int) -> float | None:
    # Dividing by the exact unit (100 %, 1000 mW) rounds once, so 87 % reads as exactly 0.87.
    return None if value is None else value / divisor


def _hertz(mhz: int | None) -> float | None:
    return None if mhz is None else mhz * 1_000_000.0


def _per_kib(kib_per_second: int | None) -> float | None:
    # nvmlDeviceGetPcieThroughput answers in KB/s, NVML's kilobyte being 1024 bytes as for NVLink.
    return None if kib_per_second is None else float(kib_per_second * _KIB)
