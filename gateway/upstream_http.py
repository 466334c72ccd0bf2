"""A minimal HTTP/1.1 client for the hot path: one keep-alive pool to one engine, bytes in, bytes out.

aiohttp's client was half of the gateway's CPU per request (cProfile under the bench load:
``ClientSession._request`` building a ``ClientRequest``, header multidicts, payload objects and a
``StreamReader`` per response). The gateway needs much less: send the client's body as received,
read a status line and headers, then hand the body on as it arrives, de-chunked. Warm-up and
``/v1/models`` keep using aiohttp (rare, not latency-bound).

Only what an OpenAI-compatible engine sends is supported: ``Content-Length`` bodies, chunked
bodies, or bodies up to EOF; no 1xx, no trailers, no upgrades. Errors raise ``UpstreamError``
(a connection failed or the upstream broke the protocol), mapped to 502 by the caller.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from typing import cast

from yarl import URL

# Pause reading from the engine while this much body is waiting for a slow client.
_HIGH_WATER_BYTES = 1 << 16
_MAX_HEAD_BYTES = 1 << 16
_HEAD_END = b"\r\n\r\n"


class UpstreamError(Exception):
    """The upstream connection failed or spoke broken HTTP."""


class UpstreamResponse:
    """Status, headers and the body as it arrives, of one upstream response."""

    __slots__ = ("_conn", "_open", "headers", "status")

    def __init__(self, conn: _Connection, status: int, headers: list[tuple[str, str]]) -> None:
        self._conn = conn
        self._open = True
        self.status = status
        self.headers = headers

    @property
    def content_type(self) -> str:
        """The media type, lower case, without parameters."""
        for name, value in self.headers:
            if name.lower() == "content-type":
                return value.split(";", 1)[0].strip().lower()
        return ""

    async def readany(self) -> bytes:
        """Whatever body bytes arrived (waiting for some); b"" at the end of the body."""
        return await self._conn.read_body()

    async def read(self) -> bytes:
        """The whole body."""
        parts = []
        while chunk := await self._conn.read_body():
            parts.append(chunk)
        return b"".join(parts)

    def set_exception(self, exc: BaseException) -> None:
        """Make the pending (or next) ``readany()`` raise ``exc`` (the stream-idle timer)."""
        self._conn.fail(exc)

    def release(self) -> None:
        """Return the connection to the pool if the body was read to its end, else close it.

        Every response is released or closed exactly once; later calls do nothing.
        """
        if self._open:
            self._open = False
            self._conn.release()

    def close(self) -> None:
        """Drop the connection: the engine sees the client go away and stops generating."""
        if self._open:
            self._open = False
            self._conn.close()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._body: deque[bytes] = deque()
        self._body_bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._head: tuple[int, list[tuple[str, str]]] | None = None
        self._in_head = False
        self._remaining = 0  # Content-Length bytes, or of the current chunk
        self._mode = ""  # "length", "chunked", "eof" or "done"
        self._chunk_state = "size"  # "size", "data", "crlf" or "end" while chunked
        self._keep_alive = False
        self._paused = False
        self.closed = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, though they implement it.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._mode == "eof":
            self._mode = "done"
        elif self._in_head or self._mode in ("length", "chunked"):
            self._error = UpstreamError(f"upstream closed the connection: {exc or 'EOF'}")
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._buffer += data
            end = self._buffer.find(_HEAD_END)
            if end < 0:
                if len(self._buffer) > _MAX_HEAD_BYTES:
                    self._protocol_error("response head too large")
                return
            head = bytes(self._buffer[:end])
            rest = bytes(self._buffer[end + 4 :])
            self._buffer.clear()
            try:
                self._parse_head(head)
            except (ValueError, UnicodeDecodeError) as exc:
                self._protocol_error(f"bad response head: {exc}")
                return
            if self._in_head:  # an informational 1xx head: the real one follows
                if rest:
                    self.data_received(rest)
                return
            self._wake()
            if rest:
                self._body_data(rest)
        elif self._mode in ("length", "chunked", "eof"):
            self._body_data(data)
        # Bytes after the end of a response (none from a well-behaved engine) are dropped.

    # -- parsing --------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, status, *_reason = lines[0].split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not HTTP/1.x: {lines[0]!r}")
        if 100 <= int(status) < 200:
            return
        headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked = False
        keep_alive = version == "HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"header line without a colon: {line!r}")
            value = value.strip()
            headers.append((name, value))
            lower = name.lower()
            if lower == "content-length":
                length = int(value)
            elif lower == "transfer-encoding":
                chunked = value.lower().endswith("chunked")
            elif lower == "connection":
                keep_alive = "close" not in value.lower() and (keep_alive or "keep-alive" in value.lower())
        self._in_head = False
        self._head = (int(status), headers)
        if chunked:
            self._mode, self._chunk_state = "chunked", "size"
        elif length is not None:
            self._mode, self._remaining = "length", length
            if length == 0:
                self._mode = "done"
        else:
            self._mode, keep_alive = "eof", False
        self._keep_alive = keep_alive

    def _body_data(self, data: bytes) -> None:
        if self._mode == "length":
            take = data[: self._remaining]
            self._remaining -= len(take)
            self._push(take)
            if self._remaining == 0:
                self._mode = "done"
        elif self._mode == "eof":
            self._push(data)
        else:
            self._dechunk(data)
        self._wake()

    def _dechunk(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        while self._mode == "chunked":
            if self._chunk_state == "size":
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                try:
                    size = int(bytes(buf[pos:end]).split(b";", 1)[0], 16)
                except ValueError:
                    self._protocol_error("bad chunk size")
                    return
                pos = end + 2
                self._remaining, self._chunk_state = size, "data" if size else "end"
            elif self._chunk_state == "data":
                take = bytes(buf[pos : pos + self._remaining])
                if not take:
                    break
                pos += len(take)
                self._remaining -= len(take)
                self._push(take)
                if self._remaining == 0:
                    self._chunk_state = "crlf"
            elif self._chunk_state == "crlf":
                if len(buf) - pos < 2:
                    break
                pos += 2
                self._chunk_state = "size"
            else:  # after the last chunk: trailer fields (skipped), then an empty line
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                if end == pos:
                    self._mode = "done"
                pos = end + 2
        del buf[:pos]

    def _protocol_error(self, message: str) -> None:
        self._error = UpstreamError(message)
        self.close()
        self._wake()

    def _push(self, data: bytes) -> None:
        if data:
            self._body.append(data)
            self._body_bytes += len(data)
            if self._body_bytes > _HIGH_WATER_BYTES and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # -- used by the pool and the response ------------------------------------------------
    async def request(self, head: bytes, body: bytes) -> UpstreamResponse:
        """Send one request and wait for the response head."""
        assert self._transport is not None
        self._in_head, self._mode, self._head, self._error = True, "", None, None
        self._buffer.clear()
        self._transport.write(head + body if len(body) < 16384 else head)
        if len(body) >= 16384:
            self._transport.write(body)
        while self._head is None:
            if self._error is not None:
                raise self._error
            if self.closed:
                raise UpstreamError("upstream closed the connection before answering")
            await self._wait()
        status, headers = self._head
        return UpstreamResponse(self, status, headers)

    async def read_body(self) -> bytes:
        """The next buffered body bytes, b"" at the end."""
        while not self._body:
            if self._error is not None:
                raise self._error
            if self._mode == "done":
                return b""
            await self._wait()
        data = b"".join(self._body) if len(self._body) > 1 else self._body[0]
        self._body.clear()
        self._body_bytes = 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return data

    def fail(self, exc: BaseException) -> None:
        """Fail the pending and next reads with ``exc``."""
        self._error = exc
        self._wake()

    def release(self) -> None:
        """Back to the pool when this response ended cleanly and the engine keeps the connection."""
        if self._mode == "done" and not self._body and self._keep_alive and not self.closed:
            self._mode = ""
            self._pool.put_back(self)
        else:
            self.close()

    def close(self) -> None:
        """Close the connection (never reused)."""
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class UpstreamPool:
    """Keep-alive connections to one upstream ``http(s)://host:port``; admission bounds their number."""

    def __init__(self, base_url: str, connect_timeout_s: float) -> None:
        url = URL(base_url)
        if url.scheme not in ("http", "https") or url.host is None:
            raise ValueError(f"upstream must be an http(s) URL, not {base_url!r}")
        self._host = url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if url.scheme == "https" else None
        self._host_header = url.raw_host if url.is_default_port() else f"{url.raw_host}:{self._port}"
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        """POST ``body`` to ``path`` and return once the response head arrived."""
        lines = [f"POST {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"]
        lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        lines.append(f"Content-Length: {len(body)}\r\n\r\n")
        # aiohttp decoded the client's header bytes as UTF-8 with surrogateescape: this restores them.
        head = "".join(lines).encode("utf-8", "surrogateescape")
        conn = None
        while self._idle and conn is None:
            # One the engine closed while idle (its keep-alive timeout) has seen connection_lost.
            conn = self._idle.pop()
            if conn.closed:
                conn = None
        if conn is None:
            conn = await self._connect()
        try:
            return await conn.request(head, body)
        except BaseException:
            # Cancelled (first-byte timeout, client gone) or failed before the head: closing is
            # how the engine learns to stop; the connection is in no state to be reused anyway.
            conn.close()
            raise

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _transport, conn = await loop.create_connection(
                    lambda: _Connection(self), self._host, self._port, ssl=self._ssl
                )
        except OSError as exc:
            raise UpstreamError(f"cannot connect to the upstream: {exc}") from exc
        return conn

    def put_back(self, conn: _Connection) -> None:
        """An idle kept-alive connection (called by ``_Connection.release``)."""
        self._idle.append(conn)

    def close(self) -> None:
        """Close every idle connection."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
