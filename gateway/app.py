"""The instrumented serving front: admission, unbuffered pass-through, timeouts, aborts, metrics.

One gateway per engine replica (ARCHITECTURE "The one-paragraph story"). The request body is
parsed once to validate it and read ``model``/``stream``, then forwarded as the original bytes
(no re-encoding). Streams are forwarded chunk by chunk as they arrive. Aborting an upstream
request means closing its connection, which is how vLLM learns the client left and frees the
sequence (seed 000 §5.4).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import time
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.admission import AdmissionController, AdmissionLimits, Outcome, Ticket
from gateway.logsink import RequestLog
from gateway.metrics import GatewayMetrics, ModelSeries, route_label
from gateway.settings import GatewaySettings
from gateway.waiting import AsyncAdmission

COMPLETION_ROUTES = ("/v1/chat/completions", "/v1/completions")
# RFC 9110 §7.6.1 hop-by-hop fields, plus those aiohttp recomputes for the forwarded body.
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
_USAGE_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_SSE_EVENT = b"data: {"
_WARMUP_MAX_DELAY_S = 5.0


class _RequestIds:
    """Request IDs without a syscall each: a random per-process prefix and a counter.

    ``uuid.uuid4()`` reads ``os.urandom`` per call, which measured ~120 µs under load here.
    """

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        """A new 32-hex-digit ID, unique within this process and very likely across processes."""
        return f"{self._prefix}{next(self._counter):016x}"


def _json_error(
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


def _output_tokens(data: bytes, events: int) -> int:
    """``usage.completion_tokens`` when the upstream sent it, else one token per SSE event."""
    found = _USAGE_TOKENS.findall(data)
    return int(found[-1]) if found else events


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


class _RequestContext:
    """What the four log points and the metrics need about one request."""

    __slots__ = ("arrived", "model", "request_id", "route", "ttft_s", "upstream_s")

    def __init__(self, request_id: str, route: str, arrived: float) -> None:
        self.request_id = request_id
        self.route = route
        self.arrived = arrived
        self.model = "other"
        self.ttft_s: float | None = None
        self.upstream_s: float | None = None


class Gateway:
    """State of one gateway process; ``build_app()`` returns the aiohttp application."""

    def __init__(self, settings: GatewaySettings, request_log: RequestLog | None = None) -> None:
        self.settings = settings
        self._log = request_log or RequestLog()
        self.upstream = settings.upstream.rstrip("/")
        limits = AdmissionLimits(settings.max_concurrency, settings.max_queue, settings.max_queue_wait_s)
        self.controller = AdmissionController(limits, clock=time.monotonic)
        self.admission = AsyncAdmission(self.controller)
        self.metrics = GatewayMetrics(settings.service, settings.node, settings.models, self.controller)
        self.ready = not settings.warmup
        self._ids = _RequestIds()
        self._session: aiohttp.ClientSession | None = None
        self._warmup_task: asyncio.Task[None] | None = None

    def build_app(self) -> web.Application:
        """Routes, plus start-up (connection pool, warm-up) and clean-up hooks."""
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        for route in COMPLETION_ROUTES:
            app.router.add_post(route, self._completion)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    @property
    def session(self) -> aiohttp.ClientSession:
        """The upstream connection pool (exists between start-up and clean-up)."""
        assert self._session is not None, "gateway not started"
        return self._session

    async def _on_startup(self, _app: web.Application) -> None:
        # Room for every admitted request plus warm-up and /v1/models; keep-alive reuses connections.
        connector = aiohttp.TCPConnector(limit=self.settings.max_concurrency + 8, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.first_byte_timeout_s),
        )
        if self.settings.warmup:
            self._warmup_task = asyncio.create_task(self._warmup())

    async def _on_cleanup(self, _app: web.Application) -> None:
        if self._warmup_task is not None:
            self._warmup_task.cancel()
        if self._session is not None:
            await self._session.close()

    async def _warmup(self) -> None:
        """Seed 000 §5.3: ready only once a real request went through the engine; retried with backoff."""
        delay_s = 0.1
        timeout = aiohttp.ClientTimeout(total=self.settings.first_byte_timeout_s)
        while True:
            try:
                async with self.session.get(f"{self.upstream}/v1/models", timeout=timeout) as resp:
                    listed = await resp.json() if resp.status == 200 else {}
                names = [m["id"] for m in listed.get("data", []) if isinstance(m, dict) and "id" in m]
                if not self.settings.models:
                    self.metrics.add_models(names)
                model = self.metrics.primary_model if self.metrics.models else (names or ["default"])[0]
                body = {"model": model, "messages": [{"role": "user", "content": "warm-up"}], "max_tokens": 1}
                async with self.session.post(
                    f"{self.upstream}/v1/chat/completions", json=body, timeout=timeout
                ) as resp:
                    await resp.read()
                    if resp.status == 200:
                        self.ready = True
                        logger.info("warm-up done", upstream=self.upstream, models=self.metrics.models)
                        return
                    logger.warning("warm-up refused", status=resp.status)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                logger.warning("warm-up failed", error=type(exc).__name__)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _WARMUP_MAX_DELAY_S)

    async def _live(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "live"})

    async def _ready(self, _request: web.Request) -> web.Response:
        if self.ready:
            return web.json_response({"status": "ready"})
        return web.json_response({"status": "warming up"}, status=503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _models(self, request: web.Request) -> web.Response:
        """Cheap and side-effect free: passed through without admission."""
        request_id = request.headers.get("X-Request-ID") or self._ids.next()
        try:
            async with self.session.get(
                f"{self.upstream}/v1/models",
                headers=self._upstream_headers(request, request_id),
                timeout=aiohttp.ClientTimeout(total=self.settings.first_byte_timeout_s),
            ) as up:
                body = await up.read()
                status = up.status
                headers = self._client_headers(up, request_id)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.series(self.metrics.primary_model).answered("/v1/models", 502, 0.0)
            return _json_error(
                502, "upstream_error", f"upstream unavailable: {type(exc).__name__}", request_id
            )
        self.metrics.series(self.metrics.primary_model).answered("/v1/models", status, 0.0)
        return web.Response(status=status, body=body, headers=headers)

    def _upstream_headers(self, request: web.Request, request_id: str) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["X-Request-ID"] = request_id
        return headers

    @staticmethod
    def _client_headers(upstream: aiohttp.ClientResponse, request_id: str) -> dict[str, str]:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["X-Request-ID"] = request_id
        return headers

    def _finish(self, ctx: _RequestContext, code: int) -> None:
        """Count the answer and write the "finished" log line (seed 000 §3.1, point 4)."""
        total_s = time.monotonic() - ctx.arrived
        self.metrics.series(ctx.model).answered(ctx.route, code, total_s)
        self._log(
            "request finished",
            request_id=ctx.request_id,
            status=code,
            total_ms=round(total_s * 1e3, 2),
            upstream_ms=None if ctx.upstream_s is None else round(ctx.upstream_s * 1e3, 2),
            ttft_ms=None if ctx.ttft_s is None else round(ctx.ttft_s * 1e3, 2),
        )

    def _refuse(
        self,
        ctx: _RequestContext,
        status: int,
        reason: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        self.metrics.series(ctx.model).rejected(reason)
        self._finish(ctx, status)
        return _json_error(status, reason, message, ctx.request_id, headers)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        ctx = _RequestContext(
            request.headers.get("X-Request-ID") or self._ids.next(),
            route_label(request.path),
            time.monotonic(),
        )
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._refuse(ctx, 413, "body_too_large", f"request body over {limit} bytes")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(ctx, 413, "body_too_large", f"request body over {limit} bytes")
        self._log("request received", request_id=ctx.request_id, route=ctx.route, body_bytes=len(body))
        try:
            payload: Any = json.loads(body)
        except ValueError as exc:
            return self._refuse(ctx, 400, "invalid_json", f"malformed JSON: {exc}")
        if not isinstance(payload, dict):
            return self._refuse(ctx, 400, "invalid_json", "the body must be a JSON object")
        ctx.model = self.metrics.model_label(payload.get("model"))

        decision = self.admission.offer()
        if decision.outcome is Outcome.REJECTED:
            assert decision.reason is not None
            return self._refuse(
                ctx,
                429,
                decision.reason.value,
                f"gateway {decision.reason.value.replace('_', ' ')}; retry later",
                {"Retry-After": str(decision.retry_after_s)},
            )
        ticket = decision.ticket
        assert ticket is not None
        # Logged for every admitted request (queue_length 0 = straight upstream) so that "enqueued but
        # never started" is visible in the logs alone (seed 000 §3.1).
        self._log("request enqueued", request_id=ctx.request_id, queue_length=decision.queue_position)
        if decision.outcome is Outcome.QUEUED:
            try:
                await self.admission.wait(ticket)
            except asyncio.CancelledError:
                self._finish(ctx, 499)
                raise
        series = self.metrics.series(ctx.model)
        series.queue_length_at_enqueue.observe(decision.queue_position)
        series.queue_wait.observe(ticket.wait_s())
        self._log("request started", request_id=ctx.request_id, wait_ms=round(ticket.wait_s() * 1e3, 2))
        return await self._forward(request, body, ctx, ticket)

    async def _forward(
        self, request: web.Request, body: bytes, ctx: _RequestContext, ticket: Ticket
    ) -> web.StreamResponse:
        series = self.metrics.series(ctx.model)
        started = time.monotonic()
        upstream: aiohttp.ClientResponse | None = None
        observe = True
        try:
            try:
                async with asyncio.timeout(self.settings.first_byte_timeout_s):
                    upstream = await self.session.post(
                        f"{self.upstream}{request.path}",
                        data=body,
                        headers=self._upstream_headers(request, ctx.request_id),
                    )
                    streaming = upstream.content_type == "text/event-stream"
                    data = await (upstream.content.readany() if streaming else upstream.read())
            except TimeoutError:
                self._abort(upstream, series, "first_byte_timeout")
                ctx.upstream_s = time.monotonic() - started
                self._finish(ctx, 504)
                return _json_error(
                    504,
                    "first_byte_timeout",
                    f"no response from the engine within {self.settings.first_byte_timeout_s} s",
                    ctx.request_id,
                )
            except aiohttp.ClientError as exc:
                self._abort(upstream, series, "upstream_error")
                ctx.upstream_s = time.monotonic() - started
                self._finish(ctx, 502)
                return _json_error(
                    502, "upstream_error", f"engine unavailable: {type(exc).__name__}", ctx.request_id
                )
            if streaming:
                # A non-streamed answer's "first token" is its whole generation, which grows with
                # output length: it is measured by request_duration, not by the TTFT SLO.
                ctx.ttft_s = time.monotonic() - ctx.arrived
                series.ttft.observe(ctx.ttft_s)
            if not streaming:
                ctx.upstream_s = time.monotonic() - started
                series.upstream_duration.observe(ctx.upstream_s)
                if upstream.status == 200:
                    series.output_tokens.inc(_output_tokens(data, 0))
                upstream.release()
                self._finish(ctx, upstream.status)
                return web.Response(
                    status=upstream.status, body=data, headers=self._client_headers(upstream, ctx.request_id)
                )
            return await self._stream(request, upstream, data, ctx, started)
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away: close the upstream connection so the engine stops generating.
            observe = False
            self._abort(upstream, series, "client_disconnect")
            ctx.upstream_s = time.monotonic() - started
            self._finish(ctx, 499)
            raise
        finally:
            self.admission.release(ticket, observe=observe)

    async def _stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        first: bytes,
        ctx: _RequestContext,
        started: float,
    ) -> web.StreamResponse:
        """Forward each chunk as soon as it arrives; an idle upstream gets an SSE error event and an abort."""
        series = self.metrics.series(ctx.model)
        inter_token = series.inter_token
        idle_s = self.settings.stream_idle_timeout_s
        response = web.StreamResponse(
            status=upstream.status, headers=self._client_headers(upstream, ctx.request_id)
        )
        await response.prepare(request)
        await response.write(first)
        events = first.count(_SSE_EVENT)
        usage = first if b'"completion_tokens"' in first else b""
        last = time.monotonic()
        code = upstream.status
        watchdog = _IdleWatchdog(idle_s, upstream.content)
        try:
            while True:
                watchdog.waiting_since = time.monotonic()
                try:
                    chunk = await upstream.content.readany()
                except _StreamIdleError:
                    self._abort(upstream, series, "stream_idle_timeout")
                    error = {
                        "error": {
                            "message": f"engine sent nothing for {idle_s} s",
                            "type": "stream_idle_timeout",
                            "code": 504,
                        }
                    }
                    await response.write(f"data: {json.dumps(error)}\n\n".encode())
                    code = 504
                    break
                watchdog.waiting_since = None
                if not chunk:
                    break
                await response.write(chunk)
                now = time.monotonic()
                inter_token.observe(now - last)
                last = now
                events += chunk.count(_SSE_EVENT)
                if b'"completion_tokens"' in chunk:
                    usage = chunk
        finally:
            watchdog.cancel()
        ctx.upstream_s = time.monotonic() - started
        series.upstream_duration.observe(ctx.upstream_s)
        if code == 200:
            series.output_tokens.inc(_output_tokens(usage, events))
            upstream.release()
        await response.write_eof()
        self._finish(ctx, code)
        return response

    def _abort(self, upstream: aiohttp.ClientResponse | None, series: ModelSeries, reason: str) -> None:
        """Close the upstream connection (never back to the pool) and count the abort."""
        if upstream is not None:
            upstream.close()
        if upstream is not None or reason != "upstream_error":
            series.aborted(reason)
