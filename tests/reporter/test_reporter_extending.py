"""A chat channel is one file plus one registry line: a toy channel, registered in CHANNELS alone,
is accepted by the configuration, built with its secret from the environment, and delivers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from sample_messages import alert

from oximeter.config import parse_config
from oximeter.errors import ConfigError
from reporter.channels import CHANNELS, Outcome, build_channels
from reporter.channels.base import Channel, Reply


class ToyChannel(Channel):
    """What a new channel's file would hold: its name, limits and request body, and how to read
    the service's reply (here the POST is kept in memory instead of sent)."""

    kind = "toy"
    content_limit = 200
    limit_unit = "chars"
    posted: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def payload(self, text: str, message: Any, index: int, total: int) -> dict[str, Any]:
        return {"text": text, "part": index + 1, "of": total}

    def post(self, body: dict[str, Any]) -> Reply:
        url, _, _ = self.request(body)
        self.posted.append((url, body))
        return self.judge(200, {}, '{"errcode": 0}')

    def judge(self, status: int, headers: Mapping[str, str], text: str) -> Reply:
        return Reply(True, code="0") if status == 200 else Reply(False, status >= 500, f"http {status}")


TOY_CONFIG = {"reporter": {"channels": {"pager": {"type": "toy", "url_env": "OXI_TOY_URL"}}}}


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(CHANNELS, "toy", ToyChannel)  # the one registry line
    monkeypatch.setattr(ToyChannel, "posted", [])


@pytest.mark.usefixtures("registered")
def test_a_registered_channel_is_configured_built_and_delivers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OXI_TOY_URL", "https://toy.example/hook/tok-123")
    config = parse_config(TOY_CONFIG)
    [(name, channel)] = build_channels(config.reporter.channels).items()
    assert (name, type(channel)) == ("pager", ToyChannel)
    message = alert()
    result = channel.send(message)
    assert (result.outcome, result.parts_sent) == (Outcome.SENT, result.parts_total)
    assert len(ToyChannel.posted) == result.parts_total >= 2  # the alert is longer than 200 chars
    url, first = ToyChannel.posted[0]
    assert url == "https://toy.example/hook/tok-123"
    assert message.heading.split()[0] in first["text"] and len(first["text"]) <= ToyChannel.content_limit


def test_unregistered_the_type_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(TOY_CONFIG, "o.yaml")
    assert "o.yaml: reporter.channels.pager.type" in str(caught.value)
    assert "unknown channel type 'toy'" in str(caught.value)
