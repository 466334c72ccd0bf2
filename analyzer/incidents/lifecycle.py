"""The incident lifecycle: open, update, resolve, re-open (pure; the caller passes ``now``).

:func:`findings` correlates one cycle's anomaly events and diagnoses each group;
:class:`IncidentTracker` turns findings into incidents and notify-worthy :class:`Change` records
with a stable idempotency key (``<incident id>:<kind>:<seq>``) that the outbox de-duplicates on;
the store persists which were emitted, so a restarted daemon rebuilds the same tracker and
produces no second "opened". The records themselves live in analyzer/incidents/model.py and are
re-exported here, where the daemon, store, API and reporter import them from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Case, Diagnosis, RootCause, Snapshot
from analyzer.diagnosis.correlate import Group, correlate
from analyzer.diagnosis.opening import may_open, opens_incident
from analyzer.diagnosis.rules import SERVICE_WIDE_RULES, diagnose
from analyzer.diagnosis.topology import Labels, Topology
from analyzer.incidents.model import (
    NOT_DECLARED,
    NOTIFY_KINDS,
    Change,
    ChangeEvent,
    ChangeKind,
    Evidence,
    Incident,
    TimelineEntry,
)
from analyzer.incidents.settings import IncidentSettings
from analyzer.incidents.stability import Pending, announced, choose, held
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.spec import SignalSpec
from oximeter.vocabulary import SEVERITY_RANK

__all__ = ["NOTIFY_KINDS", "NOT_DECLARED", "Change", "ChangeEvent", "ChangeKind", "Evidence", "Finding",
           "Incident", "IncidentSettings", "IncidentTracker", "TimelineEntry", "findings"]



def _concerns(incident: Incident, labels: Mapping[str, str]) -> bool:
    """Whether a change event belongs beside ``incident``: the incident it names (an alert the relay
    attached), else its node, else its service; an event without labels concerns every incident.
    The narrowest label decides: a change on node n2 of a service that also runs on n1 is n2's."""
    if "incident" in labels:
        return labels["incident"] == incident.id
    if "node" in labels:
        return labels["node"] in incident.nodes
    if "service" in labels:
        return labels["service"] in incident.services
    return True


def _one_shortage(incident: Incident, finding: Finding) -> bool:
    """Whether ``finding`` names the service-wide cause ``incident`` already names (a capacity
    shortage of the same service, seen on another of its nodes)."""
    rule = finding.diagnosis.rule
    shared = set(incident.services) & set(finding.services)
    return rule in SERVICE_WIDE_RULES and incident.rule == rule and bool(shared)


@dataclass(frozen=True)
class Finding:
    """A correlated group with its diagnosis and the services it touches."""

    group: Group
    diagnosis: Diagnosis
    services: tuple[str, ...]
    # False: evidence for an incident already open, too weak to open one (opening.may_open).
    may_open: bool = True


def findings(events: Sequence[AnomalyEvent], topology: Topology, *, now: datetime,
             snapshot: Snapshot | None = None, settings: IncidentSettings | None = None,
             catalogue: Mapping[str, SignalSpec] = CATALOGUE,
             unreadable: frozenset[str] = frozenset()) -> list[Finding]:
    """Correlate ``events`` and diagnose each group (the pure half of one analyzer cycle).

    ``catalogue``: the signals in use (``AnalyzerSettings.catalogue()``, config overrides applied);
    its ``opens_incident`` says which signals are context only.
    """
    settings = settings or IncidentSettings()
    out = []
    for group in correlate(events, topology, now=now, lookback=timedelta(seconds=settings.lookback_s)):
        if not any(opens_incident(e.signal, catalogue) for e in group.events):
            continue  # context alone (end-to-end p99): evidence for an incident, never one by itself
        case = Case(group.events, group.nodes, snapshot or {}, settings.thresholds(), catalogue, unreadable)
        services = sorted({s for e in group.events for s in topology.services_of(e.labels)})
        diagnosis = diagnose(case)
        out.append(Finding(group, diagnosis, tuple(services), may_open(case, diagnosis)))
    return out


