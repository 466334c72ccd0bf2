"""Headless Chromium for the tests that read pages as a person does, driven over the DevTools
protocol. Chromium binds its debugging port itself (``--remote-debugging-port=0``) and writes the
port it got to ``DevToolsActivePort`` in its profile, which is read here (no port picked before
the bind); the test's fixture starts and always stops the process."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import requests

from stack.procs import ManagedProcess, wait_until

CHROMIUM = ("chromium", "chromium-browser")


def chromium_binary() -> str:
    """The installed Chromium (``make setup`` installs Debian's ``chromium``)."""
    found = next((path for name in CHROMIUM if (path := shutil.which(name))), None)
    assert found, "Chromium is not installed: run `make setup` (it installs Debian's chromium)"
    return found


def chromium_argv(profile: Path) -> list[str]:
    """A headless Chromium with its own profile; ``--no-sandbox`` because test machines run as root."""
    return [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--window-size=1100,1500", "about:blank"]


class Browser:
    """One page of a started Chromium: ``open(url)``, ``text()``, ``run(js)``, ``screenshot(path)``."""

    def __init__(self, process: ManagedProcess, profile: Path, timeout_s: float = 60.0) -> None:
        active = profile / "DevToolsActivePort"
        port = int(wait_until(lambda: active.exists() and active.read_text().split("\n")[0].strip(),
                              timeout_s, what="Chromium's DevTools port"))
        base = f"http://127.0.0.1:{port}"
        targets = wait_until(lambda: [t for t in requests.get(f"{base}/json/list", timeout=5).json()
                                      if t.get("type") == "page"], timeout_s, what="Chromium's page")
        self.process, self.timeout_s, self._ids = process, timeout_s, itertools.count(1)
        self.loop = asyncio.new_event_loop()
        self.session = self.loop.run_until_complete(self._session())
        self.ws = self.loop.run_until_complete(self.session.ws_connect(targets[0]["webSocketDebuggerUrl"],
                                                                       max_msg_size=0))
        self._call("Page.enable")

    async def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    async def _send(self, method: str, params: dict[str, Any], wait_event: str | None) -> dict[str, Any]:
        call_id = next(self._ids)
        await self.ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        result: dict[str, Any] | None = None
        event_seen = wait_event is None
        while result is None or not event_seen:
            message = json.loads((await self.ws.receive(timeout=self.timeout_s)).data)
            if message.get("id") == call_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result = message.get("result", {})
            elif wait_event is not None and message.get("method") == wait_event:
                event_seen = True
        return result

    def _call(self, method: str, wait_event: str | None = None, **params: Any) -> dict[str, Any]:
        return self.loop.run_until_complete(self._send(method, params, wait_event))

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the page has loaded."""
        self._call("Page.navigate", "Page.loadEventFired", url=url)

    def run(self, expression: str, *, navigates: bool = False) -> Any:
        """Evaluate ``expression`` in the page (as the test's hand: the pages have no scripts of
        their own); with ``navigates``, wait for the page it leads to."""
        reply = self._call("Runtime.evaluate", "Page.loadEventFired" if navigates else None,
                           expression=expression, returnByValue=True)
        return reply.get("result", {}).get("value")

    def text(self) -> str:
        """What the page shows, as text."""
        return str(self.run("document.body.innerText"))

    def screenshot(self, path: Path) -> Path:
        """Save the whole page as a PNG at ``path``."""
        size = self.run("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = self._call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        """Close the connection (the fixture stops the process)."""
        self.loop.run_until_complete(self.ws.close())
        self.loop.run_until_complete(self.session.close())
        self.loop.close()
