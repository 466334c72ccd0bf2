"""Slow and greedy clients: header, body and idle deadlines, a per-client connection cap, request
ceilings and the JSON content type, all answered by the gateway without reaching the engine."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import requests
from gateway_harness import MODEL, ReadMetric, StartGateway, Upstream

from stack.procs import wait_until

CHAT = "/v1/chat/completions"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _closed_by_peer(sock: socket.socket) -> bool:
    """True once the gateway has closed ``sock`` (whatever it said first)."""
    try:
        while chunk := sock.recv(4096):
            del chunk
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _open(port: int, sockets: list[socket.socket], first: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if first:
        sock.sendall(first)
    sock.setblocking(False)
    sockets.append(sock)
    return sock


def test_slow_clients_are_cut_off_while_normal_requests_succeed(
    upstream: Upstream, start_gateway: StartGateway, sockets: list[socket.socket]
) -> None:
    gw = start_gateway(upstream.url, "--header-timeout", "1", "--body-timeout", "1",
                       "--max-connections-per-client", "1000")
    port = _port(gw)
    # 400 slow clients, as a careless or hostile one opens them: partial headers, silence, and a
    # body that never completes.
    slow = [_open(port, sockets, f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n".encode()) for _ in range(360)]
    slow += [_open(port, sockets, b"") for _ in range(20)]  # connect and say nothing
    slow += [_open(port, sockets, f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: 500\r\n\r\n{{\"model\"".encode()) for _ in range(20)]
    answer = requests.post(f"{gw}{CHAT}", json=BODY, timeout=30)
    assert answer.status_code == 200
    wait_until(lambda: all(_closed_by_peer(s) for s in slow), 60, what="every slow connection closed")
    assert requests.post(f"{gw}{CHAT}", json=BODY, timeout=30).status_code == 200


def test_connections_per_client_are_capped(
    upstream: Upstream, start_gateway: StartGateway, sockets: list[socket.socket]
) -> None:
    gw = start_gateway(upstream.url, "--max-connections-per-client", "4", "--header-timeout", "60")
    port = _port(gw)
    # The readiness probe's connection may still be closing: wait until 4 idle ones are held.
    held = [_open(port, sockets, b"") for _ in range(4)]
    wait_until(lambda: requests.get(f"{gw}/health/live", timeout=10).status_code == 429, 30,
               what="the cap reached")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
        reply = extra.recv(4096)
    assert reply.startswith(b"HTTP/1.1 429")
    for sock in held:
        sock.close()
    wait_until(lambda: requests.get(f"{gw}/health/live", timeout=10).status_code == 200, 30,
               what="a connection allowed again")


@pytest.mark.parametrize(("body", "headers", "status", "reason"), [
    (b'{"model": "test-model", "messages": []}', {"Content-Type": "text/plain"}, 415,
     "unsupported_media_type"),
    (b'{"model": "test-model", "messages": []}', {}, 415, "unsupported_media_type"),
    (b'{"model": "test-model", "max_tokens": 100000000, "messages": [{"role": "user", "content": "x"}]}',
     {"Content-Type": "application/json"}, 400, "limit_exceeded"),
    (b'{"model": "test-model", "messages": [{"role": "user", "content": "' + b"x" * 3000 + b'"}]}',
     {"Content-Type": "application/json"}, 400, "limit_exceeded"),
    (b'{"model": "test-model", "prompt": ["' + b"y" * 3000 + b'"]}',
     {"Content-Type": "application/json; charset=utf-8"}, 400, "limit_exceeded"),
])
def test_ceilings_and_content_type_are_refused_before_the_engine(
    upstream: Upstream, start_gateway: StartGateway, read_metric: ReadMetric,
    body: bytes, headers: dict[str, str], status: int, reason: str,
) -> None:
    gw = start_gateway(upstream.url, "--max-tokens-limit", "4096", "--max-prompt-chars", "2048")
    answer = requests.post(f"{gw}{CHAT}", data=body, headers=headers, timeout=30)
    assert answer.status_code == status
    assert answer.json()["error"]["type"] == reason
    assert upstream.completions() == []
    assert read_metric(gw, "oximeter_rejected_requests_total", reason=reason) == 1
