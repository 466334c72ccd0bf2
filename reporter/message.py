"""A rendered, channel-neutral chat message: what every channel turns into its own payload.

The outbox stores messages as JSON (``to_json``/``from_json``), so a message queued before a
restart is delivered unchanged after it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from oximeter.vocabulary import Severity, as_severity, priority

SIMULATION_MARKER = "SIMULATION"
CHART_LABEL = "Chart (PNG)"  # the link to ``Message.image_url`` where a channel shows no image


@dataclass(frozen=True)
class Section:
    """One titled block of the body: markdown-ish text and an optional table (first row = header)."""

    title: str
    body: str = ""
    table: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Link:
    """A labelled URL (dashboard, incident API, runbook)."""

    label: str
    url: str


@dataclass(frozen=True)
class Action:
    """A button that acts on the incident a message is about (``verb``: ``ack`` or ``silence``),
    where the channel can take the press back (``reporter/callbacks.py``)."""

    label: str
    verb: str
    incident_id: str


@dataclass(frozen=True)
class Message:
    """A channel-neutral notification.

    ``idempotency_key`` names the change it reports (e.g. ``incident-42:opened:1``); the outbox
    keeps it unique per channel so a change is announced once however often it is enqueued.
    """

    title: str
    severity: Severity = "info"
    sections: tuple[Section, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    links: tuple[Link, ...] = ()
    image_png: bytes | None = field(default=None, repr=False)
    # Where the analyzer API serves ``image_png``, for channels that show images only by URL.
    image_url: str | None = None
    simulation: bool = False
    idempotency_key: str = ""
    actions: tuple[Action, ...] = ()

    def __post_init__(self) -> None:
        if not self.title.strip():
            raise ValueError("message title is empty")
        object.__setattr__(self, "severity", as_severity(self.severity))

    @property
    def heading(self) -> str:
        """The title line every channel shows: ``[SIMULATION] [P0] title``."""
        prefix = f"[{SIMULATION_MARKER}] " if self.simulation else ""
        return f"{prefix}[{priority(self.severity)}] {self.title}"

    @property
    def has_tables(self) -> bool:
        """True when some section carries a table (the digest), which some channels render apart."""
        return any(section.table for section in self.sections)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the image as base64)."""
        return {
            "title": self.title,
            "severity": self.severity,
            "priority": priority(self.severity),
            "sections": [
                {"title": s.title, "body": s.body, "table": [list(row) for row in s.table]}
                for s in self.sections
            ],
            "fields": [[k, v] for k, v in self.fields],
            "links": [{"label": link.label, "url": link.url} for link in self.links],
            "image_png_base64": base64.b64encode(self.image_png).decode() if self.image_png else None,
            "image_url": self.image_url,
            "simulation": self.simulation,
            "idempotency_key": self.idempotency_key,
            # Only where there are some: a message without buttons reads as it always has.
            **({"actions": [{"label": a.label, "verb": a.verb, "incident_id": a.incident_id}
                            for a in self.actions]} if self.actions else {}),
        }

    def to_json(self) -> str:
        """Compact JSON, UTF-8 text kept as is."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """Inverse of ``to_dict``."""
        image = data.get("image_png_base64")
        return cls(
            title=data["title"],
            severity=as_severity(data.get("severity", "info")),
            sections=tuple(
                Section(s["title"], s.get("body", ""), tuple(tuple(row) for row in s.get("table", ())))
                for s in data.get("sections", ())
            ),
            fields=tuple((str(k), str(v)) for k, v in data.get("fields", ())),
            links=tuple(Link(link["label"], link["url"]) for link in data.get("links", ())),
            image_png=base64.b64decode(image) if image else None,
            image_url=data.get("image_url"),
            simulation=bool(data.get("simulation", False)),
            idempotency_key=data.get("idempotency_key", ""),
            actions=tuple(Action(str(a["label"]), str(a["verb"]), str(a["incident_id"]))
                          for a in data.get("actions", ())),
        )

    @classmethod
    def from_json(cls, text: str) -> Message:
        """Inverse of ``to_json``."""
        return cls.from_dict(json.loads(text))
