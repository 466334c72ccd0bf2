"""What one client can hold of a listener: connections per client address and in all, and for how long.

aiohttp's server has no deadline for a client that opens a connection and sends its request
headers (or body) a byte at a time, so without this a few hundred slow or idle clients hold the
process's file descriptors for as long as they like: past the open-file limit the process can no
longer accept anyone, nor reach Prometheus or its chat services. Each connection is wrapped in a
protocol that keeps one deadline: ``header_timeout_s`` from the connection (or from the first byte
of the next request on a kept-alive one) until its request reaches a handler, ``idle_timeout_s``
between requests. The body has its own deadline where the handler reads it (:func:`read_body`).
Past a deadline the connection is closed. A client over ``max_per_client``, or any client past
``max_connections`` in all, is answered at once and closed. Every listener (the gateway, the
analyzer's API and the Alertmanager relay on it) runs one guard configured for itself; what it
refuses is logged as one summary line per ``log_interval_s``, never a line per connection.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from loguru import logger

_OVER_CAP = (b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nRetry-After: 1\r\n"
             b"Content-Type: text/plain\r\nContent-Length: 37\r\n\r\ntoo many connections from this client\n")
_FULL = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
         b"Content-Type: text/plain\r\nContent-Length: 21\r\n\r\ntoo many connections\n")


def default_max_connections() -> int:
    """Three quarters of the open-file limit: the rest stays for the store, the logs and the
    connections the process makes itself (Prometheus, chat services, the upstream engine)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, soft * 3 // 4) if soft != resource.RLIM_INFINITY else 65536


class ConnectionGuard:
    """Counts connections per client address and in all, and keeps each one's deadline."""

    def __init__(self, header_timeout_s: float, idle_timeout_s: float, max_per_client: int, *,
                 max_connections: int | None = None, body_timeout_s: float = 30.0,
                 name: str = "listener", log_interval_s: float = 60.0) -> None:
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = body_timeout_s
        self.max_per_client = max_per_client
        self.max_connections = max_connections or default_max_connections()
        self.name, self.log_interval_s = name, log_interval_s
        self.open: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # reason -> connections since the last summary
        self.refused_clients: set[str] = set()
        self._summary: asyncio.TimerHandle | None = None
        self._by_transport: dict[int, _Guarded] = {}

    @property
    def total(self) -> int:
        """Connections held now."""
        return sum(self.open.values())

    def note(self, reason: str, client: str) -> None:
        """Count one refused or expired connection; the summary line follows within an interval."""
        self.refused[reason] += 1
        self.refused_clients.add(client)
        if self._summary is None:
            self._summary = asyncio.get_running_loop().call_later(self.log_interval_s, self.summarise)

    def summarise(self) -> None:
        """One line for everything refused since the last one (none when nothing was)."""
        self._summary = None
        if self.refused:
            counts = ", ".join(f"{n} {reason}" for reason, n in sorted(self.refused.items()))
            logger.warning("{}: connections refused or closed in the last {:g} s: {} (from {} client "
                           "address(es); {} held now)", self.name, self.log_interval_s, counts,
                           len(self.refused_clients), self.total)
        self.refused.clear()
        self.refused_clients.clear()

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
            self.guard.note("over the per-client cap", self.client)
            return
        if self.guard.total >= self.guard.max_connections:
            conn.write(_FULL)
            conn.close()
            self.guard.note("over the total cap", self.client)
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
            if self.state == "headers":  # an idle keep-alive closing is normal; a silent client is not
                self.guard.note("without a request in time", self.client)
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

    def accept_burst(self) -> int:
        """The backlog handed to asyncio, which also accepts up to that many sockets in one go
        before any reaches the guard: kept within the file descriptors the total cap leaves, so a
        flood never makes ``accept()`` fail for lack of them."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self._backlog
        return max(16, min(self._backlog, (soft - self.guard.max_connections) // 2))

    async def start(self) -> None:
        """As ``TCPSite.start``, with the protocol factory wrapped."""
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.guard.wrap(server), self._host, self._port, ssl=self._ssl_context,
            backlog=self.accept_burst(), reuse_address=self._reuse_address, reuse_port=self._reuse_port)


async def read_body(request: web.Request, guard: ConnectionGuard, max_bytes: int) -> bytes:
    """The request body within the guard's ``body_timeout_s`` and ``max_bytes``.

    Raises ``web.HTTPRequestEntityTooLarge`` (413) past the size and ``web.HTTPRequestTimeout``
    (408, the connection then closed) past the deadline.
    """
    body = bytearray()
    try:
        async with asyncio.timeout(guard.body_timeout_s):
            while chunk := await request.content.read(64 * 1024):
                body += chunk
                if len(body) > max_bytes:
                    raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=len(body))
    except TimeoutError:
        guard.note("with a body not received in time", request.remote or "?")
        raise web.HTTPRequestTimeout(text=f"body not received within {guard.body_timeout_s:g} s",
                                     headers={"Connection": "close"}) from None
    return bytes(body)
