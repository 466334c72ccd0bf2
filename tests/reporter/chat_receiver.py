"""One local HTTP receiver that speaks like every chat service (Apprise's URL-tester idea).

It validates each request the way the real service would (payload shape, byte limits, signatures,
the webhook key) with code written independently of ``reporter/``, records what it received, and
answers from a table of each service's documented replies: success, throttling, HTTP 429 with
``Retry-After``, 5xx and permanent errors. Tests script the next replies per service.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from reporter.channels import Channel
from reporter.sink import check_wecom

WECOM_KEY = "wk-693a91f6-7a0c-4bc4-97a0-0ec2b1fa5aaa"
FEISHU_TOKEN = "fs-1a2b3c4d-5e6f-7a8b-9c0d-e1f2a3b4c5d6"
DINGTALK_TOKEN = "dt0123456789abcdefTOKEN"
SLACK_PATH = "T0SECRET1/B0SECRET2/XsecretXsecretX"
WEBHOOK_TOKEN = "wh-Token-31337"
SECRETS = {"feishu": "demo-secret", "dingtalk": "SECdemo", "webhook": "whsec-s3cr3t"}

Reply = tuple[int, dict[str, str], str]
# ``make_channel(service, secret=..., clock=...)`` (a fixture): a channel configured for the receiver.
MakeChannel = Callable[..., Channel]
_J = json.dumps
RETRY_AFTER = {"Retry-After": "7"}

# Documented replies (WeCom robot docs, Feishu custom bot guide, DingTalk custom robot, Slack
# "Improving error conditions for Incoming Webhooks"): (HTTP status, headers, body).
REPLIES: dict[str, dict[str, Reply]] = {
    "wecom": {
        "ok": (200, {}, _J({"errcode": 0, "errmsg": "ok"})),
        "throttled": (200, {}, _J({"errcode": 45009, "errmsg": "api freq out of limit"})),
        "permanent": (200, {}, _J({"errcode": 93000, "errmsg": "invalid webhook url"})),
        "bad_payload": (200, {}, _J({"errcode": 40058, "errmsg": "invalid parameter"})),
    },
    "feishu": {
        "ok": (200, {}, _J({"code": 0, "msg": "success", "data": {}, "StatusCode": 0,
                            "StatusMessage": "success"})),
        "legacy_ok": (200, {}, _J({"Extra": None, "StatusCode": 0, "StatusMessage": "success"})),
        "throttled": (400, {}, _J({"code": 11232, "msg": "frequency limited", "data": {}})),
        "permanent": (200, {}, _J({"code": 19021, "msg": "sign match fail or timestamp is not within one "
                                                         "hour from current time", "data": {}})),
        "bad_payload": (400, {}, _J({"code": 9499, "msg": "Bad Request", "data": {}})),
    },
    "dingtalk": {
        "ok": (200, {}, _J({"errcode": 0, "errmsg": "ok"})),
        "throttled": (200, {}, _J({"errcode": 130101,
                                   "errmsg": "send too fast, exceed 20 times per minute"})),
        "permanent": (200, {}, _J({"errcode": 310000, "errmsg": "sign not match"})),
        "bad_payload": (200, {}, _J({"errcode": 300001, "errmsg": "param error"})),
    },
    "slack": {
        "ok": (200, {}, "ok"),
        "throttled": (429, RETRY_AFTER, "rate_limited"),
        "permanent": (404, {}, "no_service"),
        "archived": (410, {}, "channel_is_archived"),
        "bad_payload": (400, {}, "invalid_payload"),
    },
    "webhook": {
        "ok": (200, {}, "{}"),
        "throttled": (429, RETRY_AFTER, ""),
        "permanent": (410, {}, "gone"),
        "bad_payload": (400, {}, "bad payload"),
    },
}
for _service in REPLIES.values():
    _service.setdefault("http_429", (429, RETRY_AFTER, "too many requests"))
    _service.setdefault("http_503", (503, {}, "service unavailable"))


@dataclass
class Received:
    """One request as the receiver saw it."""

    service: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    data: Any
    problems: list[str] = field(default_factory=list)
    ok: bool = False  # answered with success


def _nbytes(text: Any) -> int:
    return len(str(text).encode("utf-8"))


def _http_url(value: Any) -> bool:
    return isinstance(value, str) and re.match(r"^https?://[^\s]+$", value) is not None


def _check_wecom(r: Received) -> None:
    # The body's rules are the demo sink's (one reading of WeCom's robot docs); the key is ours.
    if r.query.get("key") != [WECOM_KEY]:
        r.problems.append("wecom: wrong key")
    r.problems.extend(check_wecom(r.data))


def _check_feishu(r: Received, secret: str | None) -> None:
    p, d = r.problems, r.data
    if len(r.body) > 20_000:
        p.append(f"feishu: body is {len(r.body)} bytes > 20 KB")
    if d.get("msg_type") != "interactive":
        p.append("feishu: msg_type is not interactive")
    card = d.get("card", {})
    if not isinstance(card.get("header", {}).get("title", {}).get("content"), str):
        p.append("feishu: card.header.title.content missing")
    elements = card.get("elements")
    if not elements or any(e.get("tag") not in ("div", "hr", "action", "img", "note") for e in elements):
        p.append("feishu: card.elements missing or of unknown tag")
    for e in elements or ():
        # An image in a card is an img_key from Feishu's upload API (an app's token), never a URL.
        if e.get("tag") == "img" and not str(e.get("img_key", "")).startswith("img_"):
            p.append("feishu: img element without an uploaded img_key")
        if e.get("tag") == "action" and not all(_http_url(a.get("url")) for a in e.get("actions", [])):
            p.append("feishu: button url missing or not http(s)")
    if secret is not None:
        ts = str(d.get("timestamp", ""))
        key = f"{ts}\n{secret}".encode()
        expected = base64.b64encode(hmac.new(key, msg=b"", digestmod=hashlib.sha256).digest()).decode()
        if not ts.isdigit() or abs(time.time() - int(ts)) > 3600:
            p.append("feishu: timestamp missing or not within one hour (seconds)")
        elif d.get("sign") != expected:
            p.append("feishu: sign mismatch")


def _check_dingtalk(r: Received, secret: str | None) -> None:
    p, d = r.problems, r.data
    if r.query.get("access_token") != [DINGTALK_TOKEN]:
        p.append("dingtalk: wrong access_token")
    if secret is not None:
        ts = r.query.get("timestamp", [""])[0]
        # parse_qs has URL-decoded the sign once, as DingTalk's server does.
        sign = r.query.get("sign", [""])[0]
        mac = hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()
        if not ts.isdigit() or abs(time.time() * 1000 - int(ts)) > 3600 * 1000:
            p.append("dingtalk: timestamp missing or not within one hour (milliseconds)")
        elif sign != base64.b64encode(mac).decode():
            p.append("dingtalk: sign mismatch")
    kind = d.get("msgtype")
    body = d.get(kind, {}) if isinstance(kind, str) else {}
    if kind not in ("markdown", "actionCard"):
        p.append(f"dingtalk: unexpected msgtype {kind!r}")
    elif not body.get("title") or not isinstance(body.get("text"), str):
        p.append(f"dingtalk: {kind} needs title and text")
    elif _nbytes(body["text"]) > 20_000:
        p.append(f"dingtalk: text is {_nbytes(body['text'])} bytes > 20000")
    # Markdown shows an image by an absolute http(s) URL the reader's client fetches.
    elif any(not _http_url(url) for url in re.findall(r"!\[[^\]]*\]\(([^)]*)\)", body["text"])):
        p.append("dingtalk: markdown image without an http(s) URL")
    if kind == "actionCard" and not (body.get("singleURL") or all(
            b.get("title") and b.get("actionURL") for b in body.get("btns") or [{}])):
        p.append("dingtalk: actionCard needs singleURL or btns with title and actionURL")


def _check_slack(r: Received) -> None:
    p, d = r.problems, r.data
    if not isinstance(d.get("text"), str) or not d["text"]:
        p.append("slack: top-level text fallback missing")
    blocks = d.get("blocks", [])
    if len(blocks) > 50:
        p.append(f"slack: {len(blocks)} blocks > 50")
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            text = block["text"]
            if text.get("type") != "plain_text" or len(text.get("text", "")) > 150:
                p.append("slack: header must be plain_text of at most 150 characters")
        elif kind == "section":
            if "text" in block and len(block["text"].get("text", "")) > 3000:
                p.append(f"slack: section text {len(block['text']['text'])} > 3000 characters")
            fields = block.get("fields", [])
            if len(fields) > 10 or any(len(f.get("text", "")) > 2000 for f in fields):
                p.append("slack: more than 10 fields or a field over 2000 characters")
            if "text" not in block and not fields:
                p.append("slack: section without text or fields")
        elif kind == "image":
            # Incoming webhooks cannot upload: image_url (<= 3000) is fetched by Slack; alt_text required.
            alt, title = block.get("alt_text"), block.get("title")
            if not _http_url(block.get("image_url")) or len(block["image_url"]) > 3000:
                p.append("slack: image block needs an http(s) image_url of at most 3000 characters")
            if not isinstance(alt, str) or not alt or len(alt) > 2000:
                p.append("slack: image block needs alt_text of 1 to 2000 characters")
            if title is not None and (title.get("type") != "plain_text" or len(title.get("text", "")) > 2000):
                p.append("slack: image title must be plain_text of at most 2000 characters")
        elif kind not in ("context", "divider", "actions"):
            p.append(f"slack: unknown block type {kind!r}")


def _check_webhook(r: Received, secret: str | None) -> None:
    p = r.problems
    if secret is not None:
        expected = "sha256=" + hmac.new(secret.encode(), r.body, hashlib.sha256).hexdigest()
        if r.headers.get("x-oximeter-signature") != expected:
            p.append("webhook: signature mismatch")
    if r.headers.get("x-oximeter-idempotency-key") != r.data.get("idempotency_key"):
        p.append("webhook: idempotency header differs from the body")
    image = r.data.get("image_png_base64")
    if image is not None and not base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n"):
        p.append("webhook: image_png_base64 is not a PNG")


def delivered_chart(service: str, data: dict[str, Any]) -> bytes | str | None:
    """The chart (bytes) or its link (str) as this service's payload carries it."""
    if service == "wecom":
        return base64.b64decode(data["image"]["base64"]) if data["msgtype"] == "image" else None
    if service == "webhook":
        assert data["image_url"]  # the link travels too, for receivers that prefer it
        return base64.b64decode(data["image_png_base64"])
    if service == "slack":  # an image block, or a link where Slack could not fetch the image
        found = [b["image_url"] for b in data["blocks"] if b["type"] == "image"] + [
            m for b in data["blocks"] if b["type"] == "section" and "text" in b
            for m in re.findall(r"<([^|>]+)\|Chart \(PNG\)>", b["text"]["text"])]
        return found[0] if found else None
    if service == "dingtalk":
        text = data[data["msgtype"]]["text"]
        return text.split("![chart](", 1)[1].split(")", 1)[0] if "![chart](" in text else None
    buttons = [a for e in data["card"]["elements"] if e["tag"] == "action" for a in e["actions"]]
    return next((b["url"] for b in buttons if b["text"]["content"] == "Chart (PNG)"), None)


