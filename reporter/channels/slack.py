"""Slack incoming webhook: Block Kit blocks with a ``text`` fallback for notifications."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from reporter.channels.base import TRUNCATED, Channel, Reply, retry_after_s, split_text
from reporter.message import CHART_LABEL, SIMULATION_MARKER, Link, Message


def fetchable_by_slack(url: str) -> bool:
    """Whether Slack's servers could fetch ``url``: not a loopback, private or link-local address.

    Slack refuses the whole message (``invalid_blocks``: downloading image failed) when it cannot
    fetch an image block's URL, so a chart on such an address goes as a plain link instead.
    """
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        return True  # a DNS name: taken to be public


class SlackChannel(Channel):
    """``https://hooks.slack.com/services/T/B/X``; success is HTTP 200 with body ``ok``."""

    kind = "slack"
    content_limit = 3000  # characters per section text
    limit_unit = "chars"
    rate_count, rate_window_s = 1, 1.0  # one message per second per webhook
    max_blocks: ClassVar[int] = 50
    header_limit: ClassVar[int] = 150
    field_limit: ClassVar[int] = 2000
    fields_per_section: ClassVar[int] = 10
    image_url_limit: ClassVar[int] = 3000  # image block: image_url, characters

    def bold(self, text: str) -> str:
        return f"*{text}*"

    def link(self, label: str, url: str) -> str:
        return f"<{url}|{label}>"

    @staticmethod
    def _section(text: str) -> dict[str, Any]:
        return {"type": "section", "text": {"type": "mrkdwn", "text": text}}

    def payloads(self, message: Message) -> list[dict[str, Any]]:
        heading = message.heading
        if len(heading) > self.header_limit:  # plain_text header: trimmed, visibly
            heading = heading[: self.header_limit - 1] + "…"
        blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": heading}}]
        if message.simulation:
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": f":warning: *{SIMULATION_MARKER}*: from simulated targets"}]})
        fields = [{"type": "mrkdwn", "text": split_text(f"*{k}*\n{v}", self.field_limit, "chars", 1)[0]}
                  for k, v in message.fields]
        for start in range(0, len(fields), self.fields_per_section):
            blocks.append({"type": "section", "fields": fields[start:start + self.fields_per_section]})
        for section in message.sections:
            lines = [self.bold(section.title), *([section.body] if section.body else []),
                     *(self.render_table(section.table) if section.table else [])]
            for chunk in split_text("\n".join(lines), self.content_limit, "chars", self.max_blocks):
                blocks.append(self._section(chunk))
        # A webhook cannot upload: the image block makes Slack fetch the chart from the analyzer API.
        image: list[dict[str, Any]] = []
        links = list(message.links)
        if (message.image_url and len(message.image_url) <= self.image_url_limit
                and fetchable_by_slack(message.image_url)):
            alt_text = f"chart: {message.title}"[:2000]
            image = [{"type": "image", "image_url": message.image_url, "alt_text": alt_text}]
        elif message.image_url:
            links.append(Link(CHART_LABEL, message.image_url))
        if links:
            text = " · ".join(self.link(link.label, link.url) for link in links)
            blocks.append(self._section(split_text(text, self.content_limit, "chars", 1)[0]))
        # Buttons post back to the app's interactivity URL (the analyzer's /api/chat/slack/actions).
        buttons = [{"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": a.label},
             "action_id": f"oximeter_{a.verb}", "value": a.incident_id} for a in message.actions]}
        ] if message.actions else []
        room = self.max_blocks - len(image) - len(buttons)
        if len(blocks) > room:
            blocks = [*blocks[: room - 1], self._section(TRUNCATED)]
        blocks += buttons + image
        # ``text`` is what notifications and screen readers show when blocks are present.
        return [{"text": message.heading[: self.content_limit], "blocks": blocks}]

    def judge(self, status: int, headers: Mapping[str, str], text: str) -> Reply:
        if status == 200 and text.strip() == "ok":
            return Reply(True, code="ok")
        if status == 429 or status >= 500:
            return Reply(False, True, f"http {status}", text[:200], retry_after_s(headers, self.wall_clock))
        # 400 invalid_payload/no_text, 403 action_prohibited, 404 channel_not_found/no_service, 410 ...
        return Reply(False, False, f"http {status}", text.strip()[:200])
