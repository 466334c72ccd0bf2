"""The Alertmanager relay: ``POST /api/alertmanager`` (webhook payload version 4, bearer token).

Each alert is recorded once per (fingerprint, status, startsAt) — Alertmanager re-sends a group
on every repeat and retries 5xx, so duplicates are normal. An alert that belongs to an open
incident (its ``node``, or without one its ``service``, is the incident's) becomes evidence of it
(a change event the analyzer attaches to the incident, kind ``alert``, listed in the incident's
next message) and sends no message of its own; so does the resolve of an alert whose firing was
such evidence. The rest are forwarded, one message per Alertmanager group. The always-firing
``Watchdog`` is a heartbeat: recorded, never forwarded.

Answer 2xx once everything is recorded or queued, 400 (with the reason) for a payload that
cannot be read, which Alertmanager drops, and 5xx only when the store failed, which it retries;
the message's idempotency key is derived from the new alerts, so a retry queues nothing twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from loguru import logger
from prometheus_client import CollectorRegistry, Gauge
from pydantic import SecretStr

from analyzer.incidents.model import ChangeEvent, Incident
from analyzer.incidents.store import IncidentQuery, IncidentStore
from analyzer.service.api_requests import GUARD
from oximeter.auth import bearer_refusal
from oximeter.errors import OximeterError
from oximeter.guard import read_body
from oximeter.inputs import InputValueError, parse_json
from oximeter.runbook import runbook_link
from oximeter.store import lock_for, migrate, transaction
from oximeter.vocabulary import SEVERITY_RANK
from reporter.am_payload import Alert, Payload, PayloadError, moment_of
from reporter.message import SIMULATION_MARKER, Link, Message, Section
from reporter.outbox import Outbox
from reporter.routing import Router
from reporter.settings import ReporterSettings

COMPONENT = "reporter_relay"
MIGRATIONS = [
    """
    CREATE TABLE relay_alerts (
        fingerprint TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
        alertname TEXT NOT NULL, labels TEXT NOT NULL, annotations TEXT NOT NULL,
        group_key TEXT NOT NULL, disposition TEXT NOT NULL, incident_id TEXT,
        message_key TEXT, received_at REAL NOT NULL,
        PRIMARY KEY (fingerprint, status, starts_at)
    );
    CREATE INDEX relay_alerts_incident ON relay_alerts (incident_id);
    """,
    """
    CREATE TABLE relay_heartbeat (
        name TEXT PRIMARY KEY, last_seen REAL NOT NULL, lost_noticed_at REAL
    );
    """,
]
PATH = "/api/alertmanager"
# A group of a few thousand alerts; read past the API app's small client_max_size on purpose.
MAX_BODY_BYTES = 4 * 1024 * 1024
SHOWN_ALERTS = 20  # a chat message lists this many alerts of a group, then counts the rest
WATCHDOG = "Watchdog"


@dataclass(frozen=True)
class Outcome:
    """What one delivery of a payload did."""

    evidence: tuple[tuple[str, str], ...]  # (fingerprint, incident id)
    forwarded: tuple[str, ...]
    duplicates: int
    heartbeats: int
    message_key: str | None

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer."""
        return {"evidence": [{"fingerprint": f, "incident": i} for f, i in self.evidence],
                "forwarded": list(self.forwarded), "duplicates": self.duplicates,
                "heartbeats": self.heartbeats, "message_key": self.message_key}


def matching_incident(alert: Alert, incidents: Sequence[Incident]) -> Incident | None:
    """The open incident the alert belongs to: one on the alert's node (for an alert without a
    node, one serving its service), whatever its layer, since the analyzer correlates every layer
    of a node into one incident (the queue alert of a throttled GPU's node is that incident's
    impact). Of several, the one of the alert's layer, then the oldest."""
    layer, node, service = alert.labels.get("layer"), alert.labels.get("node"), alert.labels.get("service")
    hits = [i for i in incidents if i.state == "open"
            and (node in i.nodes if node else service is not None and service in i.services)]
    hits.sort(key=lambda i: (i.layer != layer, i.first_onset, i.id))
    return hits[0] if hits else None


