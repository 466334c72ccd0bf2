"""The shared connection guard: the total cap answers and closes at once, and what it refuses is one
summary log line per interval, not a line per connection."""

from __future__ import annotations

import asyncio
import re

from aiohttp import web
from loguru import logger

from oximeter.guard import ConnectionGuard, GuardedSite


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _flood(guard: ConnectionGuard, connections: int) -> list[bytes]:
    app = web.Application(middlewares=[guard.middleware])
    app.router.add_get("/", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await GuardedSite(runner, "127.0.0.1", 0, guard).start()
    port = runner.addresses[0][1]
    opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    answers = []
    for reader, _writer in opened:
        try:
            answers.append(await asyncio.wait_for(reader.read(200), 0.3))
        except TimeoutError:
            answers.append(b"")  # held open, waiting for its request
    # The summary comes once per interval, for everything refused in it.
    await asyncio.sleep(guard.log_interval_s * 3)
    for _reader, writer in opened:
        writer.close()
    await runner.cleanup()
    return answers


def test_the_total_cap_refuses_and_is_logged_once_per_interval() -> None:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING", format="{message}")
    try:
        guard = ConnectionGuard(header_timeout_s=30, idle_timeout_s=30, max_per_client=100, max_connections=3,
                                name="test listener", log_interval_s=0.2)
        answers = asyncio.run(_flood(guard, 40))
    finally:
        logger.remove(sink)
    assert answers[:3] == [b"", b"", b""]
    assert all(a.startswith(b"HTTP/1.1 503 ") and a.endswith(b"too many connections\n") for a in answers[3:])
    summaries = [line for line in lines if line.startswith("test listener: connections refused")]
    # One line per 0.2 s interval at most: the 37 refusals took far fewer lines than 37.
    assert 1 <= len(summaries) < 10
    summary = re.compile(r"in the last 0.2 s: (\d+) over the total cap "
                         r"\(from 1 client address\(es\); 3 held now\)")
    counted = [summary.search(line) for line in summaries]
    assert sum(int(m.group(1)) for m in counted if m is not None) == 37
