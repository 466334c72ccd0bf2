"""Fixtures for the gateway tests: the upstream in a background thread, gateway and simulator child
processes in front of it (the harness itself is ``gateway_harness``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from gateway_harness import (
    SIM_TOKEN,
    ReadMetric,
    StartGateway,
    StartSim,
    Upstream,
    answer_completion,
    models,
    read_metric_value,
)

from stack.ports import wait_port, wait_ports
from stack.procs import ManagedProcess, http_ok, oximeter_argv


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """Run the upstream on a port the kernel picks, in a thread; stopped at teardown."""
    state = Upstream()
    started = threading.Event()
    stop: list[Callable[[], object]] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        state.loop = loop
        app = web.Application()

        async def completion(request: web.Request) -> web.StreamResponse:
            return await answer_completion(state, request)

        app.router.add_post("/v1/chat/completions", completion)
        app.router.add_post("/v1/completions", completion)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        done = asyncio.Event()
        stop.append(lambda: loop.call_soon_threadsafe(done.set))
        started.set()
        loop.run_until_complete(done.wait())
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30)
    yield state
    stop[0]()
    thread.join(30)


@pytest.fixture
def start_gateway(start_process: Callable[..., ManagedProcess], tmp_path: Path) -> StartGateway:
    """Start ``oximeter gateway`` in front of ``upstream_url``; returns its base URL once ready."""

    def start(upstream_url: str, *flags: str, name: str = "gateway", log_format: str = "text") -> str:
        port_file = tmp_path / f"{name}.port"
        proc = start_process(
            name,
            oximeter_argv(
                "--log-format",
                log_format,
                "gateway",
                "--upstream",
                upstream_url,
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--service",
                "chat",
                "--node",
                "n1",
                *flags,
            ),
        )
        url = f"http://127.0.0.1:{wait_port(proc, port_file)}"
        proc.wait_ready(lambda: http_ok(f"{url}/health/ready"), timeout_s=30)
        return url

    return start


@pytest.fixture
def read_metric() -> ReadMetric:
    """``read_metric(url, name, **labels)``: the sum of the matching samples on a live ``/metrics`` page."""
    return read_metric_value


@pytest.fixture
def start_sim(start_process: Callable[..., ManagedProcess], tmp_path: Path) -> StartSim:
    """Start ``oximeter sim serve`` with one node; returns its engine's base URL once healthy."""

    def start(*flags: str) -> str:
        port_file = tmp_path / "simulator.port"
        proc = start_process(
            "simulator",
            oximeter_argv("sim", "serve", "--port", "0", "--port-file", str(port_file), "--nodes", "1",
                          *flags),
            env={"OXIMETER_ADMIN_TOKEN": SIM_TOKEN},
        )
        [port] = wait_ports(proc, port_file).values()
        url = f"http://127.0.0.1:{port}"
        proc.wait_ready(lambda: http_ok(f"{url}/health"), timeout_s=30)
        return url

    return start
