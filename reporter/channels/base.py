"""The small base every chat channel extends (Apprise's plugin shape, without its regex discovery).

A channel declares its limits, rate and success codes as class attributes and writes ``payload()``
(one request body from one chunk of rendered text). The base renders the message, splits or trims
it to the service's limit with a visible "…truncated" marker, applies the client-side rate limit
(never sleeping: a throttled send is handed back to the outbox), posts, and classifies the reply as
sent, retryable or permanent. Retrying over time is the outbox's job, so it survives restarts.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

import requests
from pydantic import SecretStr

from reporter.message import SIMULATION_MARKER, Message
from reporter.ratelimit import SlidingWindowLimiter
from reporter.redact import redact_url, scrub, secret_fragments

TRUNCATED = "…truncated"


class Outcome(StrEnum):
    """What became of one delivery attempt."""

    SENT = "sent"
    RETRY = "retry"  # the service throttled or failed transiently: try again later
    FAILED = "failed"  # permanent: wrong key, bad payload, signature mismatch...
    THROTTLED = "throttled"  # our own rate limit: nothing was attempted for the remaining parts


@dataclass(frozen=True)
class Reply:
    """The service's answer to one request, classified."""

    ok: bool
    retryable: bool = False
    code: str = ""
    detail: str = ""
    retry_after_s: float | None = None


@dataclass(frozen=True)
class DeliveryResult:
    """The result of ``Channel.send``; ``parts_sent`` counts parts delivered, including earlier ones."""

    outcome: Outcome
    parts_sent: int
    parts_total: int
    retry_after_s: float | None = None
    code: str = ""
    error: str = ""


def _size(text: str, unit: str) -> int:
    return len(text.encode("utf-8")) if unit == "bytes" else len(text)


def _trim(text: str, limit: int, unit: str) -> str:
    if unit == "bytes":
        return text.encode("utf-8")[: max(limit, 0)].decode("utf-8", "ignore")
    return text[: max(limit, 0)]


def _hard_split(line: str, budget: int, unit: str) -> list[str]:
    pieces = []
    while _size(line, unit) > budget:
        head = _trim(line, budget, unit) or line[0]  # never stall on a character wider than the budget
        pieces.append(head)
        line = line[len(head):]
    pieces.append(line)
    return pieces


def split_text(text: str, limit: int, unit: str = "bytes", max_parts: int = 3) -> list[str]:
    """Split ``text`` on line boundaries into at most ``max_parts`` chunks of at most ``limit``.

    ``unit`` is ``"bytes"`` (UTF-8) or ``"chars"``. Several chunks are numbered ``(i/n)``; text
    beyond ``max_parts`` chunks is dropped and the last chunk ends with the visible marker.
    """
    if _size(text, unit) <= limit:
        return [text]
    marker = "\n" + TRUNCATED
    budget = limit - _size(f"({max_parts}/{max_parts})\n", unit) if max_parts > 1 else limit
    chunks: list[str] = []
    current: list[str] = []
    current_size = -1  # size of "\n".join(current)
    for line in text.split("\n"):
        for piece in _hard_split(line, budget, unit):
            piece_size = _size(piece, unit)
            if current and current_size + 1 + piece_size > budget:
                chunks.append("\n".join(current))
                current, current_size = [], -1
            current.append(piece)
            current_size += 1 + piece_size
    if current:
        chunks.append("\n".join(current))
    if len(chunks) > max_parts:
        chunks = chunks[:max_parts]
        last = chunks[-1]
        kept = _trim(last, budget - _size(marker, unit), unit)
        if len(kept) < len(last) and last[len(kept)] != "\n" and "\n" in kept:
            kept = kept.rsplit("\n", 1)[0]  # end on a whole line when there is one
        chunks[-1] = kept + marker
    if len(chunks) == 1:
        return chunks
    return [f"({i}/{len(chunks)})\n{chunk}" for i, chunk in enumerate(chunks, start=1)]


