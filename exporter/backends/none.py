"""No GPUs: a host that serves on its CPUs. The exporter still reads the host itself (its inference
processes' memory, the host's memory, external work queues) and exports no GPU series at all: an
absent series is honest, and the analyzer says once that this node has no GPU telemetry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from exporter.backends.base import NodeSnapshot

if TYPE_CHECKING:
    from exporter.settings import ExporterSettings


class NoGpuBackend:
    """A node without GPUs: every read succeeds with none."""

    name = "none"
    simulation = False

    @classmethod
    def from_settings(cls, settings: ExporterSettings, node: str) -> Self:
        """Nothing to configure."""
        return cls()

    def start(self) -> None:
        """Nothing to acquire."""

    def read(self) -> NodeSnapshot:
        """No GPU; the collector reads the host's processes and memory itself."""
        return NodeSnapshot(gpus=(), gpu_source=False)

    def close(self) -> None:
        """Nothing to release."""
