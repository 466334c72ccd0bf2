"""WeCom (企业微信) group robot: markdown with colour for alerts, markdown_v2 tables, image message."""

from __future__ import annotations

import base64
import hashlib
from typing import Any, ClassVar

from oximeter.vocabulary import Severity
from reporter.channels.base import Channel
from reporter.message import Message


class WeComChannel(Channel):
    """``https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY``; success is ``errcode`` 0."""

    kind = "wecom"
    content_limit = 4096  # markdown and markdown_v2 content, UTF-8 bytes (text messages: 2048)
    limit_unit = "bytes"
    rate_count, rate_window_s = 20, 60.0  # 20 messages per minute per robot
    code_fields = ("errcode",)
    retryable_codes = frozenset({45009, -1})  # api freq out of limit; system busy
    image_limit_bytes: ClassVar[int] = 2 * 1024 * 1024  # before base64

    # <font color> takes only these three: warning (orange-red), info (green), comment (grey).
    _colour: ClassVar[dict[Severity, str]] = {
        "critical": "warning", "warning": "comment", "info": "info",
    }

    def render_heading(self, message: Message) -> str:
        if message.has_tables:  # markdown_v2 has tables but no <font> colour
            return super().render_heading(message)
        return f'<font color="{self._colour[message.severity]}">{self.bold(message.heading)}</font>'

    def render_field(self, key: str, value: str, message: Message) -> str:
        if message.has_tables:
            return super().render_field(key, value, message)
        return f'>{key}: <font color="comment">{value}</font>'

    def render_table(self, rows: tuple[tuple[str, ...], ...]) -> list[str]:
        header, *body = rows
        return [
            "| " + " | ".join(header) + " |",
            "|" + " :--- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in body),
        ]

    def render(self, message: Message) -> str:
        text = super().render(message)
        if message.image_png and len(message.image_png) > self.image_limit_bytes:
            if message.image_url:
                link = self.link("open it", message.image_url)
                text += f"\n(chart larger than WeCom's 2 MB image limit: {link})"
            else:
                text += "\n(chart omitted: larger than WeCom's 2 MB image limit)"
        return text

    def payload(self, text: str, message: Message, index: int, total: int) -> dict[str, Any]:
        msgtype = "markdown_v2" if message.has_tables else "markdown"
        return {"msgtype": msgtype, msgtype: {"content": text}}

    def extra_payloads(self, message: Message) -> list[dict[str, Any]]:
        image = message.image_png
        if not image or len(image) > self.image_limit_bytes:
            return []
        # md5 of the raw bytes, not of the base64 text.
        encoded = base64.b64encode(image).decode()
        return [{"msgtype": "image", "image": {"base64": encoded, "md5": hashlib.md5(image).hexdigest()}}]
