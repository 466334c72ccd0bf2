"""The upstream half of a request: pass-through, first-byte and stream-idle timeouts, aborts.

The request body is forwarded as the original bytes (no re-encoding); a streamed answer is written
to the client chunk by chunk as the upstream's bytes arrive, never re-parsed: TTFT needs only the
first chunk, and what is counted about the answer (tokens, finish reason, empty output, an error
event) comes from C-level scans of each chunk (``gateway.answer``). Aborting an upstream request
means closing its connection, which is how vLLM learns the client left and frees the sequence
instead of generating for nobody.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web
from yarl import URL

from gateway import answer
from gateway.metrics import ModelSeries
from gateway.settings import GatewaySettings
from gateway.tracecontext import TraceContext

# RFC 9110 section 7.6.1 hop-by-hop fields, plus those aiohttp recomputes for the forwarded body.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# Replaced by the request's own trace context (an invalid traceparent invalidates tracestate too).
_TRACE_FIELDS = frozenset({"traceparent", "tracestate"})


def json_error(
    status: int, reason: str, message: str, request_id: str, headers: dict[str, str] | None = None
) -> web.Response:
    """An OpenAI-style error body naming the reason."""
    body = json.dumps({"error": {"message": message, "type": reason, "code": status}})
    return web.Response(
        status=status,
        text=body,
        content_type="application/json",
        headers={"X-Request-ID": request_id, **(headers or {})},
    )


def forwarded_headers(
    headers: Mapping[str, str], request_id: str, trace: TraceContext | None = None
) -> dict[str, str]:
    """End-to-end header fields of one hop, with the request ID (either direction).

    With ``trace`` (towards the engine) the ``traceparent`` is the request's; the client's
    ``tracestate`` goes along only with the client's own valid ``traceparent``.
    """
    if trace is None:
        forwarded = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
    else:
        drop = {"traceparent"} if trace.received else _TRACE_FIELDS
        forwarded = {
            k: v for k, v in headers.items() if (low := k.lower()) not in _HOP_BY_HOP and low not in drop
        }
        forwarded["traceparent"] = trace.traceparent
    forwarded["X-Request-ID"] = request_id
    return forwarded


def _no_first_byte_hook() -> None:
    """A request not admitted through the queue has no ticket to tell."""


class RequestContext:
    """What the four log points and the metrics need about one request."""

    __slots__ = ("arrived", "finish_reason", "first_byte", "max_tokens", "model", "model_name",
                 "output_tokens", "prompt_tokens", "request_id", "route", "trace", "ttft_s", "upstream_s")

    def __init__(self, request_id: str, route: str, arrived: float, trace: TraceContext) -> None:
        self.request_id = request_id
        self.route = route
        self.arrived = arrived
        self.trace = trace
        self.model = "other"  # the bounded label value
        self.model_name: str | None = None  # as the client asked for it
        self.max_tokens: int | None = None
        self.ttft_s: float | None = None
        self.upstream_s: float | None = None
        self.prompt_tokens: int | None = None
        self.output_tokens: int | None = None
        self.finish_reason: str | None = None
        # Called when the engine's first byte arrives (admission tracks the oldest still waiting).
        self.first_byte: Callable[[], None] = _no_first_byte_hook


Finish = Callable[[RequestContext, int], None]


class _StreamIdleError(Exception):
    """The upstream sent nothing for the stream-idle timeout."""


class _IdleWatchdog:
    """Stream-idle timeout with one timer per stream instead of one per chunk.

    A per-chunk ``asyncio.timeout`` cost ~5 µs × every chunk on the hot path; here a chunk only
    stores a timestamp and the timer re-arms itself lazily. It fires only while the gateway is
    actually waiting on the upstream (``waiting_since`` set), so a slow *client* is never mistaken
    for an idle engine.
    """

    __slots__ = ("_content", "_handle", "_idle_s", "_loop", "waiting_since")

    def __init__(self, idle_s: float, content: aiohttp.StreamReader) -> None:
        self._idle_s = idle_s
        self._content = content
        self._loop = asyncio.get_running_loop()
        self.waiting_since: float | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(idle_s, self._check)

    def _check(self) -> None:
        now = time.monotonic()
        since = self.waiting_since
        if since is not None and now - since >= self._idle_s:
            self._handle = None
            self._content.set_exception(_StreamIdleError())
            return
        delay = self._idle_s if since is None else self._idle_s - (now - since)
        self._handle = self._loop.call_later(delay, self._check)

    def cancel(self) -> None:
        """Stop the timer (the stream ended)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Forwarder:
    """Sends admitted requests upstream over one keep-alive pool and answers the client.

    ``finish(ctx, status)`` is called exactly once per forwarded request, when its answer is
    decided (metrics and the "finished" log line live with the caller).
    """

    def __init__(self, settings: GatewaySettings, finish: Finish) -> None:
        self.settings = settings
        self.upstream = settings.upstream.rstrip("/")
        self._finish = finish
        self._urls: dict[str, URL] = {}
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The upstream connection pool (exists between ``start()`` and ``close()``)."""
        assert self._session is not None, "gateway not started"
        return self._session

    def start(self) -> None:
        """Open the pool (inside the running event loop)."""
        # Room for every admitted request plus warm-up and /v1/models; keep-alive reuses connections.
        connector = aiohttp.TCPConnector(limit=self.settings.max_concurrency + 8, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            connector=connector,
            # One pool serves every client: an upstream Set-Cookie must never ride along with
            # another client's requests (and skipping the jar saves its per-request filtering).
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.first_byte_timeout_s),
        )

    async def close(self) -> None:
        """Close the pool."""
        if self._session is not None:
            await self._session.close()

    def url(self, path: str) -> URL:
        """The upstream URL of ``path``, parsed once per path (yarl parsing costs µs per call)."""
        found = self._urls.get(path)
        if found is None:
            found = self._urls[path] = URL(f"{self.upstream}{path}")
        return found

    async def forward(
        self, request: web.Request, body: bytes, ctx: RequestContext, series: ModelSeries
    ) -> web.StreamResponse:
        """Send ``body`` upstream and answer the client: passed through, 502, 504 or 499 (raised)."""
        started = time.monotonic()
        upstream: aiohttp.ClientResponse | None = None
        try:
            try:
                async with asyncio.timeout(self.settings.first_byte_timeout_s):
                    upstream = await self.session.post(
                        self.url(request.path),
                        data=body,
                        headers=forwarded_headers(request.headers, ctx.request_id, ctx.trace),
                    )
                    streaming = upstream.content_type == "text/event-stream"
                    data = await (upstream.content.readany() if streaming else upstream.read())
            except TimeoutError:
                self._abort(upstream, series, "first_byte_timeout")
                ctx.upstream_s = time.monotonic() - started
                self._finish(ctx, 504)
                return json_error(
                    504,
                    "first_byte_timeout",
                    f"no response from the engine within {self.settings.first_byte_timeout_s} s",
                    ctx.request_id,
                )
            except aiohttp.ClientError as exc:
                self._abort(upstream, series, "upstream_error")
                ctx.upstream_s = time.monotonic() - started
                self._finish(ctx, 502)
                return json_error(
                    502, "upstream_error", f"engine unavailable: {type(exc).__name__}", ctx.request_id
                )
            ctx.first_byte()
            if streaming:
                # A non-streamed answer's "first token" is its whole generation, which grows with
                # output length: it is measured by request_duration, not by the TTFT SLO.
                ctx.ttft_s = time.monotonic() - ctx.arrived
                series.ttft.observe(ctx.ttft_s)
                return await self._stream(request, upstream, data, ctx, series, started)
            ctx.upstream_s = time.monotonic() - started
            series.upstream_duration.observe(ctx.upstream_s)
            if upstream.status == 200:
                ctx.output_tokens = answer.output_tokens(data, 0)
                ctx.prompt_tokens = answer.prompt_tokens(data)
                series.output_tokens.inc(ctx.output_tokens)
                empty = not answer.has_text(data)
                ctx.finish_reason = series.completed(answer.finish_reason(data), empty=empty)
            upstream.release()
            self._finish(ctx, upstream.status)
            return web.Response(
                status=upstream.status,
                body=data,
                headers=forwarded_headers(upstream.headers, ctx.request_id),
            )
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away: close the upstream connection so the engine stops generating.
            self._abort(upstream, series, "client_disconnect")
            ctx.upstream_s = time.monotonic() - started
            self._finish(ctx, 499)
            raise

    async def _stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        first: bytes,
        ctx: RequestContext,
        series: ModelSeries,
        started: float,
    ) -> web.StreamResponse:
        """Forward each chunk as soon as it arrives; an idle upstream gets an SSE error event and an abort."""
        inter_token = series.inter_token
        content = upstream.content
        idle_s = self.settings.stream_idle_timeout_s
        response = web.StreamResponse(
            status=upstream.status, headers=forwarded_headers(upstream.headers, ctx.request_id)
        )
        await response.prepare(request)
        await response.write(first)
        events = first.count(answer.SSE_EVENT)
        usage = first if answer.USAGE_KEY in first else b""
        finish = answer.finish_reason(first)
        texted = answer.has_text(first)
        engine_error = answer.has_error_event(first)
        # Whether the client has been sent the stream's closing [DONE] (``tail``: a marker split
        # across two reads is still found).
        done, tail = answer.DONE_EVENT in first, first[-len(answer.DONE_EVENT):]
        hung_up = False
        last = time.monotonic()
        code = upstream.status
        watchdog = _IdleWatchdog(idle_s, content)
        try:
            while True:
                watchdog.waiting_since = last
                try:
                    chunk = await content.readany()
                except asyncio.CancelledError:
                    # The client hung up. After its [DONE] it has the whole answer: clients close
                    # then (the OpenAI Python SDK does), before the engine's body ends.
                    if not done:
                        raise
                    hung_up = True
                    break
                except (_StreamIdleError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                    # Headers are gone already: the client learns of it from an SSE error event.
                    idle = isinstance(exc, _StreamIdleError)
                    reason, code = ("stream_idle_timeout", 504) if idle else ("upstream_error", 502)
                    self._abort(upstream, series, reason)
                    series.stream_failed(reason)
                    message = f"engine sent nothing for {idle_s} s" if idle else f"engine stream broke: {exc}"
                    error = {"error": {"message": message, "type": reason, "code": code}}
                    await response.write(f"data: {json.dumps(error)}\n\n".encode())
                    break
                watchdog.waiting_since = None
                if not chunk:
                    break
                await response.write(chunk)
                # Taken after the client write: the idle timer restarts from here, so a slow
                # client is never counted as an idle engine.
                now = time.monotonic()
                inter_token.observe(now - last)
                last = now
                events += chunk.count(answer.SSE_EVENT)
                if answer.USAGE_KEY in chunk:
                    usage = chunk
                finish = answer.finish_reason(chunk) or finish
                texted = texted or answer.has_text(chunk)
                engine_error = engine_error or answer.has_error_event(chunk)
                done = done or answer.DONE_EVENT in tail + chunk
                tail = chunk[-len(answer.DONE_EVENT):]
        finally:
            watchdog.cancel()
        ctx.upstream_s = time.monotonic() - started
        series.upstream_duration.observe(ctx.upstream_s)
        if code == 200:
            ctx.output_tokens = answer.output_tokens(usage, events)
            ctx.prompt_tokens = answer.prompt_tokens(usage)
            series.output_tokens.inc(ctx.output_tokens)
            upstream.release()
            if engine_error:
                series.stream_failed("engine_error")
            else:
                ctx.finish_reason = series.completed(finish, empty=not texted)
        if not hung_up:
            try:
                await response.write_eof()
            except ConnectionResetError:
                if not done:
                    raise
        self._finish(ctx, code)
        return response

    @staticmethod
    def _abort(upstream: aiohttp.ClientResponse | None, series: ModelSeries, reason: str) -> None:
        """Close the upstream connection (never back to the pool) and count the abort."""
        if upstream is not None:
            upstream.close()
        if upstream is not None or reason != "upstream_error":
            series.aborted(reason)