def _key_strings(group: Group) -> tuple[str, ...]:
    return tuple(sorted(f"{k}={v}" for k, v in group.keys))


def _entity_text(labels: Labels) -> str:
    return RootCause("", labels).entity


class IncidentTracker:
    """Holds open (and recently resolved) incidents and turns each cycle's findings into changes."""

    def __init__(self, settings: IncidentSettings | None = None, incidents: Iterable[Incident] = (),
                 not_judged: Sequence[str] = ()) -> None:
        self.settings = settings or IncidentSettings()
        # What these inputs cannot judge (AnalyzerSettings.not_judged): said by every new incident.
        self.not_judged = tuple(not_judged)
        self._incidents: dict[str, Incident] = {i.id: i for i in incidents}
        # Stronger root-cause candidates waiting out the dwell time, per open incident (a restart
        # starts their wait again, which only delays a change).
        self._pending: dict[str, Pending] = {}

    @property
    def incidents(self) -> list[Incident]:
        """Every incident the tracker holds, by first onset."""
        return sorted(self._incidents.values(), key=lambda i: (i.first_onset, i.id))

    def get(self, incident_id: str) -> Incident | None:
        """One incident by id."""
        return self._incidents.get(incident_id)

    def step(self, found: Sequence[Finding], now: datetime,
             change_events: Sequence[ChangeEvent] = ()) -> tuple[list[Change], list[Incident]]:
        """Apply one cycle's findings; returns the notify-worthy changes and every incident touched."""
        changes: list[Change] = []
        touched: dict[str, Incident] = {}
        claimed: set[str] = set()
        # Active groups first, then larger ones: a group of stale, cleared events must not take the
        # open incident away from the live group that shares its node.
        for finding in sorted(found, key=lambda f: (not f.group.active, -len(f.group.events), f.group.onset)):
            target = self._match(finding, now, exclude=claimed)
            if target is None:
                if not finding.may_open or not self._fresh(finding, now) or self._covered(finding):
                    continue
                if not finding.group.active and self._match(finding, now, exclude=set()) is not None:
                    continue  # cleared leftovers of an incident a live group already updated
                incident, new = self._open(finding, now)
            elif target.state == "resolved":
                incident, new = self._reopen(target, finding, now)
            else:
                incident, new = self._update(target, finding, now)
            claimed.add(incident.id)
            incident = self._attach_changes(incident, change_events)
            self._incidents[incident.id] = incident
            touched[incident.id] = incident
            changes.extend(new)
        for incident in list(self._incidents.values()):
            if incident.state == "open":
                resolved = self._maybe_resolve(incident, now)
                if resolved is not None:
                    incident, change = resolved
                    self._incidents[incident.id] = incident
                    touched[incident.id] = incident
                    changes.append(change)
        self._forget(now)
        return changes, sorted(touched.values(), key=lambda i: i.id)

    # -- matching -------------------------------------------------------------------------------
    def _match(self, finding: Finding, now: datetime, exclude: set[str]) -> Incident | None:
        members = {(e.signal, e.labels) for e in finding.group.events}
        keys = set(_key_strings(finding.group))
        window = timedelta(seconds=self.settings.reopen_window_s)
        open_hits: list[tuple[int, Incident]] = []
        resolved_hits: list[Incident] = []
        for inc in self.incidents:
            # The same service-wide shortage seen on another node joins the open incident, even one
            # another finding already updated this cycle; a shortage that is still going on: the
            # cleared leftovers of another node's incident (its queue, read as capacity once the
            # throttle that caused it is gone) are that incident's, not the service's.
            shortage = inc.state == "open" and finding.group.active and _one_shortage(inc, finding)
            if inc.id in exclude and not shortage:
                continue
            # How close the incident is: holding the finding's own events, sharing an entity with
            # it, or only naming the same shortage. The closest wins, whichever began first: a
            # throttled node's queue is its throttle's, not a shortage seen elsewhere minutes before.
            closeness = next((rank for rank, hit in enumerate(
                (bool(members & inc.members), bool(keys & set(inc.keys)), shortage)) if hit), None)
            if inc.state == "open" and closeness is not None:
                open_hits.append((closeness, inc))
            elif inc.state == "resolved" and self._recurs(inc, finding, members, now, window):
                resolved_hits.append(inc)
        if open_hits:
            return min(open_hits, key=lambda hit: hit[0])[1]
        return resolved_hits[-1] if resolved_hits else None

    @staticmethod
    def _recurs(inc: Incident, finding: Finding, members: set[tuple[str, Labels]], now: datetime,
                window: timedelta) -> bool:
        # A recurrence: same member or same root cause, newly detected after the resolve, within the window.
        if inc.resolved_at is None or now - inc.resolved_at > window:
            return False
        if not (members & inc.members or finding.diagnosis.root_cause == inc.root_cause):
            return False
        resolved_at = inc.resolved_at
        return any(e.detected_at > resolved_at for e in finding.group.events)

    def _covered(self, finding: Finding) -> bool:
        # Detections a resolved incident already reported (members still in the window, clearing
        # one by one) must not open a new incident; only a detection after the resolve can.
        members = {(e.signal, e.labels) for e in finding.group.events}
        latest = max(e.detected_at for e in finding.group.events)
        return any(inc.state == "resolved" and inc.resolved_at is not None and inc.resolved_at >= latest
                   and members & inc.members for inc in self._incidents.values())

    def _fresh(self, finding: Finding, now: datetime) -> bool:
        # Open on a persistent anomaly that is active, or cleared too recently to count as resolved.
        horizon = now - timedelta(seconds=self.settings.resolve_after_s)
        return any(e.cleared_at is None or e.cleared_at > horizon for e in finding.group.events)

    @staticmethod
    def _any_active(incident: Incident) -> bool:
        return any(e.cleared_at is None for e in incident.evidence)

    # -- transitions ----------------------------------------------------------------------------
    def _new_id(self, finding: Finding) -> str:
        root = finding.diagnosis.root_cause
        digest = hashlib.sha1(f"{root.signal}|{_entity_text(root.labels)}".encode()).hexdigest()[:6]
        base = f"inc-{finding.group.onset:%Y%m%dT%H%M%S}-{digest}"
        candidate, n = base, 1
        while candidate in self._incidents:
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    @staticmethod
    def _evidence(finding: Finding, previous: Iterable[Evidence] = ()) -> tuple[Evidence, ...]:
        causes = set(finding.diagnosis.cause_signals)
        merged = {e.key: replace(e, role="impact") for e in previous}
        for event in finding.group.events:
            merged[(event.signal, event.labels)] = Evidence.of(event, "impact")
        root = finding.diagnosis.root_cause
        return tuple(sorted((replace(e, role="cause" if e.signal in causes or
                                     (e.signal, e.labels) == (root.signal, root.labels) else "impact")
                             for e in merged.values()), key=lambda e: (e.onset, e.signal, e.labels)))

    def _last_active(self, finding: Finding, now: datetime, previous: datetime | None = None) -> datetime:
        if finding.group.active:
            return now
        cleared = max(e.cleared_at for e in finding.group.events if e.cleared_at is not None)
        return max(cleared, previous) if previous is not None else cleared

    def _open(self, finding: Finding, now: datetime) -> tuple[Incident, list[Change]]:
        d = finding.diagnosis
        evidence = self._evidence(finding)
        incident = Incident(
            id=self._new_id(finding), title=f"[{d.layer}] {d.rule}: {d.root_cause.signal} on "
                                            f"{_entity_text(d.root_cause.labels)}",
            state="open", severity=d.severity, layer=d.layer, rule=d.rule, root_cause=d.root_cause,
            sentence=d.sentence, runbook=d.runbook, evidence=evidence,
            impact_signals=tuple(sorted({e.signal for e in evidence if e.role == "impact"})),
            services=finding.services, nodes=tuple(sorted(finding.group.nodes)),
            keys=_key_strings(finding.group),
            first_onset=finding.group.onset, opened_at=now, updated_at=now,
            last_active_at=self._last_active(finding, now), not_judged=self.not_judged,
        )
        return self._record(incident, now, "opened", f"opened: {d.sentence}", notify="opened")

    def _reopen(self, incident: Incident, finding: Finding, now: datetime) -> tuple[Incident, list[Change]]:
        reopened = replace(incident, state="open", resolved_at=None)
        updated, changes = self._update(reopened, finding, now, quiet=True)
        rec, more = self._record(updated, now, "reopened", f"re-opened: {finding.diagnosis.sentence}",
                                 notify="opened")
        return rec, [*changes, *more]

    def _update(self, incident: Incident, finding: Finding, now: datetime,
                quiet: bool = False) -> tuple[Incident, list[Change]]:
        d = finding.diagnosis
        evidence = self._evidence(finding, incident.evidence)
        new_signals = sorted({e.key for e in evidence} - incident.members)
        if not finding.group.active:
            # Recovering: the context that made the diagnosis (a hot GPU, a full KV cache) is back to
            # normal while the cleared events are still in the window; keep the verdict, not re-judge.
            d = held(incident)
            self._pending.pop(incident.id, None)
        else:
            # A symptom that outlives its cause, or a rival that is no stronger, keeps the verdict;
            # a stronger candidate takes over once it has held for the dwell time, or at once when
            # the incumbent's own cause has cleared (there is nothing left to alternate with).
            cleared = {(e.signal, e.labels) for e in finding.group.events if not e.active}
            dwell = 0.0 if self._cause_cleared(incident, finding) else self.settings.root_cause_dwell_s
            d, pending = choose(incident, d, self._pending.get(incident.id), now, timedelta(seconds=dwell),
                                live=(d.root_cause.signal, d.root_cause.labels) not in cleared)
            if pending is None:
                self._pending.pop(incident.id, None)
            else:
                self._pending[incident.id] = pending
        if d != finding.diagnosis:
            finding = replace(finding, diagnosis=d)
            evidence = self._evidence(finding, incident.evidence)
        up = SEVERITY_RANK[d.severity] > SEVERITY_RANK[incident.severity]
        root_changed = d.root_cause != incident.root_cause
        updated = replace(
            incident, evidence=evidence, updated_at=now,
            severity=d.severity if up else incident.severity, layer=d.layer, rule=d.rule,
            root_cause=d.root_cause, sentence=d.sentence, runbook=d.runbook,
            title=f"[{d.layer}] {d.rule}: {d.root_cause.signal} on {_entity_text(d.root_cause.labels)}",
            impact_signals=tuple(sorted({e.signal for e in evidence if e.role == "impact"})),
            services=tuple(sorted({*incident.services, *finding.services})),
            nodes=tuple(sorted({*incident.nodes, *finding.group.nodes})),
            keys=tuple(sorted({*incident.keys, *_key_strings(finding.group)})),
            first_onset=min(incident.first_onset, finding.group.onset),
            last_active_at=self._last_active(finding, now, incident.last_active_at),
        )
        changes: list[Change] = []
        for signal, labels in new_signals:
            updated = self._note(updated, now, "evidence",
                                 f"new evidence: {signal} on {_entity_text(labels)}")
        if d.rule != incident.rule and not root_changed:
            updated = self._note(updated, now, "diagnosis", f"diagnosis now {d.rule}: {d.sentence}")
        if quiet:
            return updated, changes
        rise = f"severity {incident.severity} → {d.severity}"
        told_root = root_changed and not announced(updated, "root_cause_changed")
        if up and told_root:  # one message for both: the root-cause change carries the new severity
            updated = self._note(updated, now, "severity_up", rise)
        if root_changed:
            updated, more = self._record(updated, now, "root_cause_changed",
                                         f"root cause now {d.root_cause.signal} on "
                                         f"{_entity_text(d.root_cause.labels)} ({d.rule}): {d.sentence}",
                                         notify="root_cause_changed")
            changes += more
        if up and not told_root:
            updated, more = self._record(updated, now, "severity_up", rise, notify="severity_up")
            changes += more
        return updated, changes

    @staticmethod
    def _cause_cleared(incident: Incident, finding: Finding) -> bool:
        """Whether every event of the incident's cause signals has cleared while others linger.

        Lingering symptoms (a 5-min p99, a peer gap) outlive their cause by a window; they are no
        stronger than it, so they keep the verdict; a stronger candidate still live (the stalled
        queue behind the 504s that crossed first) needs no dwell time once the cause is gone.
        """
        causes = {e.signal for e in incident.evidence if e.role == "cause"}
        events = [e for e in finding.group.events if e.signal in causes]
        return bool(events) and not any(e.active for e in events)

    def _maybe_resolve(self, incident: Incident, now: datetime) -> tuple[Incident, Change] | None:
        quiet_s = (now - incident.last_active_at).total_seconds()
        if quiet_s < self._quiet_needed_s(incident):
            return None
        rec, changes = self.resolve(incident.id, now, f"resolved: every member normal for {quiet_s:.0f} s")
        return rec, changes[0]

    def resolve(self, incident_id: str, now: datetime, text: str) -> tuple[Incident, list[Change]]:
        """Resolve the open incident ``incident_id`` now (quiet long enough, or an operator said so)."""
        self._pending.pop(incident_id, None)
        resolved = replace(self._incidents[incident_id], state="resolved", resolved_at=now, updated_at=now)
        rec, changes = self._record(resolved, now, "resolved", text, notify="resolved")
        self._incidents[incident_id] = rec
        return rec, changes

    def _quiet_needed_s(self, incident: Incident) -> float:
        """How long every member must be normal before ``incident`` resolves: ``resolve_after_s``,
        doubled for each time it has re-opened (up to the re-open window). A fault that comes and
        goes with bursty traffic is still going on between its bursts; telling chat it is over and
        back each time would bury the one message that matters."""
        reopens = sum(1 for entry in incident.timeline if entry.kind == "reopened")
        return min(self.settings.resolve_after_s * 2 ** reopens,
                   max(self.settings.resolve_after_s, self.settings.reopen_window_s))

    def _forget(self, now: datetime) -> None:
        # Resolved incidents past the re-open window cannot come back; the store still has them.
        horizon = now - timedelta(seconds=self.settings.reopen_window_s)
        stale = [k for k, i in self._incidents.items()
                 if i.resolved_at is not None and i.resolved_at < horizon]
        for key in stale:
            del self._incidents[key]

    @staticmethod
    def _note(incident: Incident, now: datetime, kind: str, text: str, notified: bool = False) -> Incident:
        return replace(incident, timeline=(*incident.timeline, TimelineEntry(now, kind, text, notified)))

    def _record(self, incident: Incident, now: datetime, kind: str, text: str,
                notify: ChangeKind) -> tuple[Incident, list[Change]]:
        if announced(incident, kind):
            # Over the message budget: a timeline entry, shown in the incident's next message.
            return self._note(incident, now, kind, text), []
        seq = incident.seq + 1
        noted = replace(self._note(incident, now, kind, text, notified=True), seq=seq)
        return noted, [Change(incident.id, notify, seq, now, noted.severity, text)]

    def _attach_changes(self, incident: Incident, change_events: Sequence[ChangeEvent]) -> Incident:
        start = incident.first_onset - timedelta(seconds=self.settings.lookback_s)
        end = incident.resolved_at or incident.updated_at
        relevant = [c for c in change_events if start <= c.at <= end and _concerns(incident, dict(c.labels))]
        known = {(c.at, c.kind, c.description) for c in incident.changes}
        fresh = tuple(c for c in relevant if (c.at, c.kind, c.description) not in known)
        if not fresh:
            return incident
        # Alerts the relay attached are part of the incident's story: its next message shows them.
        alerts = tuple(TimelineEntry(c.at, "alert", c.description) for c in fresh if c.source in NOT_DECLARED)
        return replace(incident, changes=(*incident.changes, *fresh), timeline=(*incident.timeline, *alerts))