def _message_key(payload: Payload, alerts: Sequence[Alert]) -> str:
    group = hashlib.sha1(payload.group_key.encode()).hexdigest()[:12]
    members = "|".join(sorted(f"{a.fingerprint}:{a.status}:{a.starts_at}" for a in alerts))
    return f"alertmanager:{group}:{hashlib.sha1(members.encode()).hexdigest()[:12]}"


class Relay:
    """Records alerts, attaches them to open incidents, forwards the rest through the outbox."""

    def __init__(self, store: IncidentStore, outbox: Outbox, settings: ReporterSettings,
                 token: SecretStr | None, router: Router | None = None,
                 clock: Callable[[], float] = time.time, registry: CollectorRegistry | None = None) -> None:
        self.store, self.outbox, self.settings, self.token, self.clock = store, outbox, settings, token, clock
        self.router = router or Router.from_settings(settings.routes, outbox.channels)
        self.conn = store.conn
        with lock_for(self.conn):
            migrate(self.conn, COMPONENT, MIGRATIONS)
        self.watchdog_seen = Gauge(
            "oximeter_relay_watchdog_last_seen_timestamp_seconds",
            "When Alertmanager last delivered the always-firing Watchdog (0: never).",
            registry=registry if registry is not None else CollectorRegistry())
        self.watchdog_seen.set_function(lambda: self._heartbeat()[0] or 0.0)

    def _heartbeat(self) -> tuple[float | None, float | None]:
        with lock_for(self.conn):
            row = self.conn.execute("SELECT last_seen, lost_noticed_at FROM relay_heartbeat WHERE name = ?",
                                    (WATCHDOG,)).fetchone()
        return (None, None) if row is None else (row[0], row[1])

    def check_watchdog(self) -> bool:
        """Tell chat once per outage when the Watchdog stopped arriving; True when it did so now.

        Only after the Watchdog was seen once, so a stack without Alertmanager stays quiet.
        """
        timeout_s = self.settings.watchdog_timeout_s
        last_seen, noticed = self._heartbeat()
        now = self.clock()
        if not timeout_s or last_seen is None or noticed is not None or now - last_seen <= timeout_s:
            return False
        minutes = (now - last_seen) / 60
        when = datetime.fromtimestamp(last_seen, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        message = Message("Alerting path broken: no Watchdog from Alertmanager", "critical", (Section(
            "Watchdog lost", f"The always-firing Watchdog last arrived at {when} ({minutes:.0f} min ago): "
            "Prometheus rule evaluation, Alertmanager or its webhook to the analyzer is not working, "
            "so alerts may not be reaching anyone."),), simulation=self.settings.simulated,
            idempotency_key=f"watchdog:lost:{last_seen:.0f}")
        self.outbox.enqueue(message, self.router.channels_for(severity="critical", layer="platform"), now=now)
        with lock_for(self.conn):
            self.conn.execute("UPDATE relay_heartbeat SET lost_noticed_at = ? WHERE name = ?",
                              (now, WATCHDOG))
        return True

    def _beat(self, now: float) -> None:
        with lock_for(self.conn):
            self.conn.execute(
                "INSERT INTO relay_heartbeat (name, last_seen) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
                " SET last_seen = excluded.last_seen, lost_noticed_at = NULL", (WATCHDOG, now))

    def _known(self, alerts: Sequence[Alert]) -> set[tuple[str, str, str]]:
        with lock_for(self.conn):
            return {(a.fingerprint, a.status, a.starts_at) for a in alerts if self.conn.execute(
                "SELECT 1 FROM relay_alerts WHERE fingerprint = ? AND status = ? AND starts_at = ?",
                (a.fingerprint, a.status, a.starts_at)).fetchone()}

    def _told_by(self, alert: Alert) -> Incident | None:
        """For a resolve: the incident its firing was evidence of (chat never saw it fire)."""
        if alert.status != "resolved":
            return None
        with lock_for(self.conn):
            row = self.conn.execute(
                "SELECT incident_id FROM relay_alerts WHERE fingerprint = ? AND status = 'firing'"
                " AND starts_at = ? AND disposition = 'evidence'",
                (alert.fingerprint, alert.starts_at)).fetchone()
        return None if row is None or row[0] is None else self.store.get(str(row[0]))

    def receive(self, payload: Payload) -> Outcome:
        """Record one payload; raises ``sqlite3.Error``/``OximeterError`` when the store fails."""
        now = self.clock()
        moment = datetime.fromtimestamp(now, UTC)
        if any(a.name == WATCHDOG and a.status == "firing" for a in payload.alerts):
            self._beat(now)  # every delivery counts, repeats included: absence is what matters
        known = self._known(payload.alerts)
        seen: set[tuple[str, str, str]] = set()
        fresh = []
        for a in payload.alerts:
            key = (a.fingerprint, a.status, a.starts_at)
            if key not in known and key not in seen:
                seen.add(key)
                fresh.append(a)
        open_incidents = self.store.query(IncidentQuery(state="open", limit=10000), moment)
        heartbeats = [a for a in fresh if a.name == WATCHDOG]
        attached = [(a, inc) for a in fresh if a.name != WATCHDOG
                    and (inc := matching_incident(a, open_incidents) or self._told_by(a)) is not None]
        attached_ids = {id(a) for a, _ in attached}
        forward = [a for a in fresh if a.name != WATCHDOG and id(a) not in attached_ids]
        message_key = _message_key(payload, forward) if forward else None
        # Queue first, then record: a crash in between re-sends the same key, which the outbox ignores.
        if forward and message_key is not None:
            message = self.render(payload, forward, message_key)
            layer = payload.common_labels.get("layer", "")
            services = sorted({a.labels["service"] for a in forward if "service" in a.labels})
            self.outbox.enqueue(message, self.router.channels_for(
                severity=message.severity, layer=layer, services=services), now=now)
        for alert, incident in attached:
            # The incident it was matched to: the alert's service may run on other incidents' nodes.
            scope = [(k, alert.labels[k]) for k in ("node", "service", "layer") if k in alert.labels]
            labels = tuple(sorted([*scope, ("incident", incident.id)]))
            summary = alert.annotations.get("summary", "")
            self.store.record_change_event(ChangeEvent(
                moment_of(alert.starts_at) or moment if alert.status == "firing" else moment, "alert",
                f"Alertmanager {alert.name} {alert.status} (incident {incident.id})"
                + (f": {summary}" if summary else ""), labels, "alertmanager"), moment)
        rows = [(a, incident.id if incident else None, disposition)
                for a, incident, disposition in (
                    *((a, inc, "evidence") for a, inc in attached),
                    *((a, None, "forwarded") for a in forward),
                    *((a, None, "heartbeat") for a in heartbeats))]
        with transaction(self.conn) as db:
            db.executemany(
                "INSERT OR IGNORE INTO relay_alerts (fingerprint, status, starts_at, alertname, labels,"
                " annotations, group_key, disposition, incident_id, message_key, received_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(a.fingerprint, a.status, a.starts_at, a.name, json.dumps(a.labels, sort_keys=True),
                  json.dumps(a.annotations, sort_keys=True), payload.group_key, disposition, incident_id,
                  message_key if disposition == "forwarded" else None, now)
                 for a, incident_id, disposition in rows])
        return Outcome(tuple((a.fingerprint, inc.id) for a, inc in attached),
                       tuple(a.fingerprint for a in forward), len(payload.alerts) - len(fresh),
                       len(heartbeats), message_key)

    def render(self, payload: Payload, alerts: Sequence[Alert], key: str) -> Message:
        """One message for the group's new alerts."""
        firing = [a for a in alerts if a.status == "firing"]
        status = "FIRING" if firing else "RESOLVED"
        severity = max((a.severity for a in alerts), key=SEVERITY_RANK.__getitem__)
        group = ", ".join(f"{k}={v}" for k, v in sorted(payload.group_labels.items())) or "all"
        names = sorted({a.name for a in alerts})
        sections = []
        for a in alerts[:SHOWN_ALERTS]:
            shown = {k: v for k, v in sorted(a.labels.items()) if k != "alertname"}
            ended = f", ended {a.ends_at}" if a.status == "resolved" else ""
            lines = [f"{a.status} since {a.starts_at}{ended}",
                     ", ".join(f"{k}={v}" for k, v in shown.items())]
            lines += [a.annotations[k] for k in ("summary", "description") if a.annotations.get(k)]
            if runbook := a.annotations.get("runbook_url"):
                lines.append(f"runbook: {runbook_link(runbook, self.settings.runbook_url)}")
            sections.append(Section(f"{a.name} ({a.status})", "\n".join(lines)))
        if len(alerts) > SHOWN_ALERTS:
            sections.append(Section("…", f"and {len(alerts) - SHOWN_ALERTS} more alert(s) in this group"))
        links = [Link(f"{a.name} source", a.generator_url) for a in alerts[:3] if a.generator_url]
        if payload.external_url:
            links.append(Link("Alertmanager", payload.external_url))
        simulated = self.settings.simulated or any(
            a.labels.get(k, "").lower() in ("1", "true", "yes") for a in alerts
            for k in ("simulation", "simulated", SIMULATION_MARKER.lower()))
        return Message(f"[{status}:{len(firing) or len(alerts)}] {', '.join(names)} ({group})", severity,
                       tuple(sections), (("Status", status.lower()), ("Group", group),
                                         ("Layer", payload.common_labels.get("layer", "-"))),
                       tuple(links), simulation=simulated, idempotency_key=key)

    def evidence_of(self, incident_id: str) -> list[dict[str, Any]]:
        """Alerts recorded as evidence of one incident, oldest first."""
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT fingerprint, status, starts_at, alertname, labels, received_at FROM relay_alerts"
                " WHERE incident_id = ? ORDER BY received_at, fingerprint", (incident_id,)).fetchall()
        return [{"fingerprint": r[0], "status": r[1], "starts_at": r[2], "alertname": r[3],
                 "labels": json.loads(r[4]), "received_at": r[5]} for r in rows]

    def records(self) -> list[dict[str, Any]]:
        """Every recorded alert (for tests and the CLI)."""
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT fingerprint, status, alertname, disposition, incident_id, message_key"
                " FROM relay_alerts ORDER BY received_at, fingerprint, status").fetchall()
        return [dict(zip(("fingerprint", "status", "alertname", "disposition", "incident_id", "message_key"),
                         r, strict=True)) for r in rows]

    def authorized(self, headers: Mapping[str, str]) -> web.Response | None:
        """None when the bearer token matches; otherwise the 401/403 answer."""
        return bearer_refusal(headers, self.token, "relay disabled: no API token is configured")

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /api/alertmanager``."""
        refused = self.authorized(request.headers)
        if refused is not None:
            return refused
        try:
            body = await read_body(request, request.app[GUARD], MAX_BODY_BYTES)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"body: larger than {MAX_BODY_BYTES} bytes"}, status=413)
        try:
            payload = Payload.parse(parse_json(body))
        except (InputValueError, PayloadError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        try:
            outcome = await asyncio.to_thread(self.receive, payload)
        except (sqlite3.Error, OximeterError) as exc:
            logger.error("relay: could not record group {}: {}", payload.group_key[:80], exc)
            return web.json_response({"error": "store error; retry"}, status=503)
        return web.json_response(outcome.to_dict())


def mount(app: web.Application, relay: Relay) -> None:
    """Add ``POST /api/alertmanager`` to an aiohttp app (the analyzer's API in production)."""
    app.router.add_post(PATH, relay.handle)
