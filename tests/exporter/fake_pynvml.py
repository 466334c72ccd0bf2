"""A fake ``pynvml`` for tests without a GPU: the calls the NVML backend uses, nothing more.

An instance of ``FakeNvml`` stands in for the module (the backend takes it as ``nvml=``). Each
device answers every call from ``FakeDevice.values``; ``errors`` makes a call raise the real
NVML error class for that code; ``hang`` makes a call block until released (a GPU that stopped
answering); ``inject_xid`` delivers an Xid critical-error event to ``nvmlEventSetWait``.
``test_exporter_conformance.py`` checks names, signatures, constants and error classes against
the installed nvidia-ml-py, so this fake cannot drift from it.
"""

# pynvml's own names (mixedCase functions, constants and arguments) are the point of this file.
# ruff: noqa: N802, N803, N815, N816
from __future__ import annotations

import queue
import string
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VOLATILE_ECC = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1

nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080

NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1

UINT_NA = 0xFFFFFFFF
ULL_NA = 0xFFFFFFFFFFFFFFFF


class NVMLError(Exception):
    """Base of every NVML error; ``value`` is the NVML return code, as in pynvml."""

    code = NVML_ERROR_UNKNOWN

    def __init__(self, value: int | None = None) -> None:
        self.value = self.code if value is None else value
        super().__init__(self.value)


def _error_class(code_name: str, code: int) -> type[NVMLError]:
    # pynvml's own naming rule: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost.
    name = "NVMLError_" + string.capwords(code_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
    return type(name, (NVMLError,), {"code": code})


ERROR_CLASSES: dict[int, type[NVMLError]] = {
    value: _error_class(key, value) for key, value in dict(globals()).items() if key.startswith("NVML_ERROR_")
}
NVMLError_Uninitialized = ERROR_CLASSES[NVML_ERROR_UNINITIALIZED]
NVMLError_InvalidArgument = ERROR_CLASSES[NVML_ERROR_INVALID_ARGUMENT]
NVMLError_NotSupported = ERROR_CLASSES[NVML_ERROR_NOT_SUPPORTED]
NVMLError_NoPermission = ERROR_CLASSES[NVML_ERROR_NO_PERMISSION]
NVMLError_NotFound = ERROR_CLASSES[NVML_ERROR_NOT_FOUND]
NVMLError_Timeout = ERROR_CLASSES[NVML_ERROR_TIMEOUT]
NVMLError_LibraryNotFound = ERROR_CLASSES[NVML_ERROR_LIBRARY_NOT_FOUND]
NVMLError_FunctionNotFound = ERROR_CLASSES[NVML_ERROR_FUNCTION_NOT_FOUND]
NVMLError_GpuIsLost = ERROR_CLASSES[NVML_ERROR_GPU_IS_LOST]
NVMLError_Unknown = ERROR_CLASSES[NVML_ERROR_UNKNOWN]

GIB = 1024**3


def default_values(index: int) -> dict[str, Any]:
    """A healthy H100 under load, as NVML reports it (percent, bytes, mW, MHz)."""
    return {
        "nvmlDeviceGetUUID": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        "nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetPciInfo": SimpleNamespace(busId=f"00000000:{0x1A + index:02X}:00.0".encode()),
        "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=87, memory=40),
        "nvmlDeviceGetMemoryInfo": SimpleNamespace(total=80 * GIB, free=4 * GIB, used=76 * GIB),
        "nvmlDeviceGetTemperature": 71,
        "nvmlDeviceGetPowerUsage": 512345,
        "nvmlDeviceGetEnforcedPowerLimit": 700000,
        "nvmlDeviceGetClockInfo": 1755,
        "nvmlDeviceGetMaxClockInfo": 1980,
        "nvmlDeviceGetCurrentClocksEventReasons": nvmlClocksEventReasonSwPowerCap,
        "nvmlDeviceGetTotalEccErrors": {NVML_MEMORY_ERROR_TYPE_CORRECTED: 3,
                                        NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0},
        "nvmlDeviceGetRemappedRows": (2, 0, 0, 0),
        "nvmlDeviceGetPcieReplayCounter": 5,
        # KB/s (1024 bytes) each way: 2 MiB/s to the host, 4 MiB/s from it.
        "nvmlDeviceGetPcieThroughput": {NVML_PCIE_UTIL_TX_BYTES: 2048, NVML_PCIE_UTIL_RX_BYTES: 4096},
        "nvmlDeviceGetComputeRunningProcesses": [SimpleNamespace(pid=4242 + index, usedGpuMemory=70 * GIB)],
        "nvmlDeviceGetSupportedEventTypes": nvmlEventTypeXidCriticalError | 0x3,
        # Two NVLinks, up; link 0 has seen two CRC flit errors; 4 MiB sent and 8 MiB received each.
        **nvlink_values([NVML_FEATURE_ENABLED] * 2, errors={(0, NVML_NVLINK_ERROR_DL_CRC_FLIT): 2},
                        kib={(field, link): kib for link in (0, 1)
                             for field, kib in ((NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 4096),
                                                (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 8192))}),
    }


def nvlink_values(states: list[int], errors: dict[tuple[int, int], int] | None = None,
                  kib: dict[tuple[int, int], int] | None = None) -> dict[str, Any]:
    """NVLink answers for ``FakeDevice.values``: one state per link (1 = enabled), error counters
    by (link, NVML counter), throughput in KiB by (field id, link); absent counters read 0."""
    links = range(len(states))
    return {
        "nvmlDeviceGetNvLinkState": dict(enumerate(states)),
        "nvmlDeviceGetNvLinkErrorCounter": {(link, c): (errors or {}).get((link, c), 0)
                                            for link in links for c in range(4)},
        "nvmlDeviceGetFieldValues": {(f, link): (kib or {}).get((f, link), 0) for link in links
                                     for f in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                                               NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)},
    }


