"""DingTalk (钉钉) custom robot: markdown, or an actionCard when there are links; optionally signed."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar
from urllib.parse import quote_plus

from reporter.channels.base import Channel
from reporter.message import Message


def dingtalk_sign(timestamp_ms: int | str, secret: str) -> str:
    """DingTalk's signature: HMAC-SHA256 keyed by the secret over ``"{timestamp_ms}\\n{secret}"``,
    base64, URL-encoded once (it goes into the query string as is)."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


class DingTalkChannel(Channel):
    """``https://oapi.dingtalk.com/robot/send?access_token=TOKEN``; success is ``errcode`` 0."""

    kind = "dingtalk"
    content_limit = 20_000  # markdown text, UTF-8 bytes
    limit_unit = "bytes"
    rate_count, rate_window_s = 20, 60.0  # 20 per minute per robot
    code_fields = ("errcode",)
    retryable_codes = frozenset({130101, -1})  # send too fast; system busy
    # "More than 20 a minute is throttled for 10 minutes": retrying sooner only extends it.
    code_pause_s: ClassVar[Mapping[int, float]] = MappingProxyType({130101: 600.0})
    links_in_body = False  # actionCard buttons instead

    def render(self, message: Message) -> str:
        text = super().render(message)
        if message.image_url:  # a robot cannot upload: its markdown shows an image by URL
            text += f"\n\n![chart]({message.image_url})"
        return text

    def payload(self, text: str, message: Message, index: int, total: int) -> dict[str, Any]:
        if message.links and index == total - 1:
            return {"msgtype": "actionCard", "actionCard": {
                "title": message.heading, "text": text, "btnOrientation": "0",
                "btns": [{"title": link.label, "actionURL": link.url} for link in message.links]}}
        return {"msgtype": "markdown", "markdown": {"title": message.heading, "text": text}}

    def request(self, body: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
        url, headers, data = super().request(body)
        secret = self.secret_value()
        if secret:
            timestamp = str(int(self.wall_clock() * 1000))  # milliseconds, unlike Feishu
            sign = dingtalk_sign(timestamp, secret)
            url += f"{'&' if '?' in url else '?'}timestamp={timestamp}&sign={sign}"
        return url, headers, data
