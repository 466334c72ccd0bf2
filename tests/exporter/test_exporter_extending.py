"""A GPU backend is one file plus one registry line: a toy backend, registered in BACKENDS alone,
is accepted by the settings, built by the exporter from them, and read by the collector."""

from __future__ import annotations

import pytest
from exporter_harness import scrape_once

from exporter.backends import BACKENDS
from exporter.backends.base import GpuIdentity, GpuReading, NodeSnapshot
from exporter.cli import make_backend
from exporter.collector import GpuCollector
from exporter.host import ProcessMemory
from exporter.settings import ExporterSettings


class ToyBackend:
    """What a new backend's file would hold: built from the settings, read at scrape time."""

    name = "toy"
    simulation = True

    def __init__(self, node: str, timeout_s: float) -> None:
        self.node, self.timeout_s = node, timeout_s

    @classmethod
    def from_settings(cls, settings: ExporterSettings, node: str) -> ToyBackend:
        return cls(node, settings.gpu_timeout_s)

    def start(self) -> None:
        pass

    def read(self) -> NodeSnapshot:
        gpu = GpuIdentity(0, "GPU-toy-0", "Toy 1", "00000000:01:00.0")
        return NodeSnapshot(gpus=(GpuReading(gpu, True, temperature_celsius=42.0),))

    def close(self) -> None:
        pass


def test_a_registered_backend_is_configured_built_and_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(BACKENDS, "toy", f"{__name__}:ToyBackend")  # the one registry line
    settings = ExporterSettings(backend="toy", gpu_timeout_s=1.5)
    backend = make_backend(settings, "n7")
    assert isinstance(backend, ToyBackend) and (backend.node, backend.timeout_s) == ("n7", 1.5)
    registry = scrape_once(GpuCollector(backend, "n7"))
    labels = {"node": "n7", "gpu": "0", "uuid": "GPU-toy-0", "gpu_model": "Toy 1",
              "pci_bus_id": "00000000:01:00.0"}
    assert registry.get_sample_value("oximeter_gpu_temperature_celsius", labels) == 42.0


def test_unregistered_the_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend: must be one of none, nvml, sim, got 'toy'"):
        ExporterSettings(backend="toy")


def test_a_cpu_host_exports_no_gpu_series_and_no_gpu_telemetry_to_miss() -> None:
    backend = make_backend(ExporterSettings(backend="none"), "n3")
    registry = scrape_once(GpuCollector(backend, "n3", host=ProcessMemory(())))
    names = {s.name for m in registry.collect() for s in m.samples}
    # No GPU source at all: not "telemetry that cannot be read" (oximeter_telemetry_up 0 pages).
    assert registry.get_sample_value("oximeter_telemetry_up", {"node": "n3"}) is None
    assert not {n for n in names if n.startswith("oximeter_gpu_")}, sorted(names)
    assert registry.get_sample_value("oximeter_host_memory_total_bytes", {"node": "n3"}) > 0
