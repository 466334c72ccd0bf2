"""Generic JSON webhook: the whole message as JSON, optionally HMAC-signed."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from reporter.channels.base import Channel, Reply, retry_after_s
from reporter.message import Message

SIGNATURE_HEADER = "X-Oximeter-Signature"
IDEMPOTENCY_HEADER = "X-Oximeter-Idempotency-Key"


def webhook_signature(body: bytes, secret: str) -> str:
    """``sha256=<hex HMAC-SHA256 of the raw body keyed by the secret>`` (GitHub's scheme)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookChannel(Channel):
    """Any HTTP endpoint that accepts JSON; 2xx is success. Receivers de-duplicate on the key header."""

    kind = "webhook"
    rate_count, rate_window_s = 10, 1.0

    def payloads(self, message: Message) -> list[dict[str, Any]]:
        return [{"source": "oximeter", "heading": message.heading, **message.to_dict()}]

    def request(self, body: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
        url, headers, data = super().request(body)
        headers[IDEMPOTENCY_HEADER] = str(body.get("idempotency_key", ""))
        secret = self.secret_value()
        if secret:
            headers[SIGNATURE_HEADER] = webhook_signature(data, secret)
        return url, headers, data

    def judge(self, status: int, headers: Mapping[str, str], text: str) -> Reply:
        if 200 <= status < 300:
            return Reply(True, code=str(status))
        retryable = status == 429 or status >= 500
        return Reply(False, retryable, f"http {status}", text[:200], retry_after_s(headers, self.wall_clock))
