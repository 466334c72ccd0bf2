"""Incident change → chat message, and the notifier the analyzer daemon hands its changes to.

One message per change record (opened, severity up, root cause changed, resolved), keyed by the
record's idempotency key, so a change is announced once per channel however often it is flushed.
The tracker keeps each incident within its message budget; what it did not tell (a later change,
new evidence, an Alertmanager alert attached to the incident) is listed in the next message.
The message says which layer and why (the diagnosis sentence with its numbers), shows each
member signal against its baseline, the impact, the runbook hint and links: the layer's Grafana
dashboard over the incident's time range with its node and service variables, and the incident
in the analyzer API. Messages about simulated entities are marked SIMULATION.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from urllib.parse import urlencode

from analyzer.incidents.model import NOT_DECLARED, Change, Incident, TimelineEntry
from oximeter.runbook import runbook_link, runbook_ref
from oximeter.vocabulary import priority
from reporter.held import HeldMessages
from reporter.message import Action, Link, Message, Section
from reporter.outbox import Outbox
from reporter.routing import Router
from reporter.settings import ReporterSettings

# The dashboard that shows each layer best (dashboards/*.dashboard.py uids).
LAYER_DASHBOARD = {
    "infrastructure": "oximeter-gpu-fleet",
    "platform": "oximeter-overview",
    "engine": "oximeter-vllm-engine",
    "dependency": "oximeter-dependencies",
    "scheduling": "oximeter-scheduling",
    "ingress": "oximeter-overview",
}
OVERVIEW_UID = "oximeter-overview"
# The runbook section that says what an incident judged without some inputs missed, and what
# adding Oximeter's gateway gives.
NOT_JUDGED = "not_judged"
# Context either side of the incident on the dashboard, so the onset is not at the edge.
MARGIN = timedelta(minutes=15)
_VERB = {"opened": "OPENED", "severity_up": "SEVERITY UP", "root_cause_changed": "ROOT CAUSE CHANGED",
         "resolved": "RESOLVED"}
_SIM_LABELS = ("simulation", "simulated")
# Timeline entries one message lists (the newest; the rest are counted).
SHOWN_ENTRIES = 8


def fmt_number(value: float | None) -> str:
    """Four significant digits, no exponent for everyday magnitudes; ``-`` for missing."""
    if value is None or not math.isfinite(value):
        return "-"
    if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def dashboard_url(base: str, uid: str, start: datetime, end: datetime, *,
                  nodes: Sequence[str] = (), services: Sequence[str] = ()) -> str:
    """A Grafana ``/d/<uid>`` link over ``[start, end]`` (epoch ms) with node/service variables."""
    params: list[tuple[str, str | int]] = [("from", _ms(start)), ("to", _ms(end))]
    params += [("var-node", n) for n in nodes] + [("var-service", s) for s in services]
    return f"{base.rstrip('/')}/d/{uid}?{urlencode(params)}"


def is_simulated(incident: Incident, configured: bool = False) -> bool:
    """True when the config says the source is simulated or a member's labels say so."""
    if configured:
        return True
    label_sets = [incident.root_cause.labels, *(e.labels for e in incident.evidence)]
    return any(k in _SIM_LABELS and str(v).lower() in ("1", "true", "yes") for labels in label_sets
               for k, v in labels)


def _entity(labels: Sequence[tuple[str, str]]) -> str:
    shown = [f"{k}={v}" for k, v in labels if k not in ("uuid", "pci_bus_id", "gpu_model")]
    return ",".join(shown) or "-"


def _evidence_table(incident: Incident) -> tuple[tuple[str, ...], ...]:
    rows: list[tuple[str, ...]] = [("role", "signal", "entity", "value", "baseline", "× baseline", "onset")]
    for e in sorted(incident.evidence, key=lambda e: (e.role != "cause", e.onset, e.signal)):
        ratio = e.value / e.baseline if e.baseline not in (None, 0) else None
        baseline = fmt_number(e.baseline) + (" (recent)" if e.provisional else "")
        rows.append((e.role, e.signal, _entity(e.labels), fmt_number(e.value), baseline,
                     fmt_number(ratio), f"{e.onset:%H:%M:%S}"))
    return tuple(rows)


def provisional_note(incident: Incident) -> str | None:
    """What the reader must know when a member was judged without a seasonal baseline (the
    first day after install): which, and what stood in for it; None when every baseline was whole."""
    young = sorted({e.signal for e in incident.evidence if e.provisional})
    if not young:
        return None
    return (f"No same-time baseline yet (under a day of history) for {', '.join(young)}: judged "
            "against the recent hour, beside the static limits and the peers.")


def since_last_message(change: Change, incident: Incident) -> list[TimelineEntry]:
    """What the incident's timeline gained between the previous message and this one (changes
    over the message budget, new evidence, attached Alertmanager alerts): shown in this message.

    The n-th told timeline entry is the change with seq n (the tracker numbers only what it tells).
    """
    told = [i for i, t in enumerate(incident.timeline) if t.notified]
    if len(told) < change.seq:
        return []  # an incident stored before entries said whether they were told
    start = told[change.seq - 2] + 1 if change.seq >= 2 else 0
    return [t for t in incident.timeline[start:told[change.seq - 1]] if t.kind not in ("opened", "reopened")]


