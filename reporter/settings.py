"""Settings of the reporter (the ``reporter:`` section): chat channels, outbox, storm control.

Webhook URLs and signing secrets are never written here: each channel names the environment
variable that holds them (or ``NAME_FILE`` with a path), read by ``oximeter.secrets.read_secret``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

EnvName = str

_ENV_PATTERN = r"^[A-Z_][A-Z0-9_]*$"


class ChannelSettings(BaseModel):
    """One chat destination."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["wecom", "feishu", "dingtalk", "slack", "webhook"]
    url_env: EnvName = Field(pattern=_ENV_PATTERN)  # env var holding the webhook URL
    secret_env: EnvName | None = Field(None, pattern=_ENV_PATTERN)  # env var holding the signing secret
    timeout_s: float = Field(10.0, gt=0)


class ReporterSettings(BaseModel):
    """Channels and the persistent outbox."""

    model_config = ConfigDict(extra="forbid")

    store_path: str = "oximeter.db"  # the shared SQLite store (outbox lives under component "reporter")
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    # Storm control: at most storm_cap messages per channel per window, then one summary.
    storm_cap: int = Field(10, ge=1)
    storm_window_s: float = Field(300.0, gt=0)
    # Delivery: exponential back-off from retry_base_s, doubling up to retry_max_s.
    retry_base_s: float = Field(5.0, gt=0)
    retry_max_s: float = Field(600.0, gt=0)
    max_attempts: int = Field(12, ge=1)
    deliver_interval_s: float = Field(1.0, gt=0)
    # A row claimed by a process that is gone (same host) is retried at once; otherwise after this.
    claim_lease_s: float = Field(120.0, gt=0)
