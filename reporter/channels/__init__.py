"""Chat channels, one file per service, registered explicitly (no discovery, no work at import)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import SecretStr

from oximeter.errors import SecretMissingError
from oximeter.secrets import read_secret
from reporter.channels.base import Channel, DeliveryResult, Outcome
from reporter.channels.dingtalk import DingTalkChannel
from reporter.channels.feishu import FeishuChannel
from reporter.channels.slack import SlackChannel
from reporter.channels.webhook import WebhookChannel
from reporter.channels.wecom import WeComChannel

if TYPE_CHECKING:  # the settings validate a channel's type against CHANNELS (this module) at run time
    from reporter.settings import ChannelSettings

CHANNELS: dict[str, type[Channel]] = {
    "wecom": WeComChannel,
    "feishu": FeishuChannel,
    "dingtalk": DingTalkChannel,
    "slack": SlackChannel,
    "webhook": WebhookChannel,
}

__all__ = ["CHANNELS", "Channel", "DeliveryResult", "Outcome", "build_channel", "build_channels"]


def _secret(name: str, settings: ChannelSettings, key: str, required: bool) -> SecretStr | None:
    env_name = getattr(settings, key)
    try:
        value = read_secret(env_name, required=required) if env_name else None
    except SecretMissingError as exc:
        raise SecretMissingError([f"reporter.channels.{name}.{key}: {p}" for p in exc.problems]) from None
    if env_name and value is None:
        raise SecretMissingError([f"reporter.channels.{name}.{key}: secret {env_name} is not set "
                                  f"(set {env_name} or {env_name}_FILE)"])
    return value


def build_channel(name: str, settings: ChannelSettings) -> Channel:
    """Instantiate one channel, reading its URL and secret from the environment (or ``*_FILE``).

    A secret the configuration names but the environment lacks is an error naming the key: a
    signing secret that silently went missing would send unsigned requests the service refuses.
    """
    found: dict[str, SecretStr | None] = {}
    problems: list[str] = []
    for key in ("url_env", "secret_env"):
        try:
            found[key] = _secret(name, settings, key, key == "url_env")
        except SecretMissingError as exc:
            problems += exc.problems
    if problems:
        raise SecretMissingError(problems)
    url = found["url_env"]
    assert url is not None  # required=True raised otherwise
    try:
        parts = urlsplit(url.get_secret_value())
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        usable = False
    if not usable:  # the value is a credential: named by its variable, never echoed
        raise SecretMissingError([f"reporter.channels.{name}.url_env: {settings.url_env} is not an "
                                  "http:// or https:// URL with a host"])
    return CHANNELS[settings.type](name, url, found["secret_env"], timeout_s=settings.timeout_s)


def build_channels(settings: Mapping[str, ChannelSettings]) -> dict[str, Channel]:
    """Every configured channel by name; every missing secret is named, not only the first."""
    built, problems = {}, []
    for name, channel in settings.items():
        try:
            built[name] = build_channel(name, channel)
        except SecretMissingError as exc:
            problems += exc.problems
    if problems:
        raise SecretMissingError(problems)
    return built