def render_change(change: Change, incident: Incident, settings: ReporterSettings,
                  now: datetime | None = None) -> Message:
    """The chat message announcing ``change`` of ``incident``."""
    end = incident.resolved_at or now or change.at
    sections = [
        Section("Diagnosis", f"{incident.sentence}\n{change.text}"),
        Section("Evidence against baseline", table=_evidence_table(incident)),
        *([Section("Baseline", note)] if (note := provisional_note(incident)) else []),
        Section("Impact", f"signals: {', '.join(incident.impact_signals) or '-'}; "
                          f"services: {', '.join(incident.services) or '-'}"),
        Section("Runbook", runbook_link(incident.runbook, settings.runbook_url)),
    ]
    if incident.not_judged and change.kind == "opened":  # said once; the record keeps it
        sections.append(Section("Not judged on these inputs", "\n".join(
            [*incident.not_judged, runbook_link(runbook_ref(NOT_JUDGED), settings.runbook_url)])))
    folded = since_last_message(change, incident)
    if folded:
        shown = [f"{t.at:%H:%M:%S}Z {t.kind}: {t.text}" for t in folded[-SHOWN_ENTRIES:]]
        if len(folded) > SHOWN_ENTRIES:
            shown.insert(0, f"… and {len(folded) - SHOWN_ENTRIES} earlier entries")
        sections.append(Section("Since the last message", "\n".join(shown)))
    declared = [c for c in incident.changes if c.source not in NOT_DECLARED]
    if declared:
        sections.append(Section("Declared changes nearby", "\n".join(
            f"{c.at:%Y-%m-%d %H:%M:%S}Z {c.kind}: {c.description}" for c in declared[-5:])))
    fields = [("Layer", incident.layer), ("Rule", incident.rule),
              ("Root cause", f"{incident.root_cause.signal} on {incident.root_cause.entity or '-'}"),
              ("Severity", priority(change.severity)),
              ("Nodes", ", ".join(incident.nodes) or "-"), ("Services", ", ".join(incident.services) or "-"),
              ("Onset", f"{incident.first_onset:%Y-%m-%d %H:%M:%S}Z")]
    if incident.resolved_at is not None:
        minutes = (incident.resolved_at - incident.first_onset).total_seconds() / 60
        fields.append(("Duration", f"{minutes:.0f} min"))
    links = []
    if settings.grafana_url:
        uid = LAYER_DASHBOARD.get(incident.layer, OVERVIEW_UID)
        links.append(Link("Dashboard", dashboard_url(settings.grafana_url, uid, incident.first_onset - MARGIN,
                                                      end + MARGIN, nodes=incident.nodes,
                                                      services=incident.services)))
    links.append(Link("Incident", f"{settings.api_url.rstrip('/')}/incidents/{incident.id}"))
    # Buttons while there is something to acknowledge; chats that take callbacks show them.
    actions = () if change.kind == "resolved" else (
        Action("Acknowledge", "ack", incident.id), Action("Silence 1 h", "silence", incident.id))
    return Message(
        title=f"{_VERB[change.kind]}: {incident.title}", severity=change.severity,
        sections=tuple(sections), fields=tuple(fields), links=tuple(links),
        simulation=is_simulated(incident, settings.simulated), idempotency_key=change.key, actions=actions)


class OutboxNotifier:
    """The analyzer daemon's ``Notifier``: render, route, queue in the outbox (delivery is the worker's)."""

    def __init__(self, outbox: Outbox, settings: ReporterSettings, router: Router | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.outbox, self.settings, self.clock = outbox, settings, clock
        self.router = router or Router.from_settings(settings.routes, outbox.channels)
        self.held = HeldMessages()

    def _enqueue(self, message: Message, channels: list[str]) -> None:
        """Queue in the outbox; while the store cannot write, send at once and hold (``reporter/held.py``)."""
        now = self.clock()
        try:
            self.held.write(self.outbox, now)
            self.outbox.enqueue(message, channels, now=now)
        except sqlite3.Error as exc:
            self.held.hold(message, channels, self.outbox.channels, exc)

    def notify(self, change: Change, incident: Incident | None) -> None:
        """Queue the change's message on the routed channels (idempotent on ``change.key``)."""
        if incident is None:  # the record outlived its incident row: say what we know
            message = Message(f"{_VERB[change.kind]}: incident {change.incident_id}",
                              change.severity, (Section("Change", change.text),),
                              simulation=self.settings.simulated, idempotency_key=change.key)
            channels = self.router.channels_for(severity=change.severity)
        else:
            message = render_change(change, incident, self.settings)
            channels = self.router.channels_for(severity=change.severity, layer=incident.layer,
                                                services=incident.services)
        self._enqueue(message, list(channels))

    def notice(self, key: str, text: str) -> None:
        """An operational notice (e.g. "analyzer cannot see") to every channel, as a warning."""
        message = Message("Oximeter notice", "warning", (Section("Notice", text),),
                          simulation=self.settings.simulated, idempotency_key=key)
        self._enqueue(message, list(self.router.channels_for(severity="warning", layer="platform")))
