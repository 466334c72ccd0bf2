"""The digest's chart behind a link on the analyzer API, for chat services a webhook cannot upload to.

WeCom's robot takes the PNG itself (base64 and md5) and the generic webhook carries it in its JSON;
Slack's incoming webhooks, Feishu's custom bots and DingTalk's robots can only show an image by URL.
So the chart is kept in the store (table ``digest_charts``, created by the outbox's migrations) and
served at ``GET /api/charts/<name>.png``. The name is the PNG's SHA-256: it cannot be guessed
without the image, and one name always means the same bytes, so a resent digest links the same
chart. Only the newest ``digest.keep_charts`` charts are kept (90 as shipped: three months of
daily digests); a link in an older message then answers 404. The URL starts with
``reporter.api_url``, which must be the address the chat service (Slack fetches server-side) or
the reader's chat client (Feishu, DingTalk) can reach.
"""

from __future__ import annotations

import hashlib
import re
import time

from aiohttp import web

from oximeter.store import Connection, lock_for

ROUTE = "/api/charts/{name}"
_NAME = re.compile(r"^[0-9a-f]{64}\.png$")
CONN: web.AppKey[Connection] = web.AppKey("chart_conn")


def chart_name(png: bytes) -> str:
    """The chart's file name: its SHA-256, hex, with ``.png``."""
    return hashlib.sha256(png).hexdigest() + ".png"


def chart_url(api_url: str, png: bytes) -> str:
    """Where chat readers fetch ``png``."""
    return f"{api_url.rstrip('/')}{ROUTE.format(name=chart_name(png))}"


def save_chart(conn: Connection, png: bytes, day: str, *, keep: int,
               now: float | None = None) -> str:
    """Keep ``png`` (the digest of ``day``) for the API and forget all but the newest ``keep``
    charts; returns its name. Saving it again is a no-op."""
    if keep < 1:
        raise ValueError("keep must be at least 1: the chart just saved is linked from its digest")
    name = chart_name(png)
    with lock_for(conn):  # each statement is atomic on its own in autocommit mode
        conn.execute("INSERT OR IGNORE INTO digest_charts (name, day, png, created_at) VALUES (?, ?, ?, ?)",
                     (name, day, png, time.time() if now is None else now))
        # Newest by when they were saved; the name breaks ties so the choice is stable.
        conn.execute("DELETE FROM digest_charts WHERE name NOT IN (SELECT name FROM digest_charts "
                     "ORDER BY created_at DESC, name DESC LIMIT ?)", (keep,))
    return name


def load_chart(conn: Connection, name: str) -> bytes | None:
    """The PNG called ``name``, or None."""
    with lock_for(conn):
        row = conn.execute("SELECT png FROM digest_charts WHERE name = ?", (name,)).fetchone()
    return None if row is None else bytes(row[0])


async def get_chart(request: web.Request) -> web.Response:
    """``GET /api/charts/<sha256>.png``: a digest's chart (reads are open, as for incidents)."""
    name = request.match_info["name"]
    if not _NAME.match(name):
        return web.json_response({"error": "chart name: expected <64 hex digits>.png"}, status=400)
    png = load_chart(request.app[CONN], name)
    if png is None:
        return web.json_response({"error": f"no chart {name!r}"}, status=404)
    # Immutable: the name is the content's hash.
    return web.Response(body=png, content_type="image/png",
                        headers={"Cache-Control": "public, max-age=31536000, immutable"})


def mount(app: web.Application, conn: Connection) -> None:
    """Serve the store's charts on the analyzer API."""
    app[CONN] = conn
    app.router.add_get(ROUTE, get_chart)
