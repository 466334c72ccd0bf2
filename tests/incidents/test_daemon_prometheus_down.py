"""Issue 6 must-show 4: ``oximeter analyze`` reading a real Prometheus that is stopped and restarted.

Prometheus down → ``oximeter_analyzer_source_up 0``, the cycle backs off, exactly one "analyzer
cannot see" notice reaches chat (a webhook channel to a local receiver), the daemon keeps running;
Prometheus back on the same port → ``source_up 1`` with no restart of the daemon.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from stack.ports import reserve_port, wait_port
from stack.procs import ManagedProcess, http_ok, oximeter_argv, wait_until

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class Receiver:
    """A local webhook endpoint that keeps every JSON body it accepts (HTTP 200)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def notices(self) -> list[dict[str, Any]]:
        """The "analyzer cannot see" notices received so far."""
        return [b for b in list(self.bodies) if str(b.get("idempotency_key", "")).startswith(
            "analyzer:source_down:")]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A started receiver, always shut down."""
    rec = Receiver()
    rec.thread.start()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


def _metric(port: int, name: str) -> float | None:
    for line in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line.split(" ")[0] == name:
            return float(line.split()[-1])
    return None


def test_prometheus_down_notices_once_and_recovers(tmp_path: Path, receiver: Receiver,
                                                   start_process: Callable[..., ManagedProcess]) -> None:
    # Prometheus comes back on the same port: it stays reserved for the whole test.
    with reserve_port() as prom_port:
        _prometheus_down_and_back(tmp_path, receiver, start_process, prom_port)


def _prometheus_down_and_back(tmp_path: Path, receiver: Receiver,
                              start_process: Callable[..., ManagedProcess], prom_port: int) -> None:
    prom_url = f"http://127.0.0.1:{prom_port}"
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: prometheus\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{prom_port}']}}]\n")
    prom_argv = [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"]
    config = {
        "analyzer": {"prometheus": {"url": prom_url, "retries": 0, "timeout_s": 5}, "step_s": 1,
                     "interval_s": 1, "live_window_s": 120},
        "incidents": {"store_path": str(tmp_path / "oximeter.db")},
        "reporter": {"channels": {"chat": {"type": "webhook", "url_env": "CHAT_URL"}},
                     "watchdog_timeout_s": 0, "retry_base_s": 1.0,
                     "digest": {"prometheus_url": prom_url, "time": "23:59", "timezone": "UTC"}},
    }
    (tmp_path / "oximeter.yaml").write_text(json.dumps(config))

    prometheus = start_process("prometheus-1", prom_argv)
    prometheus.wait_ready(lambda: http_ok(f"{prom_url}/-/ready"), 60)
    daemon = start_process("analyze", oximeter_argv("--config", str(tmp_path / "oximeter.yaml"), "analyze",
                                                    "--port", "0", "--port-file", str(tmp_path / "api.port")),
                           env={"CHAT_URL": receiver.url})
    api_port = wait_port(daemon, tmp_path / "api.port")
    daemon.wait_ready(lambda: http_ok(f"http://127.0.0.1:{api_port}/metrics")
                      and (_metric(api_port, "oximeter_analyzer_cycle_seconds_count") or 0) >= 1, 60)
    assert _metric(api_port, "oximeter_analyzer_source_up") == 1
    assert _metric(api_port, 'oximeter_incidents_open{layer="infrastructure",severity="critical"}') == 0

    assert prometheus.stop() == 0
    wait_until(lambda: _metric(api_port, "oximeter_analyzer_source_up") == 0, 60, what="source_up 0")
    # Two failed cycles in a row (the second after the back-off) and still one notice, no crash.
    wait_until(lambda: "2 failure(s) in a row" in daemon.log_tail(200), 60, what="a second failed cycle")
    wait_until(receiver.notices, 60, what="the 'analyzer cannot see' notice in chat")
    assert daemon.running
    (notice,) = receiver.notices()
    assert "analyzer cannot see: the metrics source failed (DependencyError)" in json.dumps(notice)

    restarted = start_process("prometheus-2", prom_argv)
    restarted.wait_ready(lambda: http_ok(f"{prom_url}/-/ready"), 60)
    wait_until(lambda: _metric(api_port, "oximeter_analyzer_source_up") == 1, 90, what="source_up 1 again")
    # The daemon's log is written by a queue thread: the line can land just after the gauge flips.
    wait_until(lambda: "analyzer: source back after" in daemon.log_tail(200), 30, what="the recovery logged")
    wait_until(lambda: _metric(api_port, "oximeter_outbox_pending") == 0, 30, what="the outbox drained")
    assert len(receiver.notices()) == 1
    assert requests.get(f"http://127.0.0.1:{api_port}/api/incidents", timeout=5).json()["incidents"] == []
    assert daemon.stop() == 0
