"""Settings of the reporter (the ``reporter:`` section): chat channels, outbox, storm control.

Webhook URLs and signing secrets are never written here: each channel names the environment
variable that holds them (or ``NAME_FILE`` with a path), read by ``oximeter.secrets.read_secret``.
"""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

EnvName = str

_ENV_PATTERN = r"^[A-Z_][A-Z0-9_]*$"


class ChannelSettings(BaseModel):
    """One chat destination."""

    model_config = ConfigDict(extra="forbid")

    type: str  # a registered channel (reporter/channels/__init__.py): wecom, feishu, dingtalk, slack, webhook
    url_env: EnvName = Field(pattern=_ENV_PATTERN)  # env var holding the webhook URL
    secret_env: EnvName | None = Field(None, pattern=_ENV_PATTERN)  # env var holding the signing secret
    # Seconds one HTTP post to the chat service may take.
    timeout_s: float = Field(10.0, gt=0)

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str) -> str:
        # The registry imports the channels (and this module): read when a channel is configured.
        from reporter.channels import CHANNELS

        if value not in CHANNELS:
            raise ValueError(f"unknown channel type {value!r} (known: {', '.join(sorted(CHANNELS))})")
        return value


class RouteSettings(BaseModel):
    """One routing rule: messages whose labels all match go to ``channels``."""

    model_config = ConfigDict(extra="forbid")

    # Keys severity, layer, service; a value may be one string or a list of alternatives.
    match: dict[Literal["severity", "layer", "service"], str | list[str]] = Field(default_factory=dict)
    # Names of the channels (keys of reporter.channels) that matching messages go to.
    channels: list[str] = Field(min_length=1)


# Keys the digest no longer reads, and what to write instead.
RETIRED_DIGEST_KEYS = {
    "slo_ttft_p99_s": "the digest's budgets come from the slos: section; set a time-to-first-token "
                      "objective there (slos.objectives[].latency: [{indicator: ttft, threshold_s: 1.0, "
                      "target: 0.99}]) and delete this key",
    "slo_availability": "the digest's budgets come from the slos: section; set "
                        "slos.objectives[].availability.target there and delete this key",
}


class DigestSettings(BaseModel):
    """The daily health digest and the numbers it colours."""

    model_config = ConfigDict(extra="forbid")

    # Base URL of the store the digest queries for yesterday's numbers.
    prometheus_url: str = "http://127.0.0.1:9090"
    # Name of the env var (or ``<NAME>_FILE``) holding Prometheus's bearer token; never the token itself.
    prometheus_bearer_token_env: str | None = None
    # Name of the env var (or ``<NAME>_FILE``) holding the X-Scope-OrgID tenant (Mimir, Cortex).
    prometheus_tenant_env: str | None = None
    prometheus_tls_verify: bool | str = True  # True, False, or a CA bundle path
    time: str = Field("08:00", pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")  # local send time
    timezone: str | None = None  # IANA name; None = the host's local zone
    channels: list[str] | None = None  # None = every channel
    queue_length_red: float = Field(50.0, ge=0)  # yesterday's max queue length above this is red
    gpu_spread_yellow: float = Field(0.30, ge=0)  # fleet GPU-utilisation stddev above this is yellow
    # Seconds one of the digest's queries may take.
    query_timeout_s: float = Field(30.0, gt=0)
    # How many of the noisiest signals (most anomalous minutes yesterday) the digest lists.
    top_signals: int = Field(5, ge=1)
    # Charts kept for the links in sent digests (the newest ones; older links then answer 404).
    keep_charts: int = Field(90, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _retired_objectives(cls, data: object) -> object:
        # The digest once had objectives of its own; they are the ``slos:`` section's now, which the
        # alerts and the analyzer read too. Refused rather than ignored: a quiet no-op would leave
        # the digest judging against objectives its reader did not write.
        retired = sorted(RETIRED_DIGEST_KEYS.keys() & data.keys()) if isinstance(data, dict) else []
        if retired:
            raise ValueError("; ".join(f"{key} is no longer read: {RETIRED_DIGEST_KEYS[key]}"
                                       for key in retired))
        return data

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError("unknown time zone (expected an IANA name such as Asia/Shanghai)") from None
        return value


class ReporterSettings(BaseModel):
    """Channels and the persistent outbox."""

    model_config = ConfigDict(extra="forbid")

    # the shared store (outbox lives under component "reporter"): a SQLite file, or a postgresql:// URL
    store_path: str = "oximeter.db"
    # Chat destinations by name; routes and digest.channels refer to these names.
    channels: dict[str, ChannelSettings] = Field(default_factory=dict)
    # Storm control: at most storm_cap messages per channel per window, then one summary.
    storm_cap: int = Field(10, ge=1)
    # Seconds of the storm-control window (see storm_cap).
    storm_window_s: float = Field(300.0, gt=0)
    # Delivery: exponential back-off from retry_base_s, doubling up to retry_max_s.
    retry_base_s: float = Field(5.0, gt=0)
    # Seconds: the longest back-off between two delivery attempts (a rate limit may ask for longer).
    retry_max_s: float = Field(600.0, gt=0)
    # Delivery attempts before a message is marked failed (rate-limit waits do not count).
    max_attempts: int = Field(12, ge=1)
    # Seconds between the delivery worker's looks at the outbox for messages due.
    deliver_interval_s: float = Field(1.0, gt=0)
    # A row claimed by a process that is gone (same host) is retried at once; otherwise after this.
    claim_lease_s: float = Field(120.0, gt=0)
    # Incident alerts: routing (first-class default: every channel), links and the SIMULATION mark.
    routes: list[RouteSettings] = Field(default_factory=list)
    grafana_url: str | None = None  # e.g. https://grafana.example.com (dashboard links)
    api_url: str = "http://127.0.0.1:9471"  # the analyzer API as chat readers reach it
    # Where chat readers open docs/runbook.md (e.g. https://git.example.com/oximeter/blob/main/docs/runbook.md);
    # unset, incident and alert messages show the shipped path docs/runbook.md#<section>.
    runbook_url: str | None = Field(None, pattern=r"^https?://[^#]+$")
    simulated: bool = False  # the whole source is the simulator: mark every message SIMULATION
    # Tell chat when Alertmanager's Watchdog has not arrived for this long (0 disables).
    watchdog_timeout_s: float = Field(600.0, ge=0)
    # The daily health digest.
    digest: DigestSettings = Field(default_factory=DigestSettings)

    @model_validator(mode="after")
    def _channels_exist(self) -> ReporterSettings:
        named = [c for r in self.routes for c in r.channels] + list(self.digest.channels or ())
        unknown = sorted(set(named) - set(self.channels))
        if unknown:
            raise ValueError(f"routes/digest name unconfigured channel(s): {', '.join(unknown)}")
        return self
