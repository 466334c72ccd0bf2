"""Chat channels, one file per service, registered explicitly (no discovery, no work at import)."""

from __future__ import annotations

from collections.abc import Mapping

from reporter.channels.base import Channel, DeliveryResult, Outcome
from reporter.channels.dingtalk import DingTalkChannel
from reporter.channels.feishu import FeishuChannel
from reporter.channels.slack import SlackChannel
from reporter.channels.webhook import WebhookChannel
from reporter.channels.wecom import WeComChannel
from reporter.settings import ChannelSettings

CHANNELS: dict[str, type[Channel]] = {
    "wecom": WeComChannel,
    "feishu": FeishuChannel,
    "dingtalk": DingTalkChannel,
    "slack": SlackChannel,
    "webhook": WebhookChannel,
}

__all__ = ["CHANNELS", "Channel", "DeliveryResult", "Outcome", "build_channel", "build_channels"]


def build_channel(name: str, settings: ChannelSettings) -> Channel:
    """Instantiate one channel, reading its URL and secret from the environment (or ``*_FILE``)."""
    from oximeter.secrets import read_secret

    url = read_secret(settings.url_env, required=True)
    assert url is not None  # required=True raised otherwise
    secret = read_secret(settings.secret_env) if settings.secret_env else None
    return CHANNELS[settings.type](name, url, secret, timeout_s=settings.timeout_s)


def build_channels(settings: Mapping[str, ChannelSettings]) -> dict[str, Channel]:
    """Every configured channel by name."""
    return {name: build_channel(name, channel) for name, channel in settings.items()}
