"""Two real ``oximeter analyze`` processes with ``analyzer.ha`` on one PostgreSQL store: the second
stands by, the leader is SIGKILLed mid-incident, the standby takes over within the lease (the same
open incident, no second "opened", one take-over told), and a SIGTERM hands the lease back."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import requests
import yaml
from pg_server import PostgresServer, StoreSpace
from test_incidents_daemon import START, _open_ids, signal_file

from oximeter.store import connect
from stack.ports import wait_port
from stack.procs import ManagedProcess, oximeter_argv, wait_until

LEASE_S = 4.0


def _gauge(port: int, name: str) -> float | None:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = [ln.split()[-1] for ln in text.splitlines() if ln.startswith(f"{name} ")]
    return float(found[0]) if found else None


def _lease(store: str) -> tuple[str, int, int] | None:
    conn = connect(store)
    try:
        row = conn.execute("SELECT holder, epoch, released FROM leases").fetchone()
    finally:
        conn.close()
    return None if row is None else (str(row[0]), int(row[1]), int(row[2]))


def test_the_standby_process_takes_over_a_killed_leader(tmp_path: Path, postgres: PostgresServer,
                                                        start_process: Callable[..., ManagedProcess]) -> None:
    data = signal_file(tmp_path / "signals.parquet")
    store = StoreSpace("postgresql", tmp_path, postgres) / "ha"
    config = tmp_path / "oximeter.yaml"
    config.write_text(yaml.safe_dump({"analyzer": {"interval_s": 1, "ha": {
        "enabled": True, "lease_s": LEASE_S, "renew_s": LEASE_S / 4}}}))

    def start(name: str) -> tuple[ManagedProcess, int]:
        proc = start_process(name, oximeter_argv(
            "--config", str(config), "analyze", "--signals", str(data), "--replay-start", START,
            "--speed", "1", "--store", store, "--port", "0", "--port-file", str(tmp_path / f"{name}.port")))
        return proc, wait_port(proc, tmp_path / f"{name}.port")

    first, port_a = start("analyze-a")
    first.wait_ready(lambda: _open_ids(port_a) and _gauge(port_a, "oximeter_analyzer_leader") == 1, 90)
    (incident_id,) = _open_ids(port_a)
    second, port_b = start("analyze-b")
    second.wait_ready(lambda: (_gauge(port_b, "oximeter_analyzer_cycle_seconds_count") or 0) >= 1, 90)
    assert _gauge(port_b, "oximeter_analyzer_leader") == 0
    assert _gauge(port_b, 'oximeter_incidents_open{layer="infrastructure",severity="critical"}') == 0
    held = _lease(store)
    assert held is not None and held[1] == 1 and f":{first.proc.pid}:" in held[0]  # type: ignore[union-attr]

    first.signal(signal.SIGKILL)  # how fast the standby takes over is bench/ha_failover.py's to measure
    second.wait_ready(lambda: _gauge(port_b, "oximeter_analyzer_leader") == 1, 60)
    assert _open_ids(port_b) == [incident_id]
    told = "analyzer notice analyzer:takeover:default:2: analyzer "  # through the notifier, once
    wait_until(lambda: told in second.log_tail(200), 30, what="the take-over told")
    assert second.stop() == 0
    assert second.log_tail(400).count(told) == 1
    after = _lease(store)  # taken at epoch 2, released by the clean stop
    assert after is not None and after[1:] == (2, 1) and f":{second.proc.pid}:" in after[0]  # type: ignore[union-attr]
    conn = connect(store)
    try:
        changes = [r[0] for r in conn.execute("SELECT key FROM incident_changes").fetchall()]
        kinds = [r[0] for r in conn.execute("SELECT kind FROM incident_timeline WHERE incident_id = ?"
                                             " ORDER BY pos", (incident_id,)).fetchall()]
    finally:
        conn.close()
    assert changes == [f"{incident_id}:opened:1"] and kinds.count("takeover") == 1
