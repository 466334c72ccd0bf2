"""Real ``oximeter analyze`` processes with ``analyzer.ha`` on one store. Two of one shard on
PostgreSQL: the second stands by, the leader is SIGKILLed mid-incident, the standby takes over
within the lease (the same open incident, no second "opened", one take-over told), and a SIGTERM
hands the lease back. Two shards on SQLite, each reading its own nodes: one shard's only analyzer is
SIGKILLed, and the other tells of it once."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import requests
import yaml
from pg_server import PostgresServer, StoreSpace
from test_incidents_daemon import START, _cycles, _open_ids, signal_file

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


def test_a_shard_whose_only_analyzer_is_killed_is_told_once_by_the_other(
        tmp_path: Path, start_process: Callable[..., ManagedProcess]) -> None:
    data = signal_file(tmp_path / "signals.parquet")  # a paging Xid on n1
    store = str(tmp_path / "ha.db")

    def start(shard: str, selector: str) -> ManagedProcess:
        config = tmp_path / f"{shard}.yaml"
        config.write_text(yaml.safe_dump({"analyzer": {"interval_s": 1, "ha": {
            "enabled": True, "lease_s": LEASE_S, "renew_s": LEASE_S / 4, "shard": shard,
            "selector": selector}}}))
        return start_process(f"analyze-{shard}", oximeter_argv(
            "--config", str(config), "analyze", "--signals", str(data), "--replay-start", START,
            "--speed", "1", "--store", store, "--port", "0", "--port-file", str(tmp_path / f"{shard}.port")))

    east, west = start("east", 'node="n1"'), start("west", 'node!="n1"')  # both start at once
    port_east, port_west = wait_port(east, tmp_path / "east.port"), wait_port(west, tmp_path / "west.port")
    east.wait_ready(lambda: _open_ids(port_east) and _gauge(port_east, "oximeter_analyzer_leader") == 1, 90)
    west.wait_ready(lambda: _gauge(port_west, "oximeter_analyzer_leader") == 1 and _cycles(port_west) >= 2,
                    90)
    # Each shard reads only its nodes: n1's Xid is east's incident, and west, which sees the whole
    # fleet's incidents through the shared store, opened none of its own.
    (incident_id,) = _open_ids(port_west)
    assert _shards(store, "SELECT shard FROM incidents") == ["east"]

    east.signal(signal.SIGKILL)
    told = "analyzer notice analyzer:shard_lapsed:east:1: shard east has no analyzer: its leader "
    wait_until(lambda: told in west.log_tail(400), 60, what="the lost shard told")
    # Two leases more of west's cycles (one a second) with east still down: nothing more is told.
    seen = _cycles(port_west)
    wait_until(lambda: _cycles(port_west) >= seen + 2 * LEASE_S, 60, what="west's later cycles")
    assert west.log_tail(1000).count("analyzer:shard_lapsed:") == 1
    assert _shards(store, "SELECT shard FROM leases WHERE lapse_reported_epoch = epoch") == ["east"]
    assert _open_ids(port_west) == [incident_id]
    assert west.stop() == 0


def _shards(store: str, query: str) -> list[str]:
    conn = connect(store)
    try:
        return sorted(str(row[0]) for row in conn.execute(query).fetchall())
    finally:
        conn.close()
