"""A local chat sink that accepts what a WeCom group robot accepts, for the demo and end-to-end tests.

It validates each request as WeCom would (the webhook ``key``, ``msgtype``, content byte limits,
the image's base64/md5) and answers with WeCom's documented replies (``errcode`` 0, or 40058
"invalid parameter" for a malformed payload), so the real channel code path is exercised end to
end without leaving the machine. Every accepted message is handed to ``on_message`` (the demo
prints it as a panel) and kept in ``messages``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

WECOM_PATH = "/cgi-bin/webhook/send"
CONTENT_LIMIT_BYTES = {"markdown": 4096, "markdown_v2": 4096, "text": 2048}  # WeCom robot docs
IMAGE_LIMIT_BYTES = 2 * 1024 * 1024
OK = {"errcode": 0, "errmsg": "ok"}
INVALID = {"errcode": 40058, "errmsg": "invalid parameter"}
WRONG_KEY = {"errcode": 93000, "errmsg": "invalid webhook url"}


def _nbytes(text: Any) -> int:
    return len(str(text).encode("utf-8"))


def check_wecom(data: Any) -> list[str]:
    """What WeCom would reject in this JSON body (empty when it is a valid robot message)."""
    if not isinstance(data, dict) or not data:
        return ["wecom: body is not a JSON object"]
    problems: list[str] = []
    kind = data.get("msgtype")
    if kind in CONTENT_LIMIT_BYTES:
        content = data.get(kind, {}).get("content") if isinstance(data.get(kind), dict) else None
        if not isinstance(content, str) or not content:
            problems.append(f"wecom: {kind}.content missing")
        elif _nbytes(content) > CONTENT_LIMIT_BYTES[kind]:
            limit = CONTENT_LIMIT_BYTES[kind]
            problems.append(f"wecom: {kind}.content is {_nbytes(content)} bytes > {limit}")
    elif kind == "image":
        image = data.get("image", {})
        try:
            raw = base64.b64decode(image.get("base64", ""), validate=True)
        except ValueError:
            return ["wecom: image.base64 is not base64"]
        if hashlib.md5(raw).hexdigest() != image.get("md5"):
            problems.append("wecom: image.md5 is not the md5 of the raw image")
        if len(raw) > IMAGE_LIMIT_BYTES:
            problems.append("wecom: image larger than 2 MB")
        if not (raw.startswith(b"\x89PNG\r\n\x1a\n") or raw.startswith(b"\xff\xd8")):
            problems.append("wecom: image is neither PNG nor JPG")
    else:
        problems.append(f"wecom: unknown msgtype {kind!r}")
    return problems


def message_text(data: dict[str, Any]) -> str:
    """The text a reader would see (markdown as sent; an image as a one-line placeholder)."""
    kind = str(data.get("msgtype"))
    if kind == "image":
        return f"[image, {len(base64.b64decode(data['image']['base64']))} bytes]"
    return str(data.get(kind, {}).get("content", ""))


@dataclass(frozen=True)
class SinkMessage:
    """One accepted robot message."""

    msgtype: str
    text: str
    data: dict[str, Any] = field(repr=False)


class ChatSink:
    """``ChatSink(on_message).start()``; ``url`` is the robot webhook URL (with its key) to configure."""

    def __init__(self, on_message: Callable[[SinkMessage], None] | None = None,
                 port: int = 0) -> None:
        self.key = secrets.token_hex(16)
        self.on_message = on_message
        self.messages: list[SinkMessage] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()
        # Bound now (port 0: the kernel picks), listening from ``start()``: ``url`` is final at once,
        # and until then a sender is refused, as by a chat service that is down.
        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(
            ("127.0.0.1", port), self._handler(), bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.server_bind()
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The webhook URL, as WeCom hands it out (the key is the credential)."""
        return f"http://127.0.0.1:{self.port}{WECOM_PATH}?key={self.key}"

    def handle(self, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, dict[str, Any]]:
        """Validate one request; returns the HTTP status and WeCom's JSON reply."""
        if path != WECOM_PATH:
            return 404, {"errcode": 404, "errmsg": "not found"}
        if query.get("key") != [self.key]:
            return 200, WRONG_KEY
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            data = None
        problems = check_wecom(data)
        with self._lock:
            if problems:
                self.problems += problems
                return 200, INVALID
            assert isinstance(data, dict)
            message = SinkMessage(str(data["msgtype"]), message_text(data), data)
            self.messages.append(message)
        if self.on_message is not None:
            self.on_message(message)
        return 200, OK

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                parts = urlsplit(self.path)
                status, reply = sink.handle(parts.path, parse_qs(parts.query), body)
                payload = json.dumps(reply).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the demo prints messages itself; request lines would interleave with it

        return Handler

    def start(self) -> ChatSink:
        """Serve on 127.0.0.1:``port`` in a daemon thread."""
        if self._server is None:
            raise RuntimeError("a stopped ChatSink cannot start again")
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; safe to call twice."""
        if self._thread is not None:
            assert self._server is not None
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        if self._server is not None:
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ChatSink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
