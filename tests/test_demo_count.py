"""The demo's closing line counts what the chat received, by kind."""

from __future__ import annotations

from reporter.sink import SinkMessage
from stack.demo import _chat_count


def _msg(text: str, msgtype: str = "markdown") -> SinkMessage:
    return SinkMessage(msgtype, text, {})


def test_chat_count_by_kind() -> None:
    messages = [_msg("**OPENED: [infrastructure] thermal_throttle**\nGPU hot"),
                _msg("**[FIRING:1] GatewayQueueBacklog (node=n2)**\n..."),
                _msg("**RESOLVED: [infrastructure] thermal_throttle**"),
                _msg("", "image")]
    assert _chat_count(messages) == "4 (1 alert, 1 digest, 2 incident)"
    assert _chat_count([]) == "0"
