"""The analyzer API with the relay mounted, served from a background thread, and a sample incident."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta

from aiohttp import web

from analyzer.diagnosis.case import RootCause
from analyzer.incidents.lifecycle import Evidence, Incident
from analyzer.service.api import start_api
from stack.procs import http_ok, wait_until


def sample_incident(now: datetime, *, layer: str = "infrastructure", node: str = "n1",
                    service: str = "chat", simulated: bool = False) -> Incident:
    """An open thermal-throttle incident on ``node`` GPU 2, with one cause and one impact signal."""
    onset = now - timedelta(minutes=6)
    gpu = (("gpu", "2"), ("node", node), *((("simulation", "true"),) if simulated else ()))
    evidence = (
        Evidence("gpu_temperature", gpu, layer, 91.0, 62.0, onset, onset + timedelta(minutes=2), None,
                 "cause"),
        Evidence("queue_wait_p99", (("node", node), ("service", service)), "scheduling", 2.4, 0.12,
                 onset + timedelta(minutes=1), onset + timedelta(minutes=3), None, "impact"),
    )
    return Incident(
        id="inc-20251130T120000-abc123",
        title=f"[{layer}] thermal_throttle: gpu_temperature on gpu=2,node={node}",
        state="open", severity="warning", layer=layer, rule="thermal_throttle",
        root_cause=RootCause("gpu_temperature", gpu),
        sentence="GPU 2 on n1 at 91 °C (baseline 62 °C), SM clock 45 % of max with hw_thermal",
        runbook="docs/runbook.md#thermal_throttle", evidence=evidence, impact_signals=("queue_wait_p99",),
        services=(service,), nodes=(node,), keys=(f"node={node}",), first_onset=onset,
        opened_at=onset + timedelta(minutes=3), updated_at=now, last_active_at=now)


class ThreadedApp:
    """Serve an aiohttp app on 127.0.0.1 (a port the kernel picks) from a thread with its own event loop."""

    def __init__(self, app: web.Application) -> None:
        self.app, self.port = app, 0  # known once started
        self.loop = asyncio.new_event_loop()
        self.runner: web.AppRunner | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ThreadedApp:
        """Start and wait until it answers."""
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(
            start_api(self.app, "127.0.0.1", 0), self.loop).result(30)
        self.port = self.runner.addresses[0][1]
        wait_until(lambda: http_ok(f"{self.url}/openapi.json"), 30)
        return self

    def stop(self) -> None:
        """Stop serving and end the thread."""
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
