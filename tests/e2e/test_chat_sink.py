"""The demo's chat sink (``reporter/sink.py``) accepts what WeCom accepts and refuses the rest."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from pydantic import SecretStr

from reporter.channels.wecom import WeComChannel
from reporter.message import Message, Section
from reporter.sink import ChatSink, SinkMessage


@pytest.fixture
def sink() -> Iterator[ChatSink]:
    """A started sink, stopped at teardown."""
    with ChatSink() as server:
        yield server


def test_the_wecom_channel_is_accepted_and_shown(sink: ChatSink) -> None:
    shown: list[SinkMessage] = []
    sink.on_message = shown.append
    message = Message(title="GPU n1/1 at 91 °C", severity="warning",
                      fields=(("layer", "infrastructure"),),
                      sections=(Section("Diagnosis", "thermal_throttle"),), simulation=True,
                      idempotency_key="inc-1:opened:1")
    result = WeComChannel("demo", SecretStr(sink.url)).send(message)
    assert (result.outcome.value, result.parts_sent, sink.problems) == ("sent", 1, [])
    assert shown == sink.messages and len(shown) == 1
    assert shown[0].msgtype == "markdown" and "91 °C" in shown[0].text and "thermal_throttle" in shown[0].text


@pytest.mark.parametrize(("body", "key_ok", "errcode", "problem"), [
    ({"msgtype": "markdown", "markdown": {"content": "ok"}}, True, 0, None),
    ({"msgtype": "markdown", "markdown": {"content": "ok"}}, False, 93000, None),
    ({"msgtype": "markdown", "markdown": {"content": "x" * 4097}}, True, 40058,
     "wecom: markdown.content is 4097 bytes > 4096"),
    ({"msgtype": "text", "text": {"content": "é" * 1025}}, True, 40058,
     "wecom: text.content is 2050 bytes > 2048"),
    ({"msgtype": "markdown", "markdown": {}}, True, 40058, "wecom: markdown.content missing"),
    ({"msgtype": "news"}, True, 40058, "wecom: unknown msgtype 'news'"),
    ({"msgtype": "image", "image": {"base64": "iVBORw0KGgo=", "md5": "0"}}, True, 40058,
     "wecom: image.md5 is not the md5 of the raw image"),
    ([], True, 40058, "wecom: body is not a JSON object"),
])
def test_replies_as_wecom_does(sink: ChatSink, body: object, key_ok: bool, errcode: int,
                               problem: str | None) -> None:
    url = sink.url if key_ok else sink.url.replace(sink.key, "wrong")
    reply = requests.post(url, data=json.dumps(body), timeout=10)
    assert (reply.status_code, reply.json()["errcode"]) == (200, errcode)
    assert sink.problems == ([problem] if problem else [])
    assert len(sink.messages) == (1 if errcode == 0 else 0)
