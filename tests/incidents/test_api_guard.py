"""The analyzer API under a flood of idle connections: a real ``oximeter analyze`` with an open-file
limit of 1,024 keeps accepting Alertmanager's webhook from another client and keeps cycling."""

from __future__ import annotations

import contextlib
import http.client
import json
import resource
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from stack.ports import wait_port
from stack.procs import ManagedProcess, oximeter_argv, wait_until

TOKEN = "guard-token-7c1"
IDLE = 1100
OTHER_CLIENT = "127.0.0.2"  # Linux answers the whole of 127.0.0.0/8 on the loopback interface


def _signals(path: Path) -> Path:
    index = pd.date_range("2026-03-02T09:00:00Z", periods=480, freq="15s")
    pd.DataFrame({"timestamp": index, "signal": "gpu_utilization_p95", "node": "n1", "gpu": "0",
                  "value": 0.5}).to_parquet(path, index=False)
    return path


def _get(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(OTHER_CLIENT, 0))
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                       "Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def _cycles(port: int) -> float:
    _status, text = _get(port, "GET", "/metrics")
    name = "oximeter_analyzer_cycle_seconds_count"
    lines = [ln for ln in text.decode().splitlines() if ln.startswith(name)]
    return float(lines[0].split()[-1]) if lines else 0.0


@pytest.fixture
def many_files() -> Iterator[None]:
    # This process holds the idle connections: it needs more than the daemon's 1,024 itself.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = IDLE + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.usefixtures("many_files")
def test_idle_connections_do_not_starve_the_webhook_or_the_cycle(
        tmp_path: Path, start_process: Callable[..., ManagedProcess]) -> None:
    config = tmp_path / "oximeter.yaml"
    config.write_text("analyzer:\n  interval_s: 0.5\n", encoding="utf-8")
    signals = _signals(tmp_path / "signals.parquet")
    argv = oximeter_argv("--config", str(config), "analyze", "--signals", str(signals),
                         "--replay-start", "2026-03-02T10:00:00Z", "--speed", "1",
                         "--store", str(tmp_path / "oximeter.db"), "--port", "0",
                         "--port-file", str(tmp_path / "api.port"))
    daemon = start_process("analyze", ["sh", "-c", 'ulimit -n 1024 && exec "$@"', "sh", *argv],
                           env={"OXIMETER_API_TOKEN": TOKEN})
    port = wait_port(daemon, tmp_path / "api.port")
    wait_until(lambda: _cycles(port) >= 1, 60, what="the first cycle")

    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE):
            with contextlib.suppress(OSError):  # a refused one is as good: the server had to handle it
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert len(idle) >= IDLE * 0.9
        payload = {"version": "4", "groupKey": "{}:{alertname=\"Probe\"}", "status": "firing",
                   "receiver": "oximeter", "groupLabels": {"alertname": "Probe"}, "commonLabels": {},
                   "commonAnnotations": {}, "externalURL": "http://am", "truncatedAlerts": 0,
                   "alerts": [{"status": "firing", "labels": {"alertname": "Probe", "node": "n9"},
                               "annotations": {}, "startsAt": "2026-03-02T10:00:00Z",
                               "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": "fp1"}]}
        started = time.monotonic()
        status, body = _get(port, "POST", "/api/alertmanager", json.dumps(payload).encode())
        took_s = time.monotonic() - started
        assert status == 200, body
        assert took_s < 5.0
        before = _cycles(port)
        wait_until(lambda: _cycles(port) > before, 30, what="another cycle with the connections held")
    finally:
        for sock in idle:
            sock.close()
    log = daemon.log_tail(100_000)
    assert "out of system resource" not in log and "Too many open files" not in log
    assert len(log.splitlines()) < 200  # a summary per interval, not a line per refused connection