def retry_after_s(headers: Mapping[str, str], wall_clock: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), or None."""
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - wall_clock(), 0.0)


class Channel:
    """One configured chat destination; subclasses are one short file each."""

    kind: ClassVar[str] = ""
    content_limit: ClassVar[int] = 4096  # per chunk of rendered text, in ``limit_unit``
    limit_unit: ClassVar[str] = "bytes"
    request_limit_bytes: ClassVar[int | None] = None  # whole JSON body, where the service caps it
    max_parts: ClassVar[int] = 3
    rate_count: ClassVar[int] = 20
    rate_window_s: ClassVar[float] = 60.0
    code_fields: ClassVar[tuple[str, ...]] = ("errcode",)  # JSON keys carrying the service code; 0 = ok
    retryable_codes: ClassVar[frozenset[int]] = frozenset()
    code_pause_s: ClassVar[Mapping[int, float]] = MappingProxyType({})  # documented lock-out per code
    heading_in_body: ClassVar[bool] = True
    links_in_body: ClassVar[bool] = True

    def __init__(self, name: str, url: SecretStr, secret: SecretStr | None = None, *,
                 session: requests.Session | None = None, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self._url = url
        self._secret = secret
        self.session = session or requests.Session()
        self.timeout_s = timeout_s
        self.wall_clock = wall_clock
        self.limiter = SlidingWindowLimiter(self.rate_count, self.rate_window_s, clock)
        secret_text = secret.get_secret_value() if secret else None
        self._fragments = secret_fragments(url.get_secret_value(), secret_text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, url={self.redacted_url!r})"

    @property
    def redacted_url(self) -> str:
        """The webhook URL with its key/token hidden."""
        return redact_url(self._url.get_secret_value())

    def scrub(self, text: str) -> str:
        """``text`` with this channel's URL, tokens and signing secret hidden."""
        return scrub(text, self._fragments)

    # --- rendering: markdown-ish by default; channels change the few marks that differ ---

    def bold(self, text: str) -> str:
        """Bold in this channel's markdown flavour."""
        return f"**{text}**"

    def link(self, label: str, url: str) -> str:
        """A link in this channel's markdown flavour."""
        return f"[{label}]({url})"

    def render_heading(self, message: Message) -> str:
        """The first line of the body."""
        return self.bold(message.heading)

    def render_field(self, key: str, value: str, message: Message) -> str:
        """One key/value line."""
        return f"{self.bold(key)}: {value}"

    def render_table(self, rows: tuple[tuple[str, ...], ...]) -> list[str]:
        """A table as plain lines (most chat markdown has no tables)."""
        header, *body = rows
        return [self.bold(" · ".join(header)), *(" · ".join(row) for row in body)]

    def render(self, message: Message) -> str:
        """The message as this channel's markdown text."""
        lines = [self.render_heading(message)] if self.heading_in_body else []
        if message.simulation:
            lines.append(f"> {SIMULATION_MARKER}: built from simulated targets, not a real fleet")
        lines += [self.render_field(key, value, message) for key, value in message.fields]
        for section in message.sections:
            lines += ["", self.bold(section.title)]
            if section.body:
                lines.append(section.body)
            if section.table:
                lines += self.render_table(section.table)
        if message.links and self.links_in_body:
            lines += ["", " · ".join(self.link(link.label, link.url) for link in message.links)]
        return "\n".join(lines).strip("\n")

    # --- payloads ---

    def payload(self, text: str, message: Message, index: int, total: int) -> dict[str, Any]:
        """One request body carrying chunk ``index`` (0-based) of ``total``."""
        raise NotImplementedError

    def extra_payloads(self, message: Message) -> list[dict[str, Any]]:
        """Requests sent after the text (e.g. WeCom's image message)."""
        return []

    def payloads(self, message: Message) -> list[dict[str, Any]]:
        """Every request body for ``message``, each within the service's limits."""
        text, limit = self.render(message), self.content_limit
        while True:
            chunks = split_text(text, limit, self.limit_unit, self.max_parts)
            bodies = [self.payload(chunk, message, i, len(chunks)) for i, chunk in enumerate(chunks)]
            if self.request_limit_bytes is None:
                break
            largest = max(len(self.encode(body)) for body in bodies)
            if largest <= self.request_limit_bytes or limit <= 256:
                break
            # JSON escaping and the card's own fields took the excess: shrink the text by as much.
            limit -= largest - self.request_limit_bytes + 16
        return bodies + self.extra_payloads(message)

    @staticmethod
    def encode(body: Mapping[str, Any]) -> bytes:
        """The wire form of a JSON body (UTF-8, so byte limits are measured as the service does)."""
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def request(self, body: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
        """URL, headers and bytes of one POST; signing channels override."""
        headers = {"Content-Type": "application/json; charset=utf-8"}
        return self._url.get_secret_value(), headers, self.encode(body)

    def secret_value(self) -> str | None:
        """The signing secret, for subclasses that sign."""
        return self._secret.get_secret_value() if self._secret else None

    # --- replies ---

    def judge(self, status: int, headers: Mapping[str, str], text: str) -> Reply:
        """Classify a reply: HTTP 429/5xx retry; else the JSON code (0 ok, ``retryable_codes`` retry)."""
        if status == 429:
            return Reply(False, True, "http 429", "rate limited", retry_after_s(headers, self.wall_clock))
        if status >= 500:
            return Reply(False, True, f"http {status}", text[:200], retry_after_s(headers, self.wall_clock))
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            for key in self.code_fields:
                if isinstance(data.get(key), int):
                    code = int(data[key])
                    detail = str(data.get("errmsg") or data.get("msg") or data.get("StatusMessage") or "")
                    if code == 0 and 200 <= status < 300:
                        return Reply(True, code="0")
                    retryable = code in self.retryable_codes
                    after = retry_after_s(headers, self.wall_clock) or self.code_pause_s.get(code)
                    return Reply(False, retryable, str(code), detail[:200], after)
        return Reply(False, False, f"http {status}", f"unexpected reply: {text[:200]}")

    # --- sending ---

    def post(self, body: dict[str, Any]) -> Reply:
        """POST one body; connection errors are retryable; nothing secret is kept in the detail."""
        url, headers, data = self.request(body)
        try:
            response = self.session.post(url, data=data, headers=headers, timeout=self.timeout_s)
        except requests.RequestException as exc:
            return Reply(False, True, "connection", self.scrub(f"{type(exc).__name__}: {exc}"))
        # Scrubbed before judge() cuts the text, so no secret survives cut in half at the edge.
        reply = self.judge(response.status_code, response.headers, self.scrub(response.text))
        return Reply(reply.ok, reply.retryable, reply.code, self.scrub(reply.detail), reply.retry_after_s)

    def send(self, message: Message, start_part: int = 0) -> DeliveryResult:
        """Send the parts of ``message`` from ``start_part`` on, stopping at the first problem."""
        bodies = self.payloads(message)
        sent = min(start_part, len(bodies))
        for body in bodies[sent:]:
            wait_s = self.limiter.wait_s()
            if wait_s > 0:
                return DeliveryResult(Outcome.THROTTLED, sent, len(bodies), retry_after_s=wait_s)
            self.limiter.record()
            reply = self.post(body)
            if not reply.ok:
                outcome = Outcome.RETRY if reply.retryable else Outcome.FAILED
                if reply.code == "http 429" and reply.retry_after_s is not None:
                    # The service said when to come back: throttling, not a failed try. (Without
                    # Retry-After it counts, so a receiver that only ever says 429 still gives up.)
                    outcome = Outcome.THROTTLED
                return DeliveryResult(outcome, sent, len(bodies), reply.retry_after_s, reply.code,
                                      f"{reply.code}: {reply.detail}".strip(": "))
            sent += 1
        return DeliveryResult(Outcome.SENT, sent, len(bodies))
