"""The incident record and what travels with it: evidence, declared changes, timeline, and the
notify-worthy :class:`Change` (its ``key`` is the outbox's idempotency key).

Plain frozen data with a JSON round-trip (API, CLI ``--json`` and the store's ``data`` column);
how incidents open, change and resolve is analyzer/incidents/lifecycle.py's tracker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from analyzer.detection.events import AnomalyEvent, iso_utc, parse_iso
from analyzer.diagnosis.cause import RootCause
from analyzer.diagnosis.topology import Labels
from oximeter.vocabulary import Severity

ChangeKind = Literal["opened", "severity_up", "root_cause_changed", "resolved"]
NOTIFY_KINDS: tuple[str, ...] = ("opened", "severity_up", "root_cause_changed", "resolved")
# Change-event sources that are evidence rather than declared changes (alerts the relay attached).
NOT_DECLARED = frozenset({"alertmanager"})


def _t(moment: datetime | None) -> str | None:
    return iso_utc(moment)


def _p(text: Any) -> datetime:
    moment = parse_iso(text)
    if moment is None:
        raise ValueError("missing time")
    return moment


@dataclass(frozen=True)
class Evidence:
    """One member signal of an incident against its baseline; ``role`` is cause or impact."""

    signal: str
    labels: Labels
    layer: str
    value: float
    baseline: float | None
    onset: datetime
    detected_at: datetime
    cleared_at: datetime | None
    role: str
    # A leak's projected time until its resource is full (see AnomalyEvent), else None.
    time_to_full_s: float | None = None
    # Its baseline was the recent window alone: no seasonal baseline existed yet (AnomalyEvent).
    provisional: bool = False

    @classmethod
    def of(cls, event: AnomalyEvent, role: str) -> Evidence:
        """From an anomaly event."""
        return cls(event.signal, event.labels, event.layer, event.value, event.baseline, event.onset,
                   event.detected_at, event.cleared_at, role, event.time_to_full_s, event.provisional)

    @property
    def key(self) -> tuple[str, Labels]:
        """Signal and entity: what identifies a member across cycles."""
        return self.signal, self.labels


@dataclass(frozen=True)
class ChangeEvent:
    """A declared change (deploy, config, restart, maintenance) shown beside incidents as evidence."""

    at: datetime
    kind: str
    description: str
    labels: Labels = ()
    source: str = "api"
    id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"id": self.id, "at": _t(self.at), "kind": self.kind, "description": self.description,
                "labels": dict(self.labels), "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ChangeEvent:
        """Inverse of :meth:`to_dict`."""
        return cls(_p(d["at"]), str(d["kind"]), str(d["description"]),
                   AnomalyEvent.labels_from(d.get("labels") or {}), str(d.get("source", "api")), d.get("id"))


@dataclass(frozen=True)
class TimelineEntry:
    """One line of an incident's history; ``notified`` when it went to chat as a message."""

    at: datetime
    kind: str
    text: str
    notified: bool = False


@dataclass(frozen=True)
class Change:
    """A notify-worthy change; ``key`` is the outbox's idempotency key."""

    incident_id: str
    kind: ChangeKind
    seq: int
    at: datetime
    severity: Severity
    text: str

    @property
    def key(self) -> str:
        """``<incident id>:<kind>:<seq>``: stable across restarts."""
        return f"{self.incident_id}:{self.kind}:{self.seq}"


@dataclass(frozen=True)
class Incident:
    """One incident: cause, symptoms, evidence and history."""

    id: str
    title: str
    state: Literal["open", "resolved"]
    severity: Severity
    layer: str
    rule: str
    root_cause: RootCause
    sentence: str
    runbook: str
    evidence: tuple[Evidence, ...]
    impact_signals: tuple[str, ...]
    services: tuple[str, ...]
    nodes: tuple[str, ...]
    keys: tuple[str, ...]  # entity join keys ("node=n1", "service=chat")
    first_onset: datetime
    opened_at: datetime
    updated_at: datetime
    last_active_at: datetime
    resolved_at: datetime | None = None
    seq: int = 0
    changes: tuple[ChangeEvent, ...] = ()
    timeline: tuple[TimelineEntry, ...] = field(default_factory=tuple)
    # What the inputs could not judge (on stock telemetry, the gateway-only signals), one line each
    # in the words `oximeter config check` uses, so the reader knows which rules stayed silent.
    not_judged: tuple[str, ...] = ()

    @property
    def members(self) -> frozenset[tuple[str, Labels]]:
        """The member signals' keys."""
        return frozenset(e.key for e in self.evidence)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (API, CLI ``--json`` and the store's ``data`` column)."""
        return {
            "id": self.id, "title": self.title, "state": self.state, "severity": self.severity,
            "layer": self.layer, "rule": self.rule,
            "root_cause": {"signal": self.root_cause.signal, "labels": dict(self.root_cause.labels)},
            "diagnosis": {"rule": self.rule, "sentence": self.sentence}, "runbook": self.runbook,
            "evidence": [{"signal": e.signal, "labels": dict(e.labels), "layer": e.layer, "value": e.value,
                          "baseline": e.baseline, "onset": _t(e.onset), "detected_at": _t(e.detected_at),
                          "cleared_at": _t(e.cleared_at), "role": e.role,
                          "time_to_full_s": e.time_to_full_s, "provisional": e.provisional}
                         for e in self.evidence],
            "impact": {"signals": list(self.impact_signals), "services": list(self.services)},
            "nodes": list(self.nodes), "keys": list(self.keys),
            "first_onset": _t(self.first_onset), "opened_at": _t(self.opened_at),
            "updated_at": _t(self.updated_at), "last_active_at": _t(self.last_active_at),
            "resolved_at": _t(self.resolved_at), "seq": self.seq,
            "changes": [c.to_dict() for c in self.changes],
            "timeline": [{"at": _t(t.at), "kind": t.kind, "text": t.text, "notified": t.notified}
                         for t in self.timeline],
            "not_judged": list(self.not_judged),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Incident:
        """Inverse of :meth:`to_dict`."""
        lab = AnomalyEvent.labels_from
        return cls(
            id=d["id"], title=d["title"], state=d["state"], severity=d["severity"], layer=d["layer"],
            rule=d["rule"], root_cause=RootCause(d["root_cause"]["signal"], lab(d["root_cause"]["labels"])),
            sentence=d["diagnosis"]["sentence"], runbook=d["runbook"],
            evidence=tuple(Evidence(e["signal"], lab(e["labels"]), e["layer"], float(e["value"]),
                                    e["baseline"], _p(e["onset"]), _p(e["detected_at"]),
                                    parse_iso(e["cleared_at"]), e["role"], e.get("time_to_full_s"),
                                    bool(e.get("provisional", False)))
                           for e in d["evidence"]),
            impact_signals=tuple(d["impact"]["signals"]), services=tuple(d["impact"]["services"]),
            nodes=tuple(d["nodes"]), keys=tuple(d["keys"]), first_onset=_p(d["first_onset"]),
            opened_at=_p(d["opened_at"]), updated_at=_p(d["updated_at"]),
            last_active_at=_p(d["last_active_at"]), resolved_at=parse_iso(d["resolved_at"]),
            seq=int(d["seq"]),
            changes=tuple(ChangeEvent.from_dict(c) for c in d["changes"]),
            timeline=tuple(TimelineEntry(_p(t["at"]), t["kind"], t["text"], bool(t.get("notified", False)))
                           for t in d["timeline"]),
            not_judged=tuple(d.get("not_judged") or ()),
        )
