"""Ports are never chosen before they are bound (``stack/ports.py``): reservations outside the
ephemeral range, the restart of a server that finds its port taken, and two whole stacks started
at once while another process churns outgoing connections through the ephemeral range."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from reporter.sink import ChatSink
from stack import ports
from stack.demo_stack import analyzer_addon
from stack.local import Endpoints, Stack, StackOptions
from stack.ports import PortError, refusing_port, reservable_ports, reserve_port, start_reserved
from stack.procs import ManagedProcess, wait_until

LISTEN = """
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
time.sleep(600)
"""

# Opens and closes outgoing loopback connections until its stdin closes; prints a running count.
CHURN = """
import os, socket, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(512)
def accept():
    while True:
        conn, _ = server.accept()
        conn.close()
threading.Thread(target=accept, daemon=True).start()
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
count = 0
while True:
    with socket.create_connection(server.getsockname(), timeout=5) as conn:
        conn.recv(1)  # the server closes first: the TIME_WAIT stays on its side, ports keep coming
    count += 1
    if count % 100 == 0:
        print(count, flush=True)
    time.sleep(0.004)  # ~200 a second, thousands while the stacks start, without a busy core
"""


def test_reservable_ports_avoid_the_ephemeral_range() -> None:
    assert min(reservable_ports((32768, 60999))) == ports.LOWEST_RESERVED_PORT
    assert not any(32768 <= p <= 60999 for p in reservable_ports((32768, 60999)))
    assert reservable_ports((1024, 60999))[0] == 61000
    assert reservable_ports((10000, 65535)) == list(range(1024, 10000))
    with pytest.raises(PortError):
        reservable_ports((1, 65535))
    low, high = ports.ephemeral_range()
    assert 0 < low <= high <= 65535


def test_a_reserved_port_is_held_until_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with reserve_port() as first, reserve_port() as second:  # two ports nobody else takes meanwhile
        monkeypatch.setattr(ports, "reservable_ports", lambda: [first, second])
        with reserve_port(tmp_path) as a, reserve_port(tmp_path) as b:
            assert {a, b} == {first, second}
            with pytest.raises(PortError), reserve_port(tmp_path):
                pass
        with reserve_port(tmp_path) as again:  # released at the end of the block
            assert again in (first, second)


def test_a_server_that_finds_its_port_taken_is_restarted_on_another(tmp_path: Path) -> None:
    attempts: list[tuple[int, ManagedProcess]] = []
    squatter = socket.socket()

    def start(port: int) -> ManagedProcess:
        if not attempts:  # a process outside the reservations takes the first port in between
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
        proc = ManagedProcess(f"listener-{len(attempts)}", [sys.executable, "-c", LISTEN, str(port)],
                              tmp_path).start()
        attempts.append((port, proc))
        return proc

    def listening(port: int) -> bool:
        return "listening" in attempts[-1][1].log_tail()

    try:
        proc, port = start_reserved(start, listening)
        assert [p for p, _ in attempts] == [attempts[0][0], port] and port != attempts[0][0]
        assert not attempts[0][1].running and "address already in use" in attempts[0][1].log_tail().lower()
        assert proc.running
    finally:
        squatter.close()
        for _, proc in attempts:
            proc.stop()


def test_a_refusing_port_refuses() -> None:
    with refusing_port() as port, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.fixture
def churn() -> Iterator[subprocess.Popen[str]]:
    """A process opening and closing outgoing loopback connections, as other test workers do."""
    proc = subprocess.Popen([sys.executable, "-c", CHURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)


def _connections(churn: subprocess.Popen[str], at_least: int) -> int:
    assert churn.stdout is not None
    count = 0
    while count < at_least:
        line = churn.stdout.readline()
        assert line, "the churn process stopped"
        count = int(line)
    return count


def _stack_ports(ep: Endpoints) -> dict[str, int]:
    urls = {"prometheus": ep.prometheus, "alertmanager": ep.alertmanager or "", "redis": ep.redis or "",
            **{f"engine-{n}": u for n, u in ep.engines.items()},
            **{f"gateway-{n}": u for n, u in ep.gateways.items()},
            **{f"exporter-{n}": u for n, u in ep.exporters.items()}, **ep.addons}
    return {name: int(url.rstrip("/").rsplit(":", 1)[1]) for name, url in urls.items()}


def test_two_stacks_start_at_once_while_connections_churn(tmp_path: Path,
                                                          churn: subprocess.Popen[str]) -> None:
    _connections(churn, 500)  # the churn is under way before either stack picks a port
    sinks = [ChatSink().start() for _ in range(2)]
    stacks = []
    for i, sink in enumerate(sinks):
        workspace = tmp_path / f"stack{i}"
        workspace.mkdir()
        token = workspace / "relay.token"
        token.write_text("relay-token", encoding="utf-8")
        stacks.append(Stack(workspace, StackOptions(
            nodes=1, gpus_per_node=1, scrape_interval_s=1.0, eval_interval_s=1.0, relay_token_file=token,
            addons=(analyzer_addon(workspace, sink.url, token, step_s=1.0, interval_s=1.0),))))
    try:
        with ThreadPoolExecutor(2) as pool:
            started = list(pool.map(Stack.start, stacks))
        assert _connections(churn, 2000) >= 2000
        found = [_stack_ports(ep) for ep in started]
        low, high = ports.ephemeral_range()
        for stack_ports in found:
            for role in ("prometheus", "alertmanager", "redis"):  # third-party: reserved ports
                assert not low <= stack_ports[role] <= high, (role, stack_ports)
        assert len({p for f in found for p in f.values()}) == sum(len(f) for f in found)  # none shared
        for stack in stacks:  # each one whole: every core target scraped, the analyzer added after
            wait_until(partial(stack.query, 'up{job="oximeter-analyzer"} == 1'), 60,
                       what="the analyzer scraped")
            assert len(stack.query("up == 1")) == 4
    finally:
        for stack in stacks:
            stack.stop()
        for sink in sinks:
            sink.stop()
