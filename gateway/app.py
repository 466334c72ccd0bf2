"""The instrumented serving front: routes, admission, the four log points and the answer metrics.

One gateway per engine replica, as a sidecar in front of it. The request body is
parsed once to validate it and read ``model``; the upstream half of a request (pass-through,
timeouts, aborts) is ``gateway.forward``.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.admission import AdmissionController, AdmissionLimits, Outcome
from gateway.forward import Forwarder, RequestContext, forwarded_headers, json_error
from gateway.logsink import RequestLog
from gateway.metrics import GatewayMetrics, route_label
from gateway.retries import RetryTracker, retry_key
from gateway.settings import GatewaySettings
from gateway.tracecontext import trace_of
from gateway.waiting import AsyncAdmission
from oximeter.guard import ConnectionGuard
from oximeter.inputs import InputValueError, parse_json

COMPLETION_ROUTES = ("/v1/chat/completions", "/v1/completions")
# A client-chosen model name is logged as sent, cut to this length.
_MODEL_NAME_CHARS = 200
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


def _texts(value: Any) -> list[str]:
    """The text in a prompt or a message content: a string, or a list of strings or text parts."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    parts = [part.get("text") if isinstance(part, dict) else part for part in value]
    return [part for part in parts if isinstance(part, str)]


def _max_tokens(payload: dict[str, Any]) -> int | None:
    """The output-token cap the client asked for, if any."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def request_limits_problem(payload: dict[str, Any], settings: GatewaySettings) -> str | None:
    """Why ``payload`` exceeds the configured ceilings (or ``None``): output tokens, prompt size."""
    ceiling = settings.max_tokens_limit
    for key in ("max_tokens", "max_completion_tokens"):
        value = payload.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > ceiling:
            return f"{key} {value} is over this gateway's limit of {ceiling}"
    messages = payload.get("messages")
    texts = _texts(payload.get("prompt")) + [
        text for m in (messages if isinstance(messages, list) else []) if isinstance(m, dict)
        for text in _texts(m.get("content"))]
    size = sum(len(text) for text in texts)
    if size > settings.max_prompt_chars:
        return f"a prompt of {size} characters is over this gateway's limit of {settings.max_prompt_chars}"
    return None


class Gateway:
    """State of one gateway process; ``build_app()`` returns the aiohttp application."""

    def __init__(self, settings: GatewaySettings, request_log: RequestLog | None = None) -> None:
        self.settings = settings
        self._log = request_log or RequestLog()
        limits = AdmissionLimits(settings.max_concurrency, settings.max_queue, settings.max_queue_wait_s)
        self.controller = AdmissionController(limits, clock=time.monotonic)
        self.admission = AsyncAdmission(self.controller)
        self.metrics = GatewayMetrics(settings.service, settings.node, settings.models, self.controller)
        self.ready = not settings.warmup
        self._ids = _RequestIds()
        self.retries = RetryTracker(settings.retry_window_s)
        self.forwarder = Forwarder(settings, self._finish)
        self.upstream = self.forwarder.upstream
        self._warmup_task: asyncio.Task[None] | None = None
        self.guard = ConnectionGuard(settings.header_timeout_s, settings.idle_timeout_s,
                                     settings.max_connections_per_client,
                                     body_timeout_s=settings.body_timeout_s, name="gateway")

    def build_app(self) -> web.Application:
        """Routes, plus start-up (connection pool, warm-up) and clean-up hooks."""
        app = web.Application(client_max_size=self.settings.max_body_bytes,
                               middlewares=[self.guard.middleware])
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
        return self.forwarder.session

    async def _on_startup(self, _app: web.Application) -> None:
        self.forwarder.start()
        if self.settings.warmup:
            self._warmup_task = asyncio.create_task(self._warmup())

    async def _on_cleanup(self, _app: web.Application) -> None:
        if self._warmup_task is not None:
            self._warmup_task.cancel()
        await self.forwarder.close()

    async def _warmup(self) -> None:
        """Ready only once a real request went through the engine, not just its port; retried with backoff."""
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
        trace = trace_of(request.headers.get("traceparent"))
        try:
            async with self.session.get(
                f"{self.upstream}/v1/models",
                headers=forwarded_headers(request.headers, request_id, trace),
                timeout=aiohttp.ClientTimeout(total=self.settings.first_byte_timeout_s),
            ) as up:
                body = await up.read()
                status = up.status
                headers = forwarded_headers(up.headers, request_id)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.metrics.series(self.metrics.primary_model).answered("/v1/models", 502, 0.0)
            return json_error(
                502, "upstream_error", f"upstream unavailable: {type(exc).__name__}", request_id
            )
        self.metrics.series(self.metrics.primary_model).answered("/v1/models", status, 0.0)
        return web.Response(status=status, body=body, headers=headers)

    def _finish(self, ctx: RequestContext, code: int) -> None:
        """Count the answer and write the "finished" log line, the last of the four per request.

        The line says what was asked (model, max tokens), what came back (tokens, finish reason)
        and where it went (the engine's address), under the request's trace id.
        """
        total_s = time.monotonic() - ctx.arrived
        self.metrics.series(ctx.model).answered(ctx.route, code, total_s)
        self._log(
            "request finished",
            request_id=ctx.request_id,
            trace_id=ctx.trace.trace_id,
            status=code,
            model=ctx.model_name,
            upstream=self.upstream,
            prompt_tokens=ctx.prompt_tokens,
            max_tokens=ctx.max_tokens,
            output_tokens=ctx.output_tokens,
            finish_reason=ctx.finish_reason,
            total_ms=round(total_s * 1e3, 2),
            upstream_ms=None if ctx.upstream_s is None else round(ctx.upstream_s * 1e3, 2),
            ttft_ms=None if ctx.ttft_s is None else round(ctx.ttft_s * 1e3, 2),
        )

    def _refuse(
        self,
        ctx: RequestContext,
        status: int,
        reason: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        self.metrics.series(ctx.model).rejected(reason)
        self._finish(ctx, status)
        return json_error(status, reason, message, ctx.request_id, headers)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        ctx = RequestContext(
            request.headers.get("X-Request-ID") or self._ids.next(),
            route_label(request.path),
            time.monotonic(),
            trace_of(request.headers.get("traceparent")),
        )
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._refuse(ctx, 413, "body_too_large", f"request body over {limit} bytes")
        if request.content_type != "application/json":
            return self._refuse(ctx, 415, "unsupported_media_type",
                                f"Content-Type must be application/json, got {request.content_type!r}")
        try:
            body = await asyncio.wait_for(request.read(), self.settings.body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(ctx, 413, "body_too_large", f"request body over {limit} bytes")
        except TimeoutError:
            response = self._refuse(ctx, 408, "body_timeout",
                                    f"request body not received within {self.settings.body_timeout_s:g} s")
            response.force_close()
            return response
        self._log("request received", request_id=ctx.request_id, trace_id=ctx.trace.trace_id,
                  route=ctx.route, body_bytes=len(body))
        try:
            payload: Any = parse_json(body)
        except InputValueError as exc:
            return self._refuse(ctx, 400, "invalid_json", str(exc))
        if not isinstance(payload, dict):
            return self._refuse(ctx, 400, "invalid_json", "the body must be a JSON object")
        model = payload.get("model")
        ctx.model = self.metrics.model_label(model)
        # Before admission: a retry refused with 429 is still a retry (and storms follow 429s).
        if self.retries.seen(retry_key(request.headers), time.monotonic()):
            self.metrics.retried.labels(*self.metrics.base_labels(ctx.model), ctx.route).inc()
        ctx.model_name = model[:_MODEL_NAME_CHARS] if isinstance(model, str) else None
        ctx.max_tokens = _max_tokens(payload)
        if (problem := request_limits_problem(payload, self.settings)) is not None:
            return self._refuse(ctx, 400, "limit_exceeded", problem)

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
        # never started" is visible in the logs alone.
        self._log("request enqueued", request_id=ctx.request_id, queue_length=decision.queue_position)
        if decision.outcome is Outcome.QUEUED:
            try:
                await self.admission.wait(ticket)
            except asyncio.CancelledError:
                # A wait that ends unserved is a wait too: a stuck queue would otherwise observe none.
                self.metrics.series(ctx.model).queue_wait.observe(ticket.wait_s())
                self._finish(ctx, 499)
                raise
        ctx.first_byte = functools.partial(self.controller.first_byte, ticket)
        series = self.metrics.series(ctx.model)
        series.queue_length_at_enqueue.observe(decision.queue_position)
        series.queue_wait.observe(ticket.wait_s())
        self._log("request started", request_id=ctx.request_id, wait_ms=round(ticket.wait_s() * 1e3, 2))
        observe = True
        try:
            return await self.forwarder.forward(request, body, ctx, series)
        except (asyncio.CancelledError, ConnectionResetError):
            observe = False  # a cut-short request would skew the service-time estimate
            raise
        finally:
            self.admission.release(ticket, observe=observe)
