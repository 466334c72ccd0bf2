"""What on-call does to an incident, and what that holds back from chat.

Acknowledgements and silences are rows of the incident store (``incident_acks``,
``incident_silences``); from them this module decides, for each change the analyzer is about to
send, whether chat hears it. A silence holds everything until it ends. An acknowledgement holds
everything but a severity rise and the resolve: someone is on it, so a new root cause or a
re-open is theirs to read on the incident, while a worse fault or its end is news to everyone.
What is held is recorded with why, and the incident's timeline says so.

A resolve by hand is a request the analyzer applies on its next cycle: the analyzer alone writes
incidents, so a resolve written beside it never races its tracker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from analyzer.detection.events import iso_utc, utc_at
from analyzer.incidents.maintenance import MaintenanceWindow
from analyzer.incidents.model import Change, Incident, TimelineEntry
from analyzer.incidents.store import IncidentStore
from oximeter.store import Connection, lock_for, migrate, transaction

if TYPE_CHECKING:
    from analyzer.incidents.lifecycle import IncidentTracker

COMPONENT = "oncall"
MIGRATIONS = [
    """
    CREATE TABLE incident_resolve_requests (
        id INTEGER PRIMARY KEY, incident_id TEXT NOT NULL REFERENCES incidents (id), at REAL NOT NULL,
        by TEXT NOT NULL, note TEXT NOT NULL, applied_at REAL
    );
    CREATE TABLE notification_holds (
        key TEXT PRIMARY KEY, incident_id TEXT NOT NULL REFERENCES incidents (id), kind TEXT NOT NULL,
        seq INTEGER NOT NULL, at REAL NOT NULL, cause TEXT NOT NULL, reason TEXT NOT NULL, released_at REAL
    );
    CREATE INDEX notification_holds_incident ON notification_holds (incident_id, at);
    """,
]
# The longest silence: past a month it is a decision to stop watching, which belongs in the config.
MAX_SILENCE_S = 30 * 86400.0
# A silence asked for without a length (the CLI's default, a chat button's).
DEFAULT_SILENCE_S = 3600.0
# Changes an acknowledgement lets through (see the module's docstring).
ACKED_STILL_TOLD = frozenset({"severity_up", "resolved"})
HoldCause = Literal["silence", "ack", "maintenance"]
Requested = Literal["requested", "missing", "resolved"]


@dataclass(frozen=True)
class Hold:
    """Why one change stays out of chat: ``cause`` names the rule, ``reason`` says it to a person."""

    cause: HoldCause
    reason: str


class OnCall:
    """Resolve requests and held notifications, beside the incident store on the same connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        with lock_for(conn):
            migrate(conn, COMPONENT, MIGRATIONS)

    # -- resolve by hand ------------------------------------------------------------------------
    def request_resolve(self, incident_id: str, by: str, note: str, now: datetime) -> Requested:
        """Ask the analyzer to resolve an open incident; ``missing`` or ``resolved`` when it cannot."""
        with transaction(self.conn) as db:
            row = db.execute("SELECT state FROM incidents WHERE id = ?", (incident_id,)).fetchone()
            if row is None:
                return "missing"
            if row["state"] != "open":
                return "resolved"
            db.execute("INSERT INTO incident_resolve_requests (incident_id, at, by, note) VALUES (?,?,?,?)",
                       (incident_id, now.timestamp(), by, note))
            return "requested"

    def apply_resolves(self, tracker: IncidentTracker, now: datetime) -> tuple[list[Incident], list[Change]]:
        """Resolve what was asked since the last cycle (an incident no longer open is left as it is)."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT id, incident_id, by, note FROM incident_resolve_requests"
                                     " WHERE applied_at IS NULL ORDER BY id").fetchall()
        touched: list[Incident] = []
        changes: list[Change] = []
        for row in rows:
            incident = tracker.get(row["incident_id"])
            if incident is not None and incident.state == "open":
                note = f": {row['note']}" if row["note"] else ""
                resolved, told = tracker.resolve(incident.id, now, f"resolved by {row['by']}{note}")
                touched.append(resolved)
                changes += told
        if rows:
            with transaction(self.conn) as db:
                db.executemany("UPDATE incident_resolve_requests SET applied_at = ? WHERE id = ?",
                               [(now.timestamp(), row["id"]) for row in rows])
        return touched, changes

    # -- what chat hears ------------------------------------------------------------------------
    def hold_for(self, change: Change, now: datetime, incident: Incident | None = None,
                 windows: Sequence[MaintenanceWindow] = ()) -> Hold | None:
        """Why ``change`` stays out of chat now, or None when it goes.

        A silence first; then maintenance: every change of an incident opened suppressed until
        its window ends, and the opening of one whose root cause is under an active window; then
        an acknowledgement.
        """
        with lock_for(self.conn):
            t = now.timestamp()
            silence = self.conn.execute(
                "SELECT until, by FROM incident_silences WHERE incident_id = ? AND at <= ? AND until > ?"
                " ORDER BY until DESC LIMIT 1", (change.incident_id, t, t)).fetchone()
            ack = self.conn.execute("SELECT by FROM incident_acks WHERE incident_id = ? AND at <= ?"
                                    " ORDER BY id LIMIT 1", (change.incident_id, t)).fetchone()
        if silence is not None:
            return Hold("silence", f"silenced by {silence['by']} until {iso_utc(utc_at(silence['until']))}")
        if (suppressed := self.suppressed_by(change.incident_id)) is not None:
            return Hold("maintenance", suppressed)
        if change.kind == "opened" and incident is not None:
            window = next((w for w in windows if w.active(now) and w.covers(incident)), None)
            if window is not None:
                return Hold("maintenance", window.describe())
        if ack is not None and change.kind not in ACKED_STILL_TOLD:
            return Hold("ack", f"acknowledged by {ack['by']}")
        return None

    def hold(self, change: Change, held: Hold, now: datetime) -> None:
        """Record that ``change`` was held back, and why; the resolve of an incident opened
        suppressed ends its suppression (the whole fault fell inside the work)."""
        with transaction(self.conn) as db:
            db.execute("INSERT OR IGNORE INTO notification_holds"
                       " (key, incident_id, kind, seq, at, cause, reason) VALUES (?,?,?,?,?,?,?)",
                       (change.key, change.incident_id, change.kind, change.seq, now.timestamp(), held.cause,
                        held.reason))
        if held.cause == "maintenance" and change.kind == "resolved":
            self.release(change.incident_id, now)

    def suppressed_by(self, incident_id: str) -> str | None:
        """The window an incident opened suppressed in, while its opening is still untold."""
        with lock_for(self.conn):
            row = self.conn.execute(
                "SELECT reason FROM notification_holds WHERE incident_id = ? AND cause = 'maintenance'"
                " AND kind = 'opened' AND released_at IS NULL ORDER BY at LIMIT 1", (incident_id,)).fetchone()
        return None if row is None else str(row["reason"])

    def suppressed(self) -> list[tuple[str, int, str]]:
        """Every incident still suppressed: (incident id, seq of its untold opening, why)."""
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT incident_id, seq, reason FROM notification_holds WHERE cause = 'maintenance'"
                " AND kind = 'opened' AND released_at IS NULL ORDER BY at, key").fetchall()
        return [(r["incident_id"], int(r["seq"]), r["reason"]) for r in rows]

    def outlived(self, store: IncidentStore, windows: Sequence[MaintenanceWindow],
                 now: datetime) -> list[tuple[Change, Incident]]:
        """The openings to tell now: incidents opened suppressed that are still open once no window
        covers them (each released, told unless a silence or an acknowledgement holds it)."""
        out = []
        for incident_id, seq, reason in self.suppressed():
            incident = self.as_told(store, incident_id)
            if incident is None or incident.state != "open" or any(
                    w.active(now) and w.covers(incident) for w in windows):
                continue
            self.release(incident_id, now)
            opening = Change(incident_id, "opened", seq, now, incident.severity,
                             f"opened during {reason}; still going now that the window has ended")
            if self.hold_for(opening, now) is None:
                out.append((opening, incident))
        return out

    def opened_suppressed(self) -> list[str]:
        """Every incident whose opening was held for maintenance (told since or not), by id."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT DISTINCT incident_id FROM notification_holds"
                                     " WHERE cause = 'maintenance' AND kind = 'opened' ORDER BY incident_id")
            return [r["incident_id"] for r in rows.fetchall()]

    def release(self, incident_id: str, now: datetime) -> None:
        """End an incident's suppression: its changes from now on are told as usual."""
        with transaction(self.conn) as db:
            db.execute("UPDATE notification_holds SET released_at = ? WHERE incident_id = ?"
                       " AND cause = 'maintenance' AND released_at IS NULL", (now.timestamp(), incident_id))

    def holds_of(self, incident_id: str) -> list[dict[str, str | None]]:
        """The incident's held changes, oldest first."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT * FROM notification_holds WHERE incident_id = ?"
                                     " ORDER BY at, key", (incident_id,)).fetchall()
        return [{"key": r["key"], "kind": r["kind"], "at": iso_utc(utc_at(r["at"])), "cause": r["cause"],
                 "reason": r["reason"],
                 "released_at": None if r["released_at"] is None else iso_utc(utc_at(r["released_at"]))}
                for r in rows]

    def timeline(self, incident: Incident) -> list[TimelineEntry]:
        """The incident's timeline with what people did to it and what chat was not told, by time."""
        with lock_for(self.conn):
            acks, silences, resolves, holds = (
                self.conn.execute(f"SELECT * FROM {table} WHERE incident_id = ?", (incident.id,)).fetchall()
                for table in ("incident_acks", "incident_silences", "incident_resolve_requests",
                              "notification_holds"))

        def said(note: str) -> str:
            return f": {note}" if note else ""

        extra = [TimelineEntry(utc_at(r["at"]), "acknowledged", f"by {r['by']}{said(r['note'])}")
                 for r in acks]
        extra += [TimelineEntry(utc_at(r["at"]), "silenced",
                                f"until {iso_utc(utc_at(r['until']))} by {r['by']}{said(r['note'])}")
                  for r in silences]
        extra += [TimelineEntry(utc_at(r["at"]), "resolve_requested", f"by {r['by']}{said(r['note'])}")
                  for r in resolves]
        extra += [TimelineEntry(utc_at(r["at"]), "not_sent", f"{r['kind']} not sent to chat: {r['reason']}")
                  for r in holds]
        return sorted((*incident.timeline, *extra), key=lambda t: t.at)

    def as_told(self, store: IncidentStore, incident_id: str) -> Incident | None:
        """The incident as its next chat message tells it: with what on-call did in its timeline,
        so the message lists an acknowledgement or a silence since the one before."""
        incident = store.get(incident_id)
        return None if incident is None else replace(incident, timeline=tuple(self.timeline(incident)))

    def document(self, store: IncidentStore, incident: Incident) -> dict[str, Any]:
        """The incident as ``GET /api/incidents/{id}`` and ``incidents show --json`` give it: its
        record with acks, silences, change records, held changes and the merged timeline."""
        return {**incident.to_dict(), **store.annotations_of(incident.id),
                "notifications": store.changes_of(incident.id), "held": self.holds_of(incident.id),
                "suppressed": self.suppressed_by(incident.id),
                "timeline": [{"at": iso_utc(t.at), "kind": t.kind, "text": t.text, "notified": t.notified}
                             for t in self.timeline(incident)]}
