"""The digest's chart reaches every channel, each in its service's own way, checked by the receiver.

WeCom gets the PNG as an image message (base64 + md5) and the generic webhook in its JSON; Slack
(an image block, or a link where Slack could not fetch it, as this test's loopback API), DingTalk
(markdown image) and Feishu (a button: a card image needs an uploaded ``img_key``) get the analyzer
API's link, and the link is fetched here to prove it serves the PNG.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from chat_receiver import ChatReceiver, MakeChannel, delivered_chart
from relay_harness import ThreadedApp

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect
from reporter import chart_link
from reporter.channels import CHANNELS, Outcome
from reporter.channels.slack import fetchable_by_slack
from reporter.channels.wecom import WeComChannel
from reporter.message import CHART_LABEL, Link, Message, Section
from reporter.outbox import Outbox

T0 = datetime(2025, 11, 30, tzinfo=UTC).timestamp()


@functools.cache
def chart_png() -> bytes:
    """The chart every test delivers, rendered once per worker that runs one of them (not while
    every worker collects: rendering imports matplotlib)."""
    from analyzer.service.limits import limits
    from reporter.chart import chart_limits, render_chart

    return render_chart({"gpu_utilization": [(T0 + 300 * i, 0.4 + 0.01 * i) for i in range(12)]}, "test",
                        chart_limits(limits()))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ThreadedApp]:
    """The analyzer API over a store holding the chart, as the daemon mounts it."""
    conn = connect(tmp_path / "oximeter.db")
    Outbox(conn)  # the reporter's migrations: the chart table
    chart_link.save_chart(conn, chart_png(), "2025-11-30", keep=90)
    app = build_app(IncidentStore(conn), None)
    chart_link.mount(app, conn)
    served = ThreadedApp(app).start()
    yield served
    served.stop()
    conn.close()


def digest(url: str) -> Message:
    return Message("Daily health digest 2025-11-30", "warning", (
        Section("Headroom at the peak", table=(("service", "concurrency"), ("chat", "100 % (n1 14:05)"))),
        Section("N-1 at the day's peak", "**N-1 does not hold**")),
        (("Day", "2025-11-30"),), (Link("Overview dashboard", "http://grafana.example/d/o"),),
        image_png=chart_png(), image_url=url, idempotency_key="digest:2025-11-30")


@pytest.mark.parametrize("service", sorted(CHANNELS))
def test_the_chart_arrives_on_every_channel(receiver: ChatReceiver, make_channel: MakeChannel,
                                            api: ThreadedApp, service: str) -> None:
    url = chart_link.chart_url(api.url, chart_png())
    assert make_channel(service).send(digest(url)).outcome is Outcome.SENT
    assert receiver.problems == []  # every payload within the service's documented format and limits
    found = [c for r in receiver.accepted(service) if (c := delivered_chart(service, r.data)) is not None]
    assert len(found) == 1
    if service in ("wecom", "webhook"):
        assert found == [chart_png()]
        return
    assert found == [url]
    reply = requests.get(url, timeout=10)
    png = chart_png()
    assert (reply.status_code, reply.headers["Content-Type"], reply.content) == (200, "image/png", png)


def test_wecom_links_a_chart_over_its_image_limit(receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    big = chart_png() + b"\0" * WeComChannel.image_limit_bytes
    message = Message("Daily health digest", image_png=big, image_url="http://api.example/api/charts/x.png")
    assert make_channel("wecom").send(message).outcome is Outcome.SENT
    assert [r.data["msgtype"] for r in receiver.accepted("wecom")] == ["markdown"]
    assert "[open it](http://api.example/api/charts/x.png)" in receiver.accepted("wecom")[0].data["markdown"][
        "content"]


@pytest.mark.parametrize(("name", "status"), [
    (hashlib.sha256(b"other").hexdigest() + ".png", 404), ("../oximeter.db", 404), ("abc.png", 400)])
def test_chart_route_refuses_unknown_names(api: ThreadedApp, name: str, status: int) -> None:
    reply = requests.get(f"{api.url}/api/charts/{name}", timeout=10)
    assert reply.status_code == status
    if status == 400:
        assert reply.json() == {"error": "chart name: expected <64 hex digits>.png"}


def test_saving_a_chart_twice_keeps_one_row(tmp_path: Path) -> None:
    conn = connect(tmp_path / "s.db")
    Outbox(conn)
    names = {chart_link.save_chart(conn, chart_png(), "2025-11-30", keep=90) for _ in range(2)}
    assert names == {hashlib.sha256(chart_png()).hexdigest() + ".png"}
    assert conn.execute("SELECT COUNT(*) FROM digest_charts").fetchone()[0] == 1
    assert chart_link.load_chart(conn, names.pop()) == chart_png()
    conn.close()


def test_the_chart_store_keeps_only_the_newest_charts(tmp_path: Path) -> None:
    saved = datetime(2025, 11, 1, 8, tzinfo=UTC).timestamp()
    conn = connect(tmp_path / "s.db")
    Outbox(conn)
    charts = [chart_png() + bytes([day]) for day in range(5)]
    names = [chart_link.save_chart(conn, png, f"2025-11-{day + 1:02d}", keep=3, now=saved + day * 86400.0)
             for day, png in enumerate(charts)]
    assert conn.execute("SELECT COUNT(*) FROM digest_charts").fetchone()[0] == 3
    assert [chart_link.load_chart(conn, name) for name in names] == [None, None, *charts[2:]]
    # Saving a kept chart again neither duplicates it nor evicts another.
    chart_link.save_chart(conn, charts[2], "2025-11-03", keep=3, now=saved + 10 * 86400.0)
    kept = [chart_link.load_chart(conn, name) is not None for name in names]
    assert kept == [False, False, True, True, True]
    with pytest.raises(ValueError):
        chart_link.save_chart(conn, chart_png(), "2025-11-30", keep=0)
    conn.close()


def test_slack_shows_a_public_chart_as_an_image_block(receiver: ChatReceiver,
                                                      make_channel: MakeChannel) -> None:
    url = "https://oximeter.example.com/api/charts/" + chart_link.chart_name(chart_png())
    assert make_channel("slack").send(digest(url)).outcome is Outcome.SENT
    assert receiver.problems == []
    (sent,) = receiver.accepted("slack")
    assert sent.data["blocks"][-1] == {"type": "image", "image_url": url,
                                       "alt_text": "chart: Daily health digest 2025-11-30"}
    assert CHART_LABEL not in json.dumps(sent.data)  # shown, so not linked as well


@pytest.mark.parametrize(("url", "fetchable"), [
    ("http://127.0.0.1:9471/api/charts/a.png", False), ("http://localhost:9471/a.png", False),
    ("http://10.1.2.3/a.png", False), ("http://192.168.0.5/a.png", False), ("http://[::1]:9471/a.png", False),
    ("http://169.254.1.1/a.png", False), ("https://8.8.8.8/a.png", True),
    ("https://oximeter.example.com/a.png", True),
])
def test_slack_links_a_chart_it_could_not_fetch(url: str, fetchable: bool) -> None:
    # Slack refuses a whole message whose image it cannot download, so such a chart is only linked.
    assert fetchable_by_slack(url) is fetchable
