"""What one client can hold of the gateway: connections per client address, and how long it may take.

aiohttp's server has no deadline for a client that opens a connection and sends its request
headers (or body) a byte at a time, so without this a few hundred slow clients hold the gateway's
file descriptors for as long as they like. Each connection is wrapped in a protocol that keeps one
deadline: ``header_timeout_s`` from the connection (or from the first byte of the next request on
a kept-alive one) until its request reaches a handler, ``idle_timeout_s`` between requests. The
body has its own deadline where the handler reads it. Past a deadline the connection is closed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web

_OVER_CAP = (b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nRetry-After: 1\r\n"
             b"Content-Type: text/plain\r\nContent-Length: 37\r\n\r\ntoo many connections from this client\n")


class ConnectionGuard:
    """Counts connections per client address and keeps each one's deadline."""

    def __init__(self, header_timeout_s: float, idle_timeout_s: float, max_per_client: int) -> None:
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_per_client = max_per_client
        self.open: Counter[str] = Counter()
        self._by_transport: dict[int, _Guarded] = {}

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory whose connections are counted and kept to their deadlines."""
        return lambda: _Guarded(self, factory())

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """A request reached a handler: no header deadline while it is served."""
        if transport is not None and (conn := self._by_transport.get(id(transport))) is not None:
            conn.busy()

    def request_finished(self, transport: asyncio.BaseTransport | None) -> None:
        """The answer went out: the connection may now idle until ``idle_timeout_s``."""
        if transport is not None and (conn := self._by_transport.get(id(transport))) is not None:
            conn.idle()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Tell the guard when each request starts and ends being served."""
        self.request_started(request.transport)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            self.request_finished(request.transport)


class _Guarded(asyncio.Protocol):
    """Forwards everything to aiohttp's protocol; closes the transport past its deadline."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.state = "headers"
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport but have its methods.
        self.transport = conn = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self.guard.open[self.client] >= self.guard.max_per_client:
            conn.write(_OVER_CAP)
            conn.close()
            return
        self.guard.open[self.client] += 1
        self.counted = True
        self.guard._by_transport[id(transport)] = self
        self.inner.connection_made(transport)
        self._arm(self.guard.header_timeout_s)

    def busy(self) -> None:
        self.state = "busy"
        self._cancel()

    def idle(self) -> None:
        self.state = "idle"
        self._arm(self.guard.idle_timeout_s)

    def _arm(self, after_s: float) -> None:
        self._cancel()
        self.timer = asyncio.get_running_loop().call_later(after_s, self._expired)

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.transport is not None and self.state != "busy":
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return
        if self.state == "idle":  # the next request on a kept-alive connection begins
            self.state = "headers"
            self._arm(self.guard.header_timeout_s)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.counted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if not self.counted:
            return
        self.counted = False
        self.guard.open[self.client] -= 1
        if self.guard.open[self.client] <= 0:
            del self.guard.open[self.client]
        if self.transport is not None:
            self.guard._by_transport.pop(id(self.transport), None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections go through a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard,
                 **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        """As ``TCPSite.start``, with the protocol factory wrapped."""
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.guard.wrap(server), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, reuse_port=self._reuse_port)
