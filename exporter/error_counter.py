"""``oximeter_exporter_collect_errors_total{reason}``: failures counted, never raised to the scrape."""

from __future__ import annotations

import threading
from collections.abc import Iterable

# Known reasons start at 0 so that the first failure is visible to increase(): a counter born at 1
# shows no increase. Unknown reasons are still counted, they just appear on first use.
KNOWN_REASONS: tuple[str, ...] = (
    "gpu_lost",          # NVML_ERROR_GPU_IS_LOST, or the simulator says the GPU is lost
    "nvml_unknown",      # NVML_ERROR_UNKNOWN: the driver cannot say; treated like a lost GPU
    "nvml_error",        # any other NVML error on one field (no permission, ...)
    "timeout",           # NVML_ERROR_TIMEOUT or a GPU read that missed the scrape deadline
    "xid_listener",      # the NVML event thread failed and stopped
    "telemetry_lost",    # the simulator answered 503 for this node
    "sim_unreachable",   # the simulator did not answer or answered garbage
    "sim_bad_payload",   # one simulated GPU object was malformed
    "process",           # reading host process memory failed
    "redis",             # an external queue could not be read
    "backend",           # the backend raised although it must not; a bug, counted not crashed
)


class ErrorCounter:
    """Thread-safe counts per reason; the collector reads them at each scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(KNOWN_REASONS, 0)

    def add(self, reasons: Iterable[str]) -> None:
        """Count one failure per entry of ``reasons``."""
        with self._lock:
            for reason in reasons:
                self._counts[reason] = self._counts.get(reason, 0) + 1

    def snapshot(self) -> dict[str, int]:
        """A copy of the counts."""
        with self._lock:
            return dict(self._counts)
