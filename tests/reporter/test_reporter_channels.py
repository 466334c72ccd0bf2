"""Every channel through the same receiver and the same table of documented replies."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib

import pytest
from chat_receiver import ChatReceiver, MakeChannel
from pydantic import SecretStr
from sample_messages import alert

from reporter.channels import CHANNELS, Outcome
from reporter.channels.base import TRUNCATED, retry_after_s, split_text
from reporter.channels.dingtalk import dingtalk_sign
from reporter.channels.feishu import feishu_sign
from reporter.channels.wecom import WeComChannel
from reporter.message import Message, Section

SERVICES = sorted(CHANNELS)


def test_pinned_signature_vectors() -> None:
    assert feishu_sign(1599360473, "demo-secret") == "3/MaVZ8JLIy4TUG+7KSFJqvUkTKd+HWY8g+56DZWq8s="
    assert dingtalk_sign(1599360473000, "SECdemo") == "tGWkA5eQOQNCNPDgphtxIoNLO%2B%2FgD8Lcb705KQoRzeY%3D"


# (service, reply kind) -> (outcome, code, retry_after_s)
REPLY_TABLE: dict[tuple[str, str], tuple[Outcome, str, float | None]] = {
    ("wecom", "ok"): (Outcome.SENT, "", None),
    ("wecom", "throttled"): (Outcome.RETRY, "45009", None),
    ("wecom", "permanent"): (Outcome.FAILED, "93000", None),
    ("feishu", "ok"): (Outcome.SENT, "", None),
    ("feishu", "legacy_ok"): (Outcome.SENT, "", None),
    ("feishu", "throttled"): (Outcome.RETRY, "11232", None),
    ("feishu", "permanent"): (Outcome.FAILED, "19021", None),
    ("feishu", "bad_payload"): (Outcome.FAILED, "9499", None),
    ("dingtalk", "ok"): (Outcome.SENT, "", None),
    ("dingtalk", "throttled"): (Outcome.RETRY, "130101", 600.0),
    ("dingtalk", "permanent"): (Outcome.FAILED, "310000", None),
    ("slack", "ok"): (Outcome.SENT, "", None),
    ("slack", "throttled"): (Outcome.THROTTLED, "http 429", 7.0),
    ("slack", "permanent"): (Outcome.FAILED, "http 404", None),
    ("slack", "archived"): (Outcome.FAILED, "http 410", None),
    ("slack", "bad_payload"): (Outcome.FAILED, "http 400", None),
    ("webhook", "ok"): (Outcome.SENT, "", None),
    ("webhook", "throttled"): (Outcome.THROTTLED, "http 429", 7.0),
    ("webhook", "permanent"): (Outcome.FAILED, "http 410", None),
    **{(service, "http_429"): (Outcome.THROTTLED, "http 429", 7.0) for service in SERVICES},
    **{(service, "http_503"): (Outcome.RETRY, "http 503", None) for service in SERVICES},
}


@pytest.mark.parametrize(("service", "kind"), sorted(REPLY_TABLE))
def test_reply_table(receiver: ChatReceiver, make_channel: MakeChannel, service: str, kind: str) -> None:
    receiver.script(service, kind)
    result = make_channel(service).send(alert())
    outcome, code, retry_after = REPLY_TABLE[(service, kind)]
    assert (result.outcome, result.code, result.retry_after_s) == (outcome, code, retry_after)
    assert result.parts_sent == (1 if outcome is Outcome.SENT else 0)
    assert len(receiver.received) == 1
    assert receiver.problems == []
    if outcome is not Outcome.SENT:
        assert result.error.startswith(code)


@pytest.mark.parametrize("service", SERVICES)
def test_receiver_down_is_retryable(service: str) -> None:
    down = ChatReceiver()  # never started: connection refused
    channel = CHANNELS[service]("down", SecretStr(down.url(service)))
    result = channel.send(alert())
    down.stop()
    assert (result.outcome, result.code, result.parts_sent) == (Outcome.RETRY, "connection", 0)


@pytest.mark.parametrize("service", SERVICES)
def test_payload_shape_and_signature_accepted(receiver: ChatReceiver, make_channel: MakeChannel,
                                              service: str) -> None:
    result = make_channel(service).send(alert())
    assert result.outcome is Outcome.SENT
    assert receiver.problems == []
    [request] = receiver.accepted(service)
    raw = request.body.decode()
    assert "SIMULATION" in raw and "P0" in raw
    assert "queue_wait p99 4.2 s" in raw


@pytest.mark.parametrize(("service", "code"), [("feishu", "19021"), ("dingtalk", "310000"),
                                               ("webhook", "http 400")])
def test_wrong_signing_secret_is_refused(receiver: ChatReceiver, make_channel: MakeChannel,
                                         service: str, code: str) -> None:
    result = make_channel(service, secret="not-the-secret").send(alert())
    assert (result.outcome, result.code) == (Outcome.FAILED, code)
    assert any("sign" in problem for problem in receiver.problems)


def test_unsigned_channels_send_no_signature(receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    receiver.secrets.update(feishu=None, dingtalk=None, webhook=None)
    for service in ("feishu", "dingtalk", "webhook"):
        assert make_channel(service, secret=False).send(alert()).outcome is Outcome.SENT
    feishu, dingtalk, webhook = receiver.received
    assert "sign" not in feishu.data and "sign" not in dingtalk.query
    assert "x-oximeter-signature" not in webhook.headers


def _long_message(lines: int) -> Message:
    body = "\n".join(f"第{i}行: GPU 3 温度 87 °C, SM clock 1410→1005 MHz (thermal)" for i in range(lines))
    return alert(sections=(Section("Evidence", body),))


# service -> (lines of body, parts expected); at 40 times the lines every service truncates at 3 parts
LIMIT_TABLE = {
    "wecom": (70, 2),
    "dingtalk": (350, 2),
    "feishu": (350, 2),
}


@pytest.mark.parametrize("service", sorted(LIMIT_TABLE))
@pytest.mark.parametrize("scale", [1, 40])
def test_long_messages_split_then_truncate(receiver: ChatReceiver, make_channel: MakeChannel,
                                           service: str, scale: int) -> None:
    lines, parts = LIMIT_TABLE[service]
    result = make_channel(service).send(_long_message(lines * scale))
    expected_parts = parts if scale == 1 else 3
    assert (result.outcome, result.parts_sent, result.parts_total) == (Outcome.SENT, expected_parts,
                                                                       expected_parts)
    assert receiver.problems == []  # every part within the service's byte limit
    texts = [r.body.decode() for r in receiver.received]
    assert [f"({i}/{expected_parts})" in t for i, t in enumerate(texts, 1)] == [True] * expected_parts
    assert [TRUNCATED in t for t in texts] == [False] * (expected_parts - 1) + [scale > 1]


def test_slack_blocks_are_capped_and_sections_split(receiver: ChatReceiver,
                                                    make_channel: MakeChannel) -> None:
    many = alert(sections=tuple(Section(f"s{i}", "x") for i in range(80)))
    wide = alert(sections=(Section("Evidence", "\n".join("y" * 99 for _ in range(100))),))
    channel = make_channel("slack", clock=iter(range(0, 100, 2)).__next__)
    assert channel.send(many).outcome is Outcome.SENT
    assert channel.send(wide).outcome is Outcome.SENT
    assert receiver.problems == []
    first, second = (json.loads(r.body) for r in receiver.received)
    assert len(first["blocks"]) == 50
    assert first["blocks"][-1]["text"]["text"] == TRUNCATED
    sections = [b for b in second["blocks"] if b["type"] == "section" and "text" in b]
    evidence = [b["text"]["text"] for b in sections if "y" * 99 in b["text"]["text"]]
    assert len(evidence) == 4  # 10 000 characters in sections of at most 3000
    assert all(len(text) <= 3000 for text in evidence)


def _png(size: int) -> bytes:
    """A valid PNG whose file is about ``size`` bytes (incompressible pixels)."""
    width = 256
    rows = max(size // (width * 3), 1)
    pixels = hashlib.shake_256(b"oximeter").digest(rows * (width * 3 + 1))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, rows, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(pixels, 0)) \
        + chunk(b"IEND", b"")


def test_wecom_image_message_and_digest_tables(receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    digest = alert(severity="info", simulation=False, image_png=_png(50_000), sections=(
        Section("Top routes by 504", table=(("route", "504s"), ("/v1/chat/completions", "41")),),))
    big = alert(image_png=_png(WeComChannel.image_limit_bytes + 10))
    channel = make_channel("wecom")
    assert channel.send(digest).outcome is Outcome.SENT
    assert channel.send(big).outcome is Outcome.SENT
    assert receiver.problems == []
    kinds = [r.data["msgtype"] for r in receiver.received]
    assert kinds == ["markdown_v2", "image", "markdown"]
    table = receiver.received[0].data["markdown_v2"]["content"]
    assert "| route | 504s |" in table and "| /v1/chat/completions | 41 |" in table
    image = receiver.received[1].data["image"]
    assert image["md5"] == hashlib.md5(digest.image_png or b"").hexdigest()
    markdown = receiver.received[2].data["markdown"]["content"]
    assert '<font color="warning">' in markdown and "chart omitted" in markdown


def test_client_side_rate_limit_never_sleeps(receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    now = [1000.0]
    channel = make_channel("wecom", clock=lambda: now[0])
    results = []
    for i in range(21):
        now[0] = 1000.0 + i
        results.append(channel.send(alert(key=f"k{i}")))
    assert [r.outcome for r in results] == [Outcome.SENT] * 20 + [Outcome.THROTTLED]
    assert results[-1].retry_after_s == 40.0  # the first send (t=1000) leaves the window at t=1060
    assert len(receiver.received) == 20
    now[0] = 1060.0
    assert channel.send(alert(key="k21")).outcome is Outcome.SENT


def test_split_message_resumes_after_the_parts_already_sent(receiver: ChatReceiver,
                                                           make_channel: MakeChannel) -> None:
    message = _long_message(60 * 40)
    channel = make_channel("wecom")
    receiver.script("wecom", "ok", "throttled")
    first = channel.send(message)
    assert (first.outcome, first.parts_sent, first.parts_total, first.code) == (Outcome.RETRY, 1, 3, "45009")
    second = channel.send(message, start_part=first.parts_sent)
    assert (second.outcome, second.parts_sent) == (Outcome.SENT, 3)
    accepted = [r.data["markdown"]["content"][:6] for r in receiver.accepted("wecom")]
    assert accepted == ["(1/3)\n", "(2/3)\n", "(3/3)\n"]


LINES = "\n".join(f"line-{i:02d}" for i in range(10))


@pytest.mark.parametrize(("text", "limit", "unit", "max_parts", "expected"), [
    ("short", 10, "bytes", 3, ["short"]),
    ("aaaa\nbbbb\ncccc", 12, "chars", 3, ["(1/3)\naaaa", "(2/3)\nbbbb", "(3/3)\ncccc"]),
    (LINES, 30, "chars", 2, ["(1/2)\nline-00\nline-01\nline-02", f"(2/2)\nline-03\n{TRUNCATED}"]),
    (LINES, 200, "chars", 1, [LINES]),
    (LINES, 50, "chars", 1, ["line-00\nline-01\nline-02\nline-03\nline-04\n" + TRUNCATED]),
])
def test_split_text_table(text: str, limit: int, unit: str, max_parts: int, expected: list[str]) -> None:
    chunks = split_text(text, limit, unit, max_parts)
    assert chunks == expected
    assert all(len(c.encode() if unit == "bytes" else c) <= limit for c in chunks)


def test_split_text_counts_utf8_bytes_not_characters() -> None:
    text = "温度" * 1000  # 6000 bytes, 2000 characters, one line
    chunks = split_text(text, 4096, "bytes", 3)
    assert [len(c.encode()) <= 4096 for c in chunks] == [True, True]
    assert "".join(c.split("\n", 1)[1] for c in chunks) == text
    assert split_text(text, 4096, "chars", 3) == [text]


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_s({"Retry-After": "12"}) == 12.0
    assert retry_after_s({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, lambda: 1445412480.0) == 10.0
    assert retry_after_s({}) is None


HEADING = "[SIMULATION] [P0] queue_wait p99 4.2 s on llm@node-1 (scheduling_bottleneck)"
DASHBOARD = "http://127.0.0.1:3000/d/overview?from=1&to=2"
INCIDENT = "http://127.0.0.1:8080/api/incidents/7"


def test_each_service_payload_carries_the_message(receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    for service in SERVICES:
        assert make_channel(service).send(alert()).outcome is Outcome.SENT
    data = {r.service: r.data for r in receiver.accepted()}
    wecom = data["wecom"]["markdown"]["content"].split("\n")
    assert wecom[:3] == [f'<font color="warning">**{HEADING}**</font>',
                         "> SIMULATION: built from simulated targets, not a real fleet",
                         '>layer: <font color="comment">scheduling</font>']
    assert wecom[-1] == f"[Dashboard]({DASHBOARD}) · [Incident]({INCIDENT})"
    card = data["feishu"]["card"]
    assert card["header"] == {"template": "red", "title": {"tag": "plain_text", "content": HEADING}}
    assert [(b["text"]["content"], b["url"]) for b in card["elements"][1]["actions"]] == [
        ("Dashboard", DASHBOARD), ("Incident", INCIDENT)]
    assert card["elements"][0]["text"]["content"].startswith("> SIMULATION")
    ding = data["dingtalk"]
    assert (ding["msgtype"], ding["actionCard"]["title"]) == ("actionCard", HEADING)
    assert ding["actionCard"]["btns"] == [{"title": "Dashboard", "actionURL": DASHBOARD},
                                          {"title": "Incident", "actionURL": INCIDENT}]
    slack = data["slack"]
    assert slack["text"] == HEADING
    assert slack["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": HEADING}}
    assert slack["blocks"][1]["type"] == "context" and len(slack["blocks"][2]["fields"]) == 3
    assert slack["blocks"][-1]["text"]["text"] == f"<{DASHBOARD}|Dashboard> · <{INCIDENT}|Incident>"
    hook = data["webhook"]
    assert (hook["heading"], hook["severity"], hook["priority"], hook["simulation"]) == (
        HEADING, "critical", "P0", True)