@dataclass
class FakeDevice:
    """One GPU: per-call answers, per-call injected error codes, per-call hangs."""

    index: int
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    hang: set[str] = field(default_factory=set)
    calls: int = 0

    def __post_init__(self) -> None:
        self.values = {**default_values(self.index), **self.values}

    def fail_all(self, code: int) -> None:
        """Every per-GPU call raises ``code`` (a GPU that fell off the bus)."""
        for name in default_values(self.index):
            self.errors[name] = code


class FakeNvml:
    """Module-shaped fake: attributes mirror pynvml's names, constants and error classes."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_ERROR_DL_REPLAY = NVML_NVLINK_ERROR_DL_REPLAY
    NVML_NVLINK_ERROR_DL_RECOVERY = NVML_NVLINK_ERROR_DL_RECOVERY
    NVML_NVLINK_ERROR_DL_CRC_FLIT = NVML_NVLINK_ERROR_DL_CRC_FLIT
    NVML_NVLINK_ERROR_DL_CRC_DATA = NVML_NVLINK_ERROR_DL_CRC_DATA
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES
    nvmlClocksEventReasonGpuIdle = nvmlClocksEventReasonGpuIdle
    nvmlClocksEventReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
    nvmlClocksEventReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
    nvmlClocksEventReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
    nvmlClocksEventReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
    nvmlClocksEventReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown

    def __init__(self, devices: list[FakeDevice] | None = None, *, init_error: int | None = None,
                 process_names: dict[int, str] | None = None) -> None:
        self.devices = devices if devices is not None else [FakeDevice(0), FakeDevice(1)]
        self.init_error = init_error
        self.process_names = process_names or {}
        self.initialised = 0
        self.calls = 0
        self.released = threading.Event()  # set to let hung calls return
        self._events: queue.Queue[SimpleNamespace] = queue.Queue()
        self._registered: set[int] = set()
        self._event_sets = 0

    # -- test controls ------------------------------------------------------------------------
    def inject_xid(self, index: int, xid: int) -> None:
        """Deliver an Xid critical error of GPU ``index`` to the event set, as the driver would."""
        if index not in self._registered:
            raise AssertionError(f"GPU {index} is not registered for Xid events")
        self._events.put(SimpleNamespace(device=self.devices[index], eventType=nvmlEventTypeXidCriticalError,
                                         eventData=xid, gpuInstanceId=0, computeInstanceId=0))

    def _answer(self, name: str, handle: FakeDevice) -> Any:
        if not self.initialised:
            raise NVMLError_Uninitialized()
        self.calls += 1
        handle.calls += 1
        if name in handle.hang:
            self.released.wait()
        code = handle.errors.get(name)
        if code is not None:
            raise ERROR_CLASSES[code]()
        return handle.values[name]

    # -- the pynvml API the backend uses -----------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise ERROR_CLASSES[self.init_error]()
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise NVMLError_Uninitialized()
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            raise NVMLError_Uninitialized()
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        if not self.initialised:
            raise NVMLError_Uninitialized()
        if not 0 <= index < len(self.devices):
            raise NVMLError_InvalidArgument()
        return self.devices[index]

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        return str(self._answer("nvmlDeviceGetUUID", handle))

    def nvmlDeviceGetName(self, handle: FakeDevice) -> str:
        return str(self._answer("nvmlDeviceGetName", handle))

    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> Any:
        return self._answer("nvmlDeviceGetPciInfo", handle)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        return self._answer("nvmlDeviceGetUtilizationRates", handle)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice, version: Any = None) -> Any:
        return self._answer("nvmlDeviceGetMemoryInfo", handle)

    def nvmlDeviceGetTemperature(self, handle: FakeDevice, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return int(self._answer("nvmlDeviceGetTemperature", handle))

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        return int(self._answer("nvmlDeviceGetPowerUsage", handle))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeDevice) -> int:
        return int(self._answer("nvmlDeviceGetEnforcedPowerLimit", handle))

    def nvmlDeviceGetClockInfo(self, handle: FakeDevice, type: int) -> int:
        assert type == NVML_CLOCK_SM
        return int(self._answer("nvmlDeviceGetClockInfo", handle))

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeDevice, type: int) -> int:
        assert type == NVML_CLOCK_SM
        return int(self._answer("nvmlDeviceGetMaxClockInfo", handle))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeDevice) -> int:
        return int(self._answer("nvmlDeviceGetCurrentClocksEventReasons", handle))

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeDevice, errorType: int, counterType: int) -> int:
        assert counterType == NVML_VOLATILE_ECC
        return int(self._answer("nvmlDeviceGetTotalEccErrors", handle)[errorType])

    def nvmlDeviceGetRemappedRows(self, device: FakeDevice) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._answer("nvmlDeviceGetRemappedRows", device)
        return (corr, unc, pending, failure)

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeDevice) -> int:
        return int(self._answer("nvmlDeviceGetPcieReplayCounter", handle))

    def nvmlDeviceGetPcieThroughput(self, device: FakeDevice, counter: int) -> int:
        return int(self._answer("nvmlDeviceGetPcieThroughput", device)[counter])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[Any]:
        return list(self._answer("nvmlDeviceGetComputeRunningProcesses", handle))

    def _nvlink(self, name: str, handle: FakeDevice, key: Any) -> Any:
        # A GPU without NVLink answers "not supported"; past its last link, "invalid argument".
        if name not in handle.values and name not in handle.errors:
            if not self.initialised:
                raise NVMLError_Uninitialized()
            raise NVMLError_NotSupported()
        answers = self._answer(name, handle)
        if key not in answers:
            raise NVMLError_InvalidArgument()
        return answers[key]

    def nvmlDeviceGetNvLinkState(self, device: FakeDevice, link: int) -> int:
        return int(self._nvlink("nvmlDeviceGetNvLinkState", device, link))

    def nvmlDeviceGetNvLinkErrorCounter(self, device: FakeDevice, link: int, counter: int) -> int:
        return int(self._nvlink("nvmlDeviceGetNvLinkErrorCounter", device, (link, counter)))

    def nvmlDeviceGetFieldValues(self, handle: FakeDevice, fieldIds: list[Any]) -> list[Any]:
        # One value per (field id, link), as pynvml's c_nvmlFieldValue_t: a return code per field.
        out = []
        for field_id, link in fieldIds:
            try:
                kib = self._nvlink("nvmlDeviceGetFieldValues", handle, (field_id, link))
            except NVMLError_InvalidArgument:
                code, kib = NVML_ERROR_NOT_SUPPORTED, 0
            else:
                code = NVML_SUCCESS
            out.append(SimpleNamespace(fieldId=field_id, scopeId=link, nvmlReturn=code,
                                       value=SimpleNamespace(ullVal=kib)))
        return out

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.process_names:
            raise NVMLError_NotFound()
        return self.process_names[pid]

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeDevice) -> int:
        return int(self._answer("nvmlDeviceGetSupportedEventTypes", handle))

    def nvmlEventSetCreate(self) -> object:
        self._event_sets += 1
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeDevice, eventTypes: int, eventSet: object) -> None:
        if not self._answer("nvmlDeviceGetSupportedEventTypes", handle) & eventTypes:
            raise NVMLError_NotSupported()
        self._registered.add(handle.index)

    def nvmlEventSetWait(self, eventSet: object, timeoutms: int) -> Any:
        try:
            return self._events.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise NVMLError_Timeout() from None

    def nvmlEventSetFree(self, eventSet: object) -> None:
        self._event_sets -= 1
