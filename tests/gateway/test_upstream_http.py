"""The hot-path HTTP/1.1 client against a raw TCP server that sends crafted bytes in pieces.

Each case is one response as the engine might frame it, cut into fragments at awkward places
(inside the head, inside a chunk-size line, between a chunk and its CRLF), so the parser's state
is exercised across ``data_received`` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway.upstream_http import UpstreamError, UpstreamPool

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _with_server(serve: Serve, use: Callable[[UpstreamPool], Awaitable[None]]) -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout_s=5)
    try:
        await asyncio.wait_for(use(pool), 10)
    finally:
        pool.close()
        server.close()
        await server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length"))
    return head, await reader.readexactly(length)


def _sender(fragments: list[bytes], *, requests: int = 1) -> Serve:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(requests):
            await _read_request(reader)
            for fragment in fragments:
                writer.write(fragment)
                await writer.drain()
                await asyncio.sleep(0.001)
        await reader.read()  # hold the connection until the client closes it
        writer.close()

    return serve


CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CASES = {
    "content-length": (
        [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Le", b"ngth: 7\r\n\r\n{", b'"a":1}'],
        b'{"a":1}',
        True,
    ),
    "chunked split everywhere": (
        [CHUNKED[:20], CHUNKED[20:], b"5\r", b"\nhello\r", b"\na", b"\r\nworld-wide\r\n0\r\n", b"\r\n"],
        b"helloworld-wide",
        True,
    ),
    "chunked with extension and trailer": (
        [CHUNKED + b"3;x=y\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"],
        b"abc",
        True,
    ),
    "informational head first": (
        [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
        b"ok",
        True,
    ),
    "connection close": (
        [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"],
        b"ok",
        False,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bodies_are_read_whole_and_kept_alive_only_when_allowed(name: str) -> None:
    fragments, expected, reusable = CASES[name]

    async def use(pool: UpstreamPool) -> None:
        for _ in range(2):
            response = await pool.post("/v1/chat/completions", b"{}", {"Content-Type": "application/json"})
            assert response.status == 200
            assert await response.read() == expected
            response.release()
        assert len(pool._idle) == (1 if reusable else 0)

    asyncio.run(_with_server(_sender(fragments, requests=2), use))


def test_request_carries_host_length_and_headers() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await _read_request(reader))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def use(pool: UpstreamPool) -> None:
        response = await pool.post("/v1/completions", b'{"x":1}', {"X-Request-ID": "r1"})
        assert (response.status, await response.read()) == (204, b"")
        response.release()

    asyncio.run(_with_server(serve, use))
    head, body = seen[0]
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nX-Request-ID: r1\r\n" in head
    assert b"\r\nContent-Length: 7\r\n" in head
    assert body == b'{"x":1}'


@pytest.mark.parametrize(
    "fragments",
    [
        [b"SPDY/3 200 OK\r\n\r\n"],
        [CHUNKED + b"zz\r\n"],
        [CHUNKED + b"5\r\nhel"],  # connection closed mid-chunk
    ],
    ids=["not http", "bad chunk size", "closed mid-body"],
)
def test_broken_responses_raise_upstream_error(fragments: list[bytes]) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        for fragment in fragments:
            writer.write(fragment)
        await writer.drain()
        writer.close()

    async def use(pool: UpstreamPool) -> None:
        with pytest.raises(UpstreamError):
            response = await pool.post("/", b"", {})
            await response.read()

    asyncio.run(_with_server(serve, use))


def test_refused_connection_raises_upstream_error() -> None:
    async def use() -> None:
        server = await asyncio.start_server(_sender([]), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError):
            await UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout_s=5).post("/", b"", {})

    asyncio.run(use())


def test_connection_closed_while_idle_is_not_reused() -> None:
    """An engine's keep-alive timeout closes idle connections; the next request opens a new one."""
    connections: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
        await writer.drain()
        writer.close()

    async def use(pool: UpstreamPool) -> None:
        for _ in range(2):
            response = await pool.post("/", b"", {})
            assert await response.read() == b"x"
            response.release()
            # Let the engine's FIN reach the pool (a request racing it would get a 502, as with
            # any HTTP/1.1 client).
            await asyncio.sleep(0.05)

    asyncio.run(_with_server(serve, use))
    assert len(connections) == 2
