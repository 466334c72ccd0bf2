"""Each NVML failure mode against the fake, with the exact values exported afterwards."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import fake_pynvml as nv
import pytest
from exporter_harness import NODE, gpu_labels, scrape_once
from fake_pynvml import FakeDevice, FakeNvml

from exporter.backends.base import BackendStartError
from exporter.backends.nvml import NvmlBackend
from exporter.collector import GpuCollector
from stack.procs import wait_until

Started = Callable[..., tuple[NvmlBackend, GpuCollector, FakeNvml]]


@pytest.fixture
def started() -> Iterator[Started]:
    """Start an NVML backend on a fake; every backend started here is closed."""
    opened: list[tuple[NvmlBackend, FakeNvml]] = []

    def start(fake: FakeNvml, timeout_s: float = 5.0) -> tuple[NvmlBackend, GpuCollector, FakeNvml]:
        backend = NvmlBackend(nvml=fake, timeout_s=timeout_s, xid_poll_ms=50)
        backend.start()
        opened.append((backend, fake))
        return backend, GpuCollector(backend, NODE), fake

    yield start
    for backend, fake in opened:
        fake.released.set()
        backend.close()
        assert fake.initialised == 0


def errors(registry: object, reason: str) -> float | None:
    return registry.get_sample_value(  # type: ignore[attr-defined]
        "oximeter_exporter_collect_errors_total", {"node": NODE, "reason": reason})


def value(registry: object, name: str, index: int, **extra: str) -> float | None:
    return registry.get_sample_value(name, {**gpu_labels(index), **extra})  # type: ignore[attr-defined]


Expected = dict[tuple[str, tuple[tuple[str, str], ...]], float | None]

# (case, device 1 set-up, {(metric, extra labels): expected value on GPU 1}, {reason: count})
CASES: list[tuple[str, Callable[[FakeDevice], None], Expected, dict[str, float]]] = [
    ("not supported: series absent, no error",
     lambda d: d.errors.update({"nvmlDeviceGetPcieReplayCounter": nv.NVML_ERROR_NOT_SUPPORTED,
                                "nvmlDeviceGetRemappedRows": nv.NVML_ERROR_NOT_SUPPORTED,
                                "nvmlDeviceGetCurrentClocksEventReasons": nv.NVML_ERROR_FUNCTION_NOT_FOUND}),
     {("oximeter_gpu_up", ()): 1, ("oximeter_gpu_pcie_replay_total", ()): None,
      ("oximeter_gpu_remapped_rows", (("kind", "correctable"),)): None,
      ("oximeter_gpu_row_remap_pending", ()): None,
      ("oximeter_gpu_clock_event_active", (("reason", "idle"),)): None,
      ("oximeter_gpu_temperature_celsius", ()): 71},
     {"nvml_error": 0, "timeout": 0, "gpu_lost": 0}),
    ("GPU lost: up 0, nothing else, error counted",
     lambda d: d.fail_all(nv.NVML_ERROR_GPU_IS_LOST),
     {("oximeter_gpu_up", ()): 0, ("oximeter_gpu_temperature_celsius", ()): None,
      ("oximeter_gpu_utilization_ratio", ()): None,
      ("oximeter_gpu_xid_errors_total", (("xid", "79"),)): 0},
     {"gpu_lost": 1, "nvml_unknown": 0}),
    ("unknown error: treated as lost",
     lambda d: d.errors.update({"nvmlDeviceGetMemoryInfo": nv.NVML_ERROR_UNKNOWN}),
     {("oximeter_gpu_up", ()): 0, ("oximeter_gpu_utilization_ratio", ()): None},
     {"nvml_unknown": 1, "gpu_lost": 0}),
    ("NVML timeout on one field: that field absent, error counted",
     lambda d: d.errors.update({"nvmlDeviceGetTemperature": nv.NVML_ERROR_TIMEOUT}),
     {("oximeter_gpu_up", ()): 1, ("oximeter_gpu_temperature_celsius", ()): None,
      ("oximeter_gpu_power_watts", ()): 512.345},
     {"timeout": 1}),
    ("other NVML error (no permission): field absent, error counted",
     lambda d: d.errors.update({"nvmlDeviceGetComputeRunningProcesses": nv.NVML_ERROR_NO_PERMISSION}),
     {("oximeter_gpu_up", ()): 1,
      ("oximeter_gpu_process_memory_used_bytes", (("pid", "4243"), ("process", "unknown"))): None},
     {"nvml_error": 1}),
    ("N/A sentinels are never exported",
     lambda d: d.values.update({
         "nvmlDeviceGetTemperature": nv.UINT_NA, "nvmlDeviceGetPowerUsage": nv.UINT_NA,
         "nvmlDeviceGetMemoryInfo": nv.SimpleNamespace(total=80 * nv.GIB, free=0, used=nv.ULL_NA),
         "nvmlDeviceGetTotalEccErrors": {0: nv.ULL_NA, 1: 0},
         "nvmlDeviceGetComputeRunningProcesses": [nv.SimpleNamespace(pid=4243, usedGpuMemory=None)]}),
     {("oximeter_gpu_up", ()): 1, ("oximeter_gpu_temperature_celsius", ()): None,
      ("oximeter_gpu_power_watts", ()): None, ("oximeter_gpu_memory_used_bytes", ()): None,
      ("oximeter_gpu_memory_total_bytes", ()): 80 * nv.GIB,
      ("oximeter_gpu_ecc_errors_total", (("kind", "corrected"),)): None,
      ("oximeter_gpu_ecc_errors_total", (("kind", "uncorrected"),)): 0,
      ("oximeter_gpu_process_memory_used_bytes", (("pid", "4243"), ("process", "unknown"))): None},
     {"nvml_error": 0}),
]


@pytest.mark.parametrize(("case", "setup", "expected", "reasons"), CASES, ids=[c[0] for c in CASES])
def test_failure_modes(started: Started, case: str, setup: Callable[[FakeDevice], None],
                       expected: Expected, reasons: dict[str, float]) -> None:
    fake = FakeNvml([FakeDevice(0), FakeDevice(1)])
    _backend, collector, _ = started(fake)
    setup(fake.devices[1])
    registry = scrape_once(collector)
    for (name, extra), want in expected.items():
        assert value(registry, name, 1, **dict(extra)) == want, (case, name, extra)
    for reason, count in reasons.items():
        assert errors(registry, reason) == count, (case, reason)
    # The other GPU is untouched by GPU 1's trouble.
    assert value(registry, "oximeter_gpu_up", 0) == 1
    assert value(registry, "oximeter_gpu_temperature_celsius", 0) == 71


def test_a_hung_gpu_is_down_by_the_deadline_and_the_others_are_read(started: Started) -> None:
    fake = FakeNvml([FakeDevice(0), FakeDevice(1)])
    _backend, collector, _ = started(fake, timeout_s=2.0)  # generous: the machine is shared
    fake.devices[1].hang.add("nvmlDeviceGetUtilizationRates")
    first = scrape_once(collector)
    assert value(first, "oximeter_gpu_up", 1) == 0
    assert value(first, "oximeter_gpu_temperature_celsius", 1) is None
    assert value(first, "oximeter_gpu_up", 0) == 1
    assert errors(first, "timeout") == 1
    # Still stuck: reported late again at once, without queueing a second read behind the first.
    stuck_calls = fake.devices[1].calls
    second = scrape_once(collector)
    assert value(second, "oximeter_gpu_up", 1) == 0
    assert errors(second, "timeout") == 2
    assert fake.devices[1].calls == stuck_calls
    fake.released.set()
    fake.devices[1].hang.clear()
    wait_until(lambda: value(scrape_once(collector), "oximeter_gpu_up", 1) == 1, 30, what="GPU 1 back")


def test_xid_events_are_counted_per_code_from_the_first(started: Started) -> None:
    fake = FakeNvml([FakeDevice(0), FakeDevice(1)])
    _backend, collector, _ = started(fake)
    before = scrape_once(collector)
    assert value(before, "oximeter_gpu_xid_errors_total", 1, xid="79") == 0
    assert value(before, "oximeter_gpu_xid_last_timestamp_seconds", 1, xid="79") == 0
    assert value(before, "oximeter_gpu_xid_errors_total", 1, xid="13") is None

    t0 = time.time()
    fake.inject_xid(1, 79)
    wait_until(lambda: value(scrape_once(collector), "oximeter_gpu_xid_errors_total", 1, xid="79") == 1,
               30, what="first Xid 79 counted")
    t1 = time.time()
    first = scrape_once(collector)
    stamp = value(first, "oximeter_gpu_xid_last_timestamp_seconds", 1, xid="79")
    assert stamp is not None and t0 <= stamp <= t1
    assert value(first, "oximeter_gpu_xid_errors_total", 0, xid="79") == 0  # the other GPU

    fake.inject_xid(1, 79)  # a repeat is seen, unlike a sticky last-value gauge
    fake.inject_xid(1, 13)  # an application Xid appears when it happens
    wait_until(lambda: value(scrape_once(collector), "oximeter_gpu_xid_errors_total", 1, xid="13") == 1,
               30, what="Xid 13 counted")
    after = scrape_once(collector)
    assert value(after, "oximeter_gpu_xid_errors_total", 1, xid="79") == 2

    # The GPU then falls off the bus: up 0, and its Xid counters are still exported.
    fake.devices[1].fail_all(nv.NVML_ERROR_GPU_IS_LOST)
    lost = scrape_once(collector)
    assert value(lost, "oximeter_gpu_up", 1) == 0
    assert value(lost, "oximeter_gpu_xid_errors_total", 1, xid="79") == 2


def test_a_gpu_without_xid_events_has_no_xid_series(started: Started) -> None:
    fake = FakeNvml([FakeDevice(0, values={"nvmlDeviceGetSupportedEventTypes": 0x3})])
    _backend, collector, _ = started(fake)
    registry = scrape_once(collector)
    assert value(registry, "oximeter_gpu_up", 0) == 1
    assert value(registry, "oximeter_gpu_xid_errors_total", 0, xid="79") is None


def test_a_gpu_lost_at_start_up_is_retried(started: Started) -> None:
    fake = FakeNvml([FakeDevice(0), FakeDevice(1)])
    fake.devices[1].fail_all(nv.NVML_ERROR_GPU_IS_LOST)
    _backend, collector, _ = started(fake)
    lost = scrape_once(collector)
    assert lost.get_sample_value("oximeter_gpu_up", {"node": NODE, "gpu": "1", "uuid": "", "gpu_model": "",
                                                     "pci_bus_id": ""}) == 0
    fake.devices[1].errors.clear()
    back = scrape_once(collector)
    assert value(back, "oximeter_gpu_up", 1) == 1
    assert value(back, "oximeter_gpu_temperature_celsius", 1) == 71


def test_process_names_come_from_nvml() -> None:
    fake = FakeNvml([FakeDevice(0)], process_names={4242: "/opt/venv/bin/python3.11"})
    backend = NvmlBackend(nvml=fake)
    backend.start()
    try:
        registry = scrape_once(GpuCollector(backend, NODE))
        assert value(registry, "oximeter_gpu_process_memory_used_bytes", 0, pid="4242",
                     process="python3.11") == 70 * nv.GIB
    finally:
        backend.close()


def test_no_nvml_library_fails_start_up() -> None:
    backend = NvmlBackend(nvml=FakeNvml(init_error=nv.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(BackendStartError, match="NVML initialisation failed"):
        backend.start()
    backend.close()


def test_nvlink_errors_and_throughput_per_link(started: Started) -> None:
    # GPU 1: links 0 and 1 up, link 2 down; link 1 has CRC flit errors and replays; link 0 has
    # carried 1000 KiB out and 3 KiB in. GPU 0 has no NVLink: no series at all.
    links = nv.nvlink_values(
        [nv.NVML_FEATURE_ENABLED, nv.NVML_FEATURE_ENABLED, 0],
        errors={(1, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT): 12, (1, nv.NVML_NVLINK_ERROR_DL_REPLAY): 3},
        kib={(nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0): 1000,
             (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0): 3})
    pcie_only = FakeDevice(0)
    for name in nv.nvlink_values([]):
        del pcie_only.values[name]
    _, collector, _ = started(FakeNvml([pcie_only, FakeDevice(1, values=links)]))
    registry = scrape_once(collector)
    assert [value(registry, "oximeter_gpu_nvlink_up", 1, link=str(k)) for k in range(4)] == [1, 1, 0, None]
    assert value(registry, "oximeter_gpu_nvlink_errors_total", 1, link="1", kind="crc_flit") == 12
    assert value(registry, "oximeter_gpu_nvlink_errors_total", 1, link="1", kind="replay") == 3
    assert value(registry, "oximeter_gpu_nvlink_errors_total", 1, link="0", kind="recovery") == 0
    assert value(registry, "oximeter_gpu_nvlink_transmit_bytes_total", 1, link="0") == 1000 * 1024
    assert value(registry, "oximeter_gpu_nvlink_receive_bytes_total", 1, link="0") == 3 * 1024
    assert value(registry, "oximeter_gpu_nvlink_up", 0, link="0") is None
    assert errors(registry, "nvml_error") == 0


def test_an_nvlink_counter_that_fails_is_absent_and_counted(started: Started) -> None:
    device = FakeDevice(1, values=nv.nvlink_values([nv.NVML_FEATURE_ENABLED]))
    device.errors["nvmlDeviceGetNvLinkErrorCounter"] = nv.NVML_ERROR_NO_PERMISSION
    _, collector, _ = started(FakeNvml([FakeDevice(0), device]))
    registry = scrape_once(collector)
    assert value(registry, "oximeter_gpu_nvlink_up", 1, link="0") == 1
    assert value(registry, "oximeter_gpu_nvlink_errors_total", 1, link="0", kind="crc_flit") is None
    assert value(registry, "oximeter_gpu_nvlink_transmit_bytes_total", 1, link="0") == 0
    assert errors(registry, "nvml_error") == 4  # one per counter kind
