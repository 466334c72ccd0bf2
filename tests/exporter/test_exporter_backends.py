"""One collector harness run over every backend: the same GPUs read through fake NVML and through
the simulator's fleet API must export the same samples, pass promtool, and match the DCGM golden."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from exporter_harness import (
    GIB,
    NODE,
    FleetServer,
    exposition,
    fleet_server,
    gpu_labels,
    promtool_check,
    scrape_once,
    sim_document,
    sim_gpu,
)
from fake_pynvml import FakeNvml

from exporter.backends.base import GpuBackend
from exporter.backends.nvml import NvmlBackend
from exporter.backends.sim import SimBackend
from exporter.collector import GpuCollector
from oximeter.xids import PAGING_XIDS

GOLDEN = Path(__file__).parent / "golden" / "dcgm.prom"

# (family sample name, extra labels, value) for GPU 0 and GPU 1 alike.
EXPECTED: list[tuple[str, dict[str, str], float]] = [
    ("oximeter_gpu_up", {}, 1),
    ("oximeter_gpu_utilization_ratio", {}, 0.87),
    ("oximeter_gpu_memory_used_bytes", {}, 76 * GIB),
    ("oximeter_gpu_memory_total_bytes", {}, 80 * GIB),
    ("oximeter_gpu_temperature_celsius", {}, 71),
    ("oximeter_gpu_power_watts", {}, 512.345),
    ("oximeter_gpu_power_limit_watts", {}, 700),
    ("oximeter_gpu_sm_clock_hertz", {}, 1.755e9),
    ("oximeter_gpu_sm_clock_max_hertz", {}, 1.98e9),
    ("oximeter_gpu_clock_event_active", {"reason": "power_cap"}, 1),
    ("oximeter_gpu_clock_event_active", {"reason": "hw_thermal"}, 0),
    ("oximeter_gpu_clock_event_active", {"reason": "sw_thermal"}, 0),
    ("oximeter_gpu_clock_event_active", {"reason": "hw_slowdown"}, 0),
    ("oximeter_gpu_clock_event_active", {"reason": "power_brake"}, 0),
    ("oximeter_gpu_clock_event_active", {"reason": "idle"}, 0),
    ("oximeter_gpu_ecc_errors_total", {"kind": "corrected"}, 3),
    ("oximeter_gpu_ecc_errors_total", {"kind": "uncorrected"}, 0),
    ("oximeter_gpu_remapped_rows", {"kind": "correctable"}, 2),
    ("oximeter_gpu_remapped_rows", {"kind": "uncorrectable"}, 0),
    ("oximeter_gpu_row_remap_pending", {}, 0),
    ("oximeter_gpu_row_remap_failure", {}, 0),
    ("oximeter_gpu_pcie_replay_total", {}, 5),
    ("oximeter_gpu_pcie_throughput_bytes_per_second", {"direction": "transmit"}, 2 * 1024 * 1024),
    ("oximeter_gpu_pcie_throughput_bytes_per_second", {"direction": "receive"}, 4 * 1024 * 1024),
    *[("oximeter_gpu_nvlink_up", {"link": str(k)}, 1) for k in (0, 1)],
    ("oximeter_gpu_nvlink_errors_total", {"link": "0", "kind": "crc_flit"}, 2),
    *[("oximeter_gpu_nvlink_errors_total", {"link": "1", "kind": kind}, 0)
      for kind in ("crc_flit", "crc_data", "replay", "recovery")],
    *[("oximeter_gpu_nvlink_transmit_bytes_total", {"link": str(k)}, 4 * 1024 * 1024) for k in (0, 1)],
    *[("oximeter_gpu_nvlink_receive_bytes_total", {"link": str(k)}, 8 * 1024 * 1024) for k in (0, 1)],
    *[("oximeter_gpu_xid_errors_total", {"xid": str(x)}, 0) for x in PAGING_XIDS],
    *[("oximeter_gpu_xid_last_timestamp_seconds", {"xid": str(x)}, 0) for x in PAGING_XIDS],
]


@pytest.fixture(params=["nvml", "sim"])
def backend(request: pytest.FixtureRequest) -> Iterator[GpuBackend]:
    """The same two healthy H100s behind each backend."""
    if request.param == "nvml":
        nvml: GpuBackend = NvmlBackend(nvml=FakeNvml(process_names={4242: "/usr/bin/python3",
                                                                    4243: "python3"}))
        nvml.start()
        yield nvml
        nvml.close()
    else:
        servers = fleet_server(sim_document([sim_gpu(0), sim_gpu(1)]))
        server: FleetServer = next(servers)
        sim = SimBackend(server.url, NODE, timeout_s=5.0)
        sim.start()
        yield sim
        sim.close()
        servers.close()


def test_every_family_has_the_exact_values(backend: GpuBackend) -> None:
    registry = scrape_once(GpuCollector(backend, NODE))
    for index in (0, 1):
        for name, extra, value in EXPECTED:
            assert registry.get_sample_value(name, {**gpu_labels(index), **extra}) == value, (name, extra)
        proc = {**gpu_labels(index), "pid": str(4242 + index), "process": "python3"}
        assert registry.get_sample_value("oximeter_gpu_process_memory_used_bytes", proc) == 70 * GIB
    assert registry.get_sample_value("oximeter_exporter_collect_errors_total",
                                     {"node": NODE, "reason": "gpu_lost"}) == 0
    duration = registry.get_sample_value("oximeter_exporter_collect_duration_seconds", {"node": NODE})
    assert duration is not None and duration > 0
    expected_info = 1 if backend.simulation else None
    assert registry.get_sample_value("oximeter_simulation_info", {"node": NODE}) == expected_info


def test_promtool_accepts_the_output(backend: GpuBackend) -> None:
    text = exposition(GpuCollector(backend, NODE))
    result = promtool_check(text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'oximeter_gpu_up{gpu="1",gpu_model="NVIDIA H100 80GB HBM3"' in text


def test_dcgm_names_match_the_golden_file(backend: GpuBackend) -> None:
    text = exposition(GpuCollector(backend, NODE, naming="dcgm"))
    dcgm = "".join(line + "\n" for line in text.splitlines() if "DCGM_" in line)
    assert dcgm == GOLDEN.read_text()
    # The oximeter names are still there: DCGM names come in addition.
    assert "oximeter_gpu_up{" in text


def test_registration_does_not_read_the_gpu() -> None:
    from prometheus_client import CollectorRegistry

    fake = FakeNvml()
    nvml = NvmlBackend(nvml=fake)
    nvml.start()
    try:
        before = fake.calls
        CollectorRegistry().register(GpuCollector(nvml, NODE, naming="dcgm"))
        assert fake.calls == before
    finally:
        nvml.close()
