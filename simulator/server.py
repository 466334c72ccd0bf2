"""``oximeter sim serve``: the whole simulated fleet in one aiohttp process on one clock.

Node i's engine listens on ``port + i - 1`` (with port 0, each engine on a port the kernel picks,
written to ``--port-file``); every port also serves the admin and fleet API
(``simulator/admin.py``) over the same shared state. One asyncio task per node steps its
engine and wakes the request handlers whose sequences progressed — no per-request loops, so
the server stays cheap when a benchmark drives it hard.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from loguru import logger
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from pydantic import SecretStr

from oximeter.inputs import InputValueError, parse_json
from oximeter.ports import write_port_file
from simulator import admin
from simulator.cadvisor import CadvisorCollector
from simulator.dependency import DependencyCollector
from simulator.engine import EngineModel, Seq, SeqState
from simulator.exposition import EngineCollector
from simulator.fleet import Fleet, Node
from simulator.kube_state import KubeStateCollector
from simulator.openai_api import (
    GenRequest,
    RequestError,
    chunk,
    error_body,
    full_response,
    models_list,
    parse_request,
    response_id,
    token_text,
    usage_chunk,
)

# How often GPUs, restarts and stalled engines are re-evaluated; telemetry is scraped at 15 s.
TICK_S = 0.5


@dataclass
class NodeRuntime:
    """The live side of one node: its registry, runner wake-up and per-request events."""

    node: Node
    registry: CollectorRegistry
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: dict[int, asyncio.Event] = field(default_factory=dict)
    last_busy_s: float = 0.0


@dataclass
class SimServer:
    """Shared state of the serving process."""

    fleet: Fleet
    host: str
    port: int
    admin_token: SecretStr | None
    default_output_tokens: int = 32
    max_model_len: int = 8192
    wall_origin_s: float = 0.0
    runtimes: dict[str, NodeRuntime] = field(default_factory=dict)
    holds: dict[str, asyncio.Event] = field(default_factory=dict)
    bound: dict[str, int] = field(default_factory=dict)  # node -> the port it listens on

    def now(self) -> float:
        """Simulation time."""
        return self.fleet.clock.now()

    def port_of(self, node: str) -> int:
        """The engine port of ``node``."""
        if node in self.bound:
            return self.bound[node]
        return self.port + list(self.fleet.nodes).index(node)

    def hold(self, key: str) -> asyncio.Event:
        """The release event for a test hold (created by whichever side comes first)."""
        return self.holds.setdefault(key, asyncio.Event())

    def wake_all(self) -> None:
        """Faults changed: let every engine re-read its conditions now."""
        for rt in self.runtimes.values():
            rt.wake.set()

    def notify(self, seqs: list[Seq], rt: NodeRuntime) -> None:
        """Wake the handlers of sequences that progressed or ended."""
        for seq in seqs:
            event = rt.waiters.get(seq.id)
            if event is not None:
                event.set()

    async def run_node(self, rt: NodeRuntime) -> None:
        """Step one engine forever: sleep until its iteration ends or new work arrives."""
        engine = rt.node.engine
        while True:
            self.notify(engine.advance(self.now()), rt)
            wake_at = engine.next_wake
            if wake_at is not None:
                timeout: float | None = max(0.0, wake_at - self.now())
            elif engine.waiting or engine.running:
                timeout = TICK_S / 5  # stalled or out of KV: re-check conditions soon
            else:
                timeout = None
            rt.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rt.wake.wait(), timeout)

    async def tick(self) -> None:
        """Fleet housekeeping: engine restarts and GPU state from each engine's busy time."""
        last = self.now()
        while True:
            await asyncio.sleep(TICK_S)
            now = self.now()
            dt = max(1e-9, now - last)
            last = now
            dropped = self.fleet.apply_restarts(now)
            for rt in self.runtimes.values():
                self.notify([s for s in dropped if s.id in rt.waiters], rt)
                busy = rt.node.engine.work_s
                util = (busy - rt.last_busy_s) / dt
                rt.last_busy_s = busy
                self.fleet.step_gpus(rt.node.name, now, util, self.wall_origin_s)
                rt.wake.set()


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _wait_progress(event: asyncio.Event) -> None:
    await event.wait()
    event.clear()


