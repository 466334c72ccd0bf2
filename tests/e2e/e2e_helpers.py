"""What the end-to-end tests read from the shared stack: the analyzer API and the chat sink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from reporter.sink import ChatSink, SinkMessage
from stack.local import Stack
from stack.procs import ManagedProcess

THERMAL_ALERT = "GpuTemperatureHigh"
THERMAL_S = 40.0  # opens within seconds (a scaled minute of persistence); Alertmanager relays it by ~20 s


@dataclass(frozen=True)
class Faults:
    """The faults ``conftest.py`` injected together, when, and the incidents that existed before."""

    api: str
    before: set[str]
    t0: float
    stall_id: str
    victoria_before: set[str]


@dataclass(frozen=True)
class Victoria:
    """The second analyzer, reading VictoriaMetrics: its API, the store's URL, its chat sink, and how
    to stop both once its test is done (reading every signal as raw PromQL, each second, it costs a
    fifth of a core that the tests after it need)."""

    api: str
    url: str
    sink: ChatSink
    stop: Callable[[], None]


@dataclass(frozen=True)
class VictoriaStore:
    """VictoriaMetrics scraping the shared stack: its URL, work folder and processes."""

    url: str
    work: Path
    started: list[ManagedProcess]


def analyzer_url(stack: Stack) -> str:
    """The shared stack's analyzer API."""
    assert stack.endpoints is not None
    return stack.endpoints.addons["analyzer"]


def incidents(api: str) -> list[dict[str, Any]]:
    """Every incident the analyzer has stored (open and resolved)."""
    reply = requests.get(f"{api}/api/incidents", timeout=10)
    reply.raise_for_status()
    return list(reply.json()["incidents"])


def incident(api: str, incident_id: str) -> dict[str, Any]:
    """One incident with its changes and notifications."""
    reply = requests.get(f"{api}/api/incidents/{incident_id}", timeout=10)
    reply.raise_for_status()
    found: dict[str, Any] = reply.json()
    return found


def new_incidents(api: str, before: set[str], **match: str) -> list[dict[str, Any]]:
    """Incidents not in ``before`` whose fields (``layer``, ``state``) and root-cause labels match."""
    out = []
    for inc in incidents(api):
        labels = inc["root_cause"]["labels"]
        fields = {**labels, "layer": inc["layer"], "state": inc["state"]}
        if inc["id"] not in before and all(fields.get(k) == v for k, v in match.items()):
            out.append(inc)
    return out


def headline(message: SinkMessage) -> str:
    """The first line of a chat message (its heading)."""
    return message.text.strip().splitlines()[0] if message.text.strip() else ""


def kind_of(message: SinkMessage) -> str:
    """``incident``, ``alert`` (forwarded by the relay), ``digest`` or ``image`` (the digest's chart)."""
    head = headline(message)
    if message.msgtype == "image":
        return "image"
    if "Daily health digest" in head:
        return "digest"
    if "[FIRING:" in head or "[RESOLVED:" in head:
        return "alert"
    return "incident"


def incident_messages(messages: list[SinkMessage]) -> list[str]:
    """The headings of incident messages (opened, severity up, root cause changed, resolved)."""
    return [headline(m) for m in messages if kind_of(m) == "incident"]
