"""Alertmanager's webhook payload, version 4: parsed and validated (unknown fields ignored)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analyzer.detection.events import parse_iso
from oximeter.vocabulary import SEVERITIES, Severity, as_severity


class PayloadError(ValueError):
    """The webhook body is not a version-4 payload; the message says which field."""


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise PayloadError(f"{where}: expected an object of strings")
    return dict(value)


def moment_of(text: str) -> datetime | None:
    """RFC 3339 (Alertmanager writes nanoseconds; Python keeps microseconds), None when unreadable."""
    try:
        return parse_iso(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Alert:
    """One alert of a webhook payload (unknown fields ignored)."""

    fingerprint: str
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str
    generator_url: str

    @property
    def name(self) -> str:
        """``alertname`` (or ``unnamed``)."""
        return self.labels.get("alertname", "unnamed")

    @property
    def severity(self) -> Severity:
        """The rule's ``severity`` label; warning when absent or unknown."""
        value = self.labels.get("severity", "")
        return as_severity(value) if value in SEVERITIES else "warning"

    @classmethod
    def parse(cls, data: Any, where: str) -> Alert:
        """Validate one alert object."""
        if not isinstance(data, dict):
            raise PayloadError(f"{where}: expected an object")
        status = data.get("status")
        if status not in ("firing", "resolved"):
            raise PayloadError(f"{where}.status: expected 'firing' or 'resolved'")
        labels = _str_map(data.get("labels"), f"{where}.labels")
        fingerprint = data.get("fingerprint")
        if not isinstance(fingerprint, str) or not fingerprint:
            raise PayloadError(f"{where}.fingerprint: expected a non-empty string")
        starts_at = data.get("startsAt", "")
        if not isinstance(starts_at, str) or (starts_at and moment_of(starts_at) is None):
            raise PayloadError(f"{where}.startsAt: expected an RFC 3339 time")
        ends_at, url = data.get("endsAt", ""), data.get("generatorURL", "")
        if not isinstance(ends_at, str) or not isinstance(url, str):
            raise PayloadError(f"{where}: endsAt and generatorURL must be strings")
        return cls(fingerprint, status, labels, _str_map(data.get("annotations"), f"{where}.annotations"),
                   starts_at, ends_at, url)


@dataclass(frozen=True)
class Payload:
    """A version-4 webhook payload: one Alertmanager group."""

    group_key: str
    status: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    external_url: str
    alerts: tuple[Alert, ...]

    @classmethod
    def parse(cls, data: Any) -> Payload:
        """Validate the body; raise :class:`PayloadError` naming the first bad field."""
        if not isinstance(data, dict):
            raise PayloadError("body: expected a JSON object")
        if str(data.get("version")) != "4":
            raise PayloadError("version: expected \"4\" (Alertmanager webhook payload version 4)")
        alerts = data.get("alerts")
        if not isinstance(alerts, list):
            raise PayloadError("alerts: expected a list")
        group_key = data.get("groupKey", "")
        if not isinstance(group_key, str):
            raise PayloadError("groupKey: expected a string")
        url = data.get("externalURL", "")
        return cls(group_key, str(data.get("status", "")), _str_map(data.get("groupLabels"), "groupLabels"),
                   _str_map(data.get("commonLabels"), "commonLabels"), url if isinstance(url, str) else "",
                   tuple(Alert.parse(a, f"alerts[{i}]") for i, a in enumerate(alerts)))