class ChatReceiver:
    """Start with ``start()``; ``url(service)`` is the webhook URL a channel is configured with."""

    def __init__(self, secrets: dict[str, str | None] | None = None) -> None:
        self.secrets: dict[str, str | None] = {**SECRETS, **(secrets or {})}
        self.received: list[Received] = []
        self._script: dict[str, deque[str]] = defaultdict(deque)
        self._lock = threading.Lock()
        # Bound at once (the kernel picks the port), listening from ``start()``: until then every
        # request is refused, as by a chat service that is down.
        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(
            ("127.0.0.1", 0), self._handler(), bind_and_activate=False)
        self._server.daemon_threads = True
        self._server.server_bind()
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    def url(self, service: str) -> str:
        """The webhook URL, credentials included, as the service would hand it out."""
        base = f"http://127.0.0.1:{self.port}"
        return {
            "wecom": f"{base}/cgi-bin/webhook/send?key={WECOM_KEY}",
            "feishu": f"{base}/open-apis/bot/v2/hook/{FEISHU_TOKEN}",
            "dingtalk": f"{base}/robot/send?access_token={DINGTALK_TOKEN}",
            "slack": f"{base}/services/{SLACK_PATH}",
            "webhook": f"{base}/hooks/{WEBHOOK_TOKEN}",
        }[service]

    def script(self, service: str, *kinds: str) -> None:
        """Answer the next requests to ``service`` with these reply kinds (then ``ok`` again)."""
        with self._lock:
            self._script[service].extend(kinds)

    @property
    def problems(self) -> list[str]:
        """Every validation problem seen so far."""
        return [problem for r in self.received for problem in r.problems]

    def accepted(self, service: str | None = None) -> list[Received]:
        """Requests that were valid and answered with success."""
        return [r for r in self.received if not r.problems and r.ok
                and (service is None or r.service == service)]

    def accepted_keys(self) -> Counter[str]:
        """How often each idempotency key was accepted by the generic webhook."""
        return Counter(r.data.get("idempotency_key", "") for r in self.accepted("webhook"))

    def handle(self, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes) -> Reply:
        """Validate one request and pick its reply."""
        service = ("wecom" if path == "/cgi-bin/webhook/send" else
                   "feishu" if path == f"/open-apis/bot/v2/hook/{FEISHU_TOKEN}" else
                   "dingtalk" if path == "/robot/send" else
                   "slack" if path == f"/services/{SLACK_PATH}" else
                   "webhook" if path == f"/hooks/{WEBHOOK_TOKEN}" else "")
        if not service:
            return 404, {}, "no such hook"
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            data = {}
        record = Received(service, query, headers, body, data)
        if not isinstance(data, dict) or not data:
            record.problems.append(f"{service}: body is not a JSON object")
        elif service == "wecom":
            _check_wecom(record)
        elif service == "feishu":
            _check_feishu(record, self.secrets.get("feishu"))
        elif service == "dingtalk":
            _check_dingtalk(record, self.secrets.get("dingtalk"))
        elif service == "slack":
            _check_slack(record)
        else:
            _check_webhook(record, self.secrets.get("webhook"))
        with self._lock:
            self.received.append(record)
            if record.problems:
                sign_problem = any("sign" in problem for problem in record.problems)
                kind = "permanent" if sign_problem and service in ("feishu", "dingtalk") else "bad_payload"
            else:
                kind = self._script[service].popleft() if self._script[service] else "ok"
            record.ok = kind in ("ok", "legacy_ok")
        return REPLIES[service][kind]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                query = parse_qs(parts.query)
                status, reply_headers, text = receiver.handle(parts.path, query, headers, body)
                payload = text.encode("utf-8")
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **reply_headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> ChatReceiver:
        """Serve on 127.0.0.1:``port`` in a background thread."""
        assert self._server is not None, "a stopped ChatReceiver cannot start again"
        self._server.server_activate()
        # A short poll interval so shutdown() returns quickly at every test's teardown.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (the port is free again); safe to call twice, and before ``start()``."""
        if self._thread is not None:
            assert self._server is not None
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        if self._server is not None:
            self._server.server_close()
            self._server = None
