"""The analyzer API served from its own event-loop thread on 127.0.0.1, on a port the kernel picks
(bound before anyone is told it), for the tests that talk to it over real HTTP."""

from __future__ import annotations

import asyncio
import threading

import requests
from aiohttp import web

from analyzer.service.api import start_api


class ApiServer:
    """``build_app(...)`` served until ``stop()``; ``url(path)`` and a keep-alive ``session``."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = asyncio.run_coroutine_threadsafe(start_api(app, "127.0.0.1", 0), self.loop).result(30)
        self.port = int(self.runner.addresses[0][1])
        self.session = requests.Session()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.session.close()
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
