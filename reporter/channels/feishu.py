"""Feishu / Lark custom bot: an interactive card, optionally signed."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any, ClassVar

from oximeter.vocabulary import Severity
from reporter.channels.base import Channel
from reporter.message import CHART_LABEL, Link, Message


def feishu_sign(timestamp_s: int | str, secret: str) -> str:
    """Feishu's signature: HMAC-SHA256 keyed by ``"{timestamp}\\n{secret}"`` over an empty message, base64.

    Unlike DingTalk, the key is the string-to-sign and the message is empty.
    """
    key = f"{timestamp_s}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class FeishuChannel(Channel):
    """``https://open.feishu.cn/open-apis/bot/v2/hook/TOKEN``; success: ``code`` (legacy ``StatusCode``) 0."""

    kind = "feishu"
    content_limit = 18_000
    limit_unit = "bytes"
    request_limit_bytes = 20_000  # "request body must not exceed 20 KB" (else code 9499)
    rate_count, rate_window_s = 5, 1.0  # 100 per minute and 5 per second per bot
    code_fields = ("code", "StatusCode")
    retryable_codes = frozenset({11232})  # frequency limited (returned with HTTP 400)
    heading_in_body = False  # the card header carries it
    links_in_body = False  # buttons instead

    _template: ClassVar[dict[Severity, str]] = {
        "critical": "red", "warning": "orange", "info": "blue",
    }

    def payload(self, text: str, message: Message, index: int, total: int) -> dict[str, Any]:
        elements: list[dict[str, Any]] = [{"tag": "div", "text": {"tag": "lark_md", "content": text}}]
        # A card's image needs an image_key, which only an app (not a custom bot) can upload: the
        # chart goes as a button opening the analyzer API's copy.
        links = [*message.links, *([Link(CHART_LABEL, message.image_url)] if message.image_url else [])]
        if links and index == total - 1:
            elements.append({"tag": "action", "actions": [
                {"tag": "button", "text": {"tag": "plain_text", "content": link.label}, "url": link.url,
                 "type": "default"} for link in links]})
        body: dict[str, Any] = {"msg_type": "interactive", "card": {
            "config": {"wide_screen_mode": True},
            "header": {"template": self._template[message.severity],
                       "title": {"tag": "plain_text", "content": message.heading}},
            "elements": elements,
        }}
        secret = self.secret_value()
        if secret:
            timestamp = str(int(self.wall_clock()))  # seconds; must be within an hour of Feishu's clock
            body["timestamp"] = timestamp
            body["sign"] = feishu_sign(timestamp, secret)
        return body
