"""Shared pieces of the exporter tests: one scrape frozen for exact asserts, a JSON server
standing in for the simulator's fleet API, promtool, and the same GPUs for every backend."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

GIB = 1024**3
NODE = "n1"


class _Frozen(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


def scrape_once(collector: Collector) -> CollectorRegistry:
    """A registry holding exactly one scrape of ``collector``, so counters do not move on read."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Frozen(list(collector.collect())))
    return registry


def exposition(collector: Collector) -> str:
    """One scrape in the text format Prometheus reads."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on ``text`` (the lint Prometheus ships)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is needed (make setup installs prometheus)"
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)


def gpu_labels(index: int) -> dict[str, str]:
    """The labels of GPU ``index`` as both backends below describe it."""
    return {"node": NODE, "gpu": str(index), "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
            "gpu_model": "NVIDIA H100 80GB HBM3", "pci_bus_id": f"00000000:{0x1A + index:02X}:00.0"}


def sim_gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """The simulator's JSON for the same healthy H100 that ``fake_pynvml.default_values`` is."""
    labels = gpu_labels(index)
    gpu: dict[str, Any] = {
        "index": index, "uuid": labels["uuid"], "name": labels["gpu_model"],
        "pci_bus_id": labels["pci_bus_id"], "lost": False,
        "utilization_ratio": 0.87, "memory_used_bytes": 76 * GIB, "memory_total_bytes": 80 * GIB,
        "temperature_celsius": 71, "power_watts": 512.345, "power_limit_watts": 700.0,
        "sm_clock_hertz": 1755e6, "sm_clock_max_hertz": 1980e6, "clock_event_reasons": ["power_cap"],
        "ecc_corrected_total": 3, "ecc_uncorrected_total": 0, "remapped_rows_correctable": 2,
        "remapped_rows_uncorrectable": 0, "row_remap_pending": False, "row_remap_failure": False,
        "pcie_replay_total": 5, "pcie_transmit_bytes_per_second": 2 * 1024 * 1024,
        "pcie_receive_bytes_per_second": 4 * 1024 * 1024, "xid_events": [],
        "processes": [{"pid": 4242 + index, "name": "python3", "used_memory_bytes": 70 * GIB}],
        "nvlinks": [{"link": link, "up": True,
                     "errors": {"crc_flit": 2 if link == 0 else 0, "crc_data": 0, "replay": 0, "recovery": 0},
                     "transmit_bytes": 4 * 1024 * 1024, "receive_bytes": 8 * 1024 * 1024} for link in (0, 1)],
    }
    gpu.update(overrides)
    return gpu


def sim_document(gpus: list[dict[str, Any]], processes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A whole ``GET /fleet/gpus?node=n1`` answer."""
    return {"simulation": True, "node": NODE, "gpus": gpus, "processes": processes or []}


@dataclass
class FleetServer:
    """Serves ``document`` (or ``status``) at /fleet/gpus on a free loopback port."""

    document: Any = None
    status: int = 200
    requests: list[str] = field(default_factory=list)
    raw: bytes | None = None  # served as is instead of the document (garbage, truncated JSON)

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append(self.path)
                body = json.dumps(owner.document if owner.status == 200 else {"error": "x"}).encode()
                body = owner.raw if owner.raw is not None else body
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL, as ``--sim-url`` takes it."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()


def fleet_server(document: Any) -> Generator[FleetServer, None, None]:
    """Generator for a fixture: a FleetServer that is always closed."""
    server = FleetServer(document)
    try:
        yield server
    finally:
        server.close()
