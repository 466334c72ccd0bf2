"""Scoring a drill: the incidents the analyzer opened against the scenario's truth.

A drill passes when it names its truth within the budget: exactly one incident per expected root
cause, each named (layer, rule and every truth entity label) by a distinct incident, and no more
chat messages than the budget (per incident: opened, one root-cause change, one severity change,
resolved). Replay and live drills are scored alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from analyzer.incidents.lifecycle import Incident


@dataclass(frozen=True)
class Attribution:
    """What the analyzer said about one incident."""

    incident_id: str
    layer: str
    rule: str
    signal: str
    entity: dict[str, str]
    opened_at: str | None
    sentence: str = ""  # the diagnosis as the incident states it


@dataclass(frozen=True)
class DrillScore:
    """One drill's verdict (``--json`` prints these)."""

    scenario: str
    mode: str
    passed: bool
    detected: bool
    time_to_detect_s: float | None
    expected: list[dict[str, Any]]
    attributed: list[Attribution]
    messages: int
    reason: str
    budget: int | None = None  # the most messages its incidents may cause; None: not checked
    # Why the inputs replayed cannot show this fault (stock telemetry lacks what names it); such a
    # drill is listed, not counted as passed or failed.
    cannot_judge: str | None = None
    # Incidents opened during the drill's maintenance windows; None: the drill declares none.
    suppressed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``--json``); ``suppressed`` only where the drill declares maintenance."""
        out = asdict(self)
        if self.suppressed is None:
            del out["suppressed"]
        return out

    @property
    def truth_text(self) -> str:
        """``layer/rule entity`` of every expected root cause, or ``none``."""
        return "; ".join(f"{t['layer']}/{t['rule']} {_entity(t.get('entity') or {})}".strip()
                         for t in self.expected) or "none"

    @property
    def got_text(self) -> str:
        """``layer/rule signal@entity`` of every incident, or ``none``."""
        return "; ".join(f"{a.layer}/{a.rule} {a.signal}@{_entity(a.entity)}"
                         for a in self.attributed) or "none"


def _entity(labels: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k in ("node", "gpu", "link", "service",
                                                                           "dependency", "process", "job"))


def parse_when(text: str | None) -> datetime | None:
    """An ISO timestamp from the API's JSON (``Z`` or an offset), or None."""
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00"))


def _detected(incident: Mapping[str, Any], fault_start: datetime | None) -> datetime | None:
    """When the analyzer showed it: the opening, or for an incident open before the fault, its
    first evidence detected after the fault started."""
    opened = parse_when(incident.get("opened_at"))
    if fault_start is None or opened is None or opened >= fault_start:
        return opened
    later = [w for e in incident.get("evidence", [])
             if (w := parse_when(e.get("detected_at"))) is not None and w >= fault_start]
    return min(later) if later else opened


def expected_truths(truth: Mapping[str, Any], also: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The root causes a scenario should yield: none for a fault-free one, else the truth and its ``also``."""
    if truth["rule"] == "none":
        return []
    return [dict(truth), *(dict(a) for a in also)]


def score(scenario: str, mode: str, expected: list[dict[str, Any]], incidents: Sequence[Mapping[str, Any]],
          fault_start: datetime | None, messages: int, budget: int | None = None) -> DrillScore:
    """Score incidents (the API's JSON shape) against the expected root causes.

    A drill passes when there is exactly one incident per expected root cause, each root cause
    is named (layer, rule and every truth entity label) by a distinct incident, and chat got no
    more than ``budget`` messages (when given).
    """
    attributed = [Attribution(str(i["id"]), str(i["layer"]), str(i["rule"]), str(i["root_cause"]["signal"]),
                              {k: str(v) for k, v in (i["root_cause"].get("labels") or {}).items()},
                              i.get("opened_at"), str((i.get("diagnosis") or {}).get("sentence", "")))
                  for i in incidents]
    unused = list(incidents)
    matched: list[Mapping[str, Any]] = []
    for truth in expected:
        hit = next((i for i in unused if truth_matches(i, truth)), None)
        if hit is not None:
            unused.remove(hit)
            matched.append(hit)
    first = matched[0] if matched else (incidents[0] if incidents else None)
    seen = _detected(first, fault_start) if first is not None else None
    ttd = (seen - fault_start).total_seconds() if seen and fault_start else None
    if not expected:
        reason = f"{len(incidents)} incident(s) on a fault-free run" if incidents else "quiet, as expected"
    elif not incidents:
        reason = "not detected: no incident"
    elif len(matched) < len(expected):
        reason = f"attributed {len(matched)} of {len(expected)} root cause(s) right"
    elif len(incidents) != len(expected):
        reason = f"{len(incidents)} incidents, expected {len(expected)}"
    else:
        reason = "right"
    passed = len(matched) == len(expected) and len(incidents) == len(expected)
    if budget is not None and messages > budget:
        passed, reason = False, f"{messages} messages, over the budget of {budget}" + (
            "" if reason in ("right", "quiet, as expected") else f"; {reason}")
    return DrillScore(scenario, mode, passed, bool(incidents) and bool(expected), ttd, expected, attributed,
                      messages, reason, budget)


def truth_matches(incident: Incident | Mapping[str, Any], truth: Mapping[str, Any]) -> bool:
    """Layer, rule and every truth entity label on the root cause (an Incident or its JSON)."""
    if isinstance(incident, Incident):
        layer, rule, labels = incident.layer, incident.rule, dict(incident.root_cause.labels)
    else:
        layer, rule = str(incident.get("layer")), str(incident.get("rule"))
        labels = {str(k): str(v) for k, v in ((incident.get("root_cause") or {}).get("labels") or {}).items()}
    entity = truth.get("entity") or {}
    return (layer == truth["layer"] and rule == truth["rule"]
            and all(str(labels.get(k)) == str(v) for k, v in entity.items()))