def engine_app(server: SimServer, rt: NodeRuntime) -> web.Application:
    """The routes of one node's engine port (plus the shared admin/fleet routes)."""
    engine: EngineModel = rt.node.engine
    fleet = server.fleet
    name = rt.node.name

    async def health(_request: web.Request) -> web.Response:
        if server.now() < rt.node.down_until:
            return _json({"status": "restarting", "simulation": True}, 503)
        return web.Response(text="")

    async def models(_request: web.Request) -> web.Response:
        return _json(models_list(fleet.model_name, server.max_model_len))

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(rt.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # The whole fleet as kube-state-metrics shows a cluster (the same on every port: scrape one).
    kube_state = CollectorRegistry(auto_describe=False)
    kube_state.register(KubeStateCollector(fleet, server.now))

    async def kube_state_metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(kube_state), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # The node's kubelet cAdvisor endpoint: its engine container's memory.
    cadvisor = CollectorRegistry(auto_describe=False)
    cadvisor.register(CadvisorCollector(fleet, name, server.now))

    async def cadvisor_metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(cadvisor), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = parse_json(await request.read())
            req = parse_request(body, chat=chat, default_output_tokens=server.default_output_tokens)
        except InputValueError as exc:
            return _json(error_body(str(exc), 400), 400)
        except RequestError as exc:
            return _json(error_body(str(exc), 400), 400)
        if req.model != fleet.model_name:
            return _json(error_body(f"The model `{req.model}` does not exist.", 404), 404)
        if server.now() < rt.node.down_until:
            return _json(error_body("engine restarting", 503), 503)
        wait_s = rt.node.dependency.call(server.now(), fleet.faults)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        # Bring the engine up to now first (as history does): when the event loop runs late, an
        # iteration that ended while we waited must not start again with this request in it,
        # which would time its first token from before it arrived.
        server.notify(engine.advance(server.now()), rt)
        seq = engine.submit(req.prompt_tokens, req.max_tokens, server.now(), req.stop_tokens)
        event = asyncio.Event()
        rt.waiters[seq.id] = event
        rt.wake.set()
        try:
            if req.stream:
                return await _stream(request, req, seq, event)
            while not seq.done:
                await _wait_progress(event)
            if req.hold_key is not None:
                await server.hold(req.hold_key).wait()
            if seq.state is SeqState.ABORTED:
                return _json(error_body("request aborted (engine restart)", 503), 503)
            text = "".join(token_text(i) for i in range(seq.generated))
            rid = response_id(req, seq.id, name)
            return _json(full_response(req, rid, text, seq.finish_reason or "stop", seq.generated))
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away: free the sequence at once, as vLLM does on disconnect.
            engine.abort(seq, server.now())
            rt.wake.set()
            raise
        finally:
            rt.waiters.pop(seq.id, None)
            if req.hold_key is not None:
                server.holds.pop(req.hold_key, None)

    async def _stream(
        request: web.Request, req: GenRequest, seq: Seq, event: asyncio.Event
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        rid = response_id(req, seq.id, name)
        sent = 0
        while True:
            await _wait_progress(event)
            if seq.state is SeqState.ABORTED:
                break
            while sent < seq.generated:
                if req.hold_key is not None and sent == req.hold_after_chunks:
                    await server.hold(req.hold_key).wait()
                if not resp.prepared:
                    # Headers go out with the first token, so a hold before it means no first byte.
                    await resp.prepare(request)
                await resp.write(_sse(chunk(req, rid, token_text(sent), None, first=sent == 0)))
                sent += 1
            if seq.done:
                break
        if not resp.prepared:
            await resp.prepare(request)
        if seq.state is SeqState.ABORTED:
            await resp.write(
                _sse(
                    {"error": {"message": "engine restarted", "type": "ServiceUnavailableError", "code": 503}}
                )
            )
        else:
            await resp.write(_sse(chunk(req, rid, None, seq.finish_reason, first=False)))
            await resp.write(_sse(usage_chunk(req, rid, seq.generated)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def chat(request: web.Request) -> web.StreamResponse:
        return await generate(request, True)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, False)

    app = web.Application()
    app["server"] = server
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/kube-state/metrics", kube_state_metrics)
    app.router.add_get("/metrics/cadvisor", cadvisor_metrics)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    admin.add_routes(app, server)
    return app


def build_server(
    fleet: Fleet,
    host: str,
    port: int,
    admin_token: SecretStr | None,
    default_output_tokens: int,
    wall_origin_s: float,
    stock: bool = False,
) -> SimServer:
    """Wire a registry and runtime per node (no global registry; ``stock``: vLLM's series only)."""
    server = SimServer(fleet, host, port, admin_token, default_output_tokens, wall_origin_s=wall_origin_s)
    for node in fleet.nodes.values():
        registry = CollectorRegistry(auto_describe=False)
        registry.register(EngineCollector(fleet.model_name, node.engine, node.name))
        if not stock:
            registry.register(DependencyCollector(node.dependency))
        server.runtimes[node.name] = NodeRuntime(node, registry)
    return server


async def serve(server: SimServer, port_file: str | None = None) -> None:
    """Listen on every node's port until SIGINT/SIGTERM (``port_file``: write them there, by node)."""
    runners: list[web.AppRunner] = []
    tasks = [asyncio.create_task(server.run_node(rt)) for rt in server.runtimes.values()]
    tasks.append(asyncio.create_task(server.tick()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        for node_name, rt in server.runtimes.items():
            # handler_cancellation: a client that disconnects cancels its handler, which aborts
            # the sequence (aiohttp leaves this off by default).
            runner = web.AppRunner(engine_app(server, rt), handler_cancellation=True, access_log=None)
            await runner.setup()
            runners.append(runner)
            port = 0 if server.port == 0 else server.port_of(node_name)
            await web.TCPSite(runner, server.host, port, reuse_address=True).start()
            port = server.bound[node_name] = runner.addresses[0][1]
            logger.info(
                "SIMULATION engine {} ({}) listening on http://{}:{}",
                node_name,
                server.fleet.model_name,
                server.host,
                port,
            )
        if port_file is not None:
            write_port_file(port_file, server.bound)
        logger.warning(
            "SIMULATION: {} simulated vLLM engines x {} simulated GPUs, pid {}. Not a real engine.",
            len(server.runtimes),
            server.fleet.gpus_per_node,
            os.getpid(),
        )
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        for runner in runners:
            await runner.cleanup()
