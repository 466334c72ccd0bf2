"""Maintenance windows: planned work on a node (one GPU of it) or a service, during which
detection goes on and chat is told nothing about what the work breaks.

An incident whose root cause lies in a window active when it opens is opened *suppressed*: it is
on the API, the CLI and the incident page, each change it would have sent listed as not sent. A
fault that outlives its window is told once the window ends, as opened. Declared changes
(rollouts, restarts) inside a window on the same entity are the planned work itself: expected,
not evidence, so they are not attached to incidents. Windows come from the config
(``incidents.maintenance``), ``oximeter maintenance add`` and ``POST /api/maintenance``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from analyzer.detection.events import iso_utc, utc_at
from oximeter.inputs import InputValueError, parse_label_value
from oximeter.store import Connection, lock_for, migrate, transaction

if TYPE_CHECKING:  # the config's settings read this module; the tracker's data stack stays out of it
    from analyzer.incidents.lifecycle import Incident

COMPONENT = "maintenance"
# Column names that are keywords in neither store (PostgreSQL reserves END and BY).
MIGRATIONS = [
    """
    CREATE TABLE maintenance_windows (
        id INTEGER PRIMARY KEY, starts_at REAL NOT NULL, ends_at REAL NOT NULL, node TEXT, gpu TEXT,
        service TEXT, reason TEXT NOT NULL, declared_by TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE INDEX maintenance_windows_end ON maintenance_windows (ends_at, starts_at);
    """,
]


@dataclass(frozen=True)
class MaintenanceWindow:
    """``[start, end)`` of planned work on ``node`` (its GPU ``gpu``) and/or ``service``."""

    start: datetime
    end: datetime
    node: str | None = None
    gpu: str | None = None
    service: str | None = None
    reason: str = ""
    by: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        if self.gpu is not None and self.node is None:
            raise InputValueError("window: a GPU needs its node")
        if self.node is None and self.service is None:
            raise InputValueError("window: name a node or a service")
        if self.end <= self.start:
            raise InputValueError(f"window: to ({iso_utc(self.end)}) must be after "
                                  f"from ({iso_utc(self.start)})")
        for name in ("node", "gpu", "service", "reason", "by"):
            value = getattr(self, name)
            if value is not None:
                parse_label_value(value, name, max_len=500 if name == "reason" else 256)

    def active(self, moment: datetime) -> bool:
        """Whether the work is going on at ``moment``."""
        return self.start <= moment < self.end

    def covers_labels(self, labels: Mapping[str, str]) -> bool:
        """Whether a declared change with ``labels`` is part of the work: on its node (its GPU
        and service, where the change names them), or its service for a service window."""
        key, want = ("node", self.node) if self.node is not None else ("service", self.service)
        if labels.get(key) != want:
            return False
        return all(labels.get(k) in (None, want) for k, want in (("gpu", self.gpu), ("service", self.service))
                   if want is not None)

    def covers(self, incident: Incident) -> bool:
        """Whether ``incident``'s root cause is under the work: on the window's node (and GPU), and
        for a window with a service, an incident of that service."""
        labels = dict(incident.root_cause.labels)
        if self.service is not None and self.service not in incident.services:
            return False
        if self.node is not None and labels.get("node") != self.node:
            return False
        return self.gpu is None or labels.get("gpu") == self.gpu

    @property
    def scope(self) -> str:
        """``node=n3 gpu=2 service=chat``: what the work is on."""
        return " ".join(f"{k}={v}" for k, v in (("node", self.node), ("gpu", self.gpu),
                                                 ("service", self.service)) if v is not None)

    def describe(self) -> str:
        """One line for a timeline or a list: scope, end and reason."""
        said = f": {self.reason}" if self.reason else ""
        return f"maintenance on {self.scope} until {iso_utc(self.end)}{said}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"id": self.id, "from": iso_utc(self.start), "to": iso_utc(self.end), "node": self.node,
                "gpu": self.gpu, "service": self.service, "reason": self.reason, "by": self.by}


class MaintenanceStore:
    """Windows added at run time (the CLI and the API), in the shared store."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        with lock_for(conn):
            migrate(conn, COMPONENT, MIGRATIONS)

    def add(self, window: MaintenanceWindow, now: datetime) -> MaintenanceWindow:
        """Store ``window``; returns it with its id."""
        with transaction(self.conn) as db:
            cur = db.execute("INSERT INTO maintenance_windows (starts_at, ends_at, node, gpu, service,"
                             " reason, declared_by, created_at) VALUES (?,?,?,?,?,?,?,?)",
                             (window.start.timestamp(), window.end.timestamp(), window.node, window.gpu,
                              window.service, window.reason, window.by, now.timestamp()))
            return replace(window, id=int(cur.lastrowid or 0))

    def overlapping(self, start: datetime, end: datetime) -> list[MaintenanceWindow]:
        """Windows that overlap ``[start, end]``, by start."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT * FROM maintenance_windows WHERE ends_at > ?"
                                     " AND starts_at <= ? ORDER BY starts_at, id",
                                     (start.timestamp(), end.timestamp())).fetchall()
        return [MaintenanceWindow(utc_at(r["starts_at"]), utc_at(r["ends_at"]), r["node"], r["gpu"],
                                  r["service"], r["reason"], r["declared_by"], r["id"]) for r in rows]

    def end_now(self, window_id: int, now: datetime) -> bool:
        """End a window early (or drop one not begun); False when there is none still to come or on."""
        with transaction(self.conn) as db:
            row = db.execute("SELECT starts_at FROM maintenance_windows WHERE id = ? AND ends_at > ?",
                             (window_id, now.timestamp())).fetchone()
            if row is None:
                return False
            db.execute("UPDATE maintenance_windows SET ends_at = ? WHERE id = ?",
                       (max(now.timestamp(), row["starts_at"]), window_id))
            if row["starts_at"] >= now.timestamp():
                db.execute("DELETE FROM maintenance_windows WHERE id = ?", (window_id,))
            return True
