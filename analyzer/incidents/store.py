"""Incidents in the shared SQLite store: incidents, timeline, change records, change events, acks, silences.

Change records are written in the same transaction as the incident they belong to, with the
idempotency key as primary key, and carry ``emitted_at`` once handed to the outbox: a daemon that
dies between the two re-emits (at least once; the outbox de-duplicates on the key), and a daemon
that restarts rebuilds its tracker from the open incidents, so it never produces a second "opened".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from analyzer.detection.events import iso_utc
from analyzer.incidents.model import Change, ChangeEvent, Incident
from oximeter.inputs import InputValueError, parse_duration_s, parse_int, parse_label_value, parse_moment
from oximeter.store import Connection, lock_for, migrate, transaction
from oximeter.vocabulary import LAYERS, SEVERITIES

COMPONENT = "analyzer"
MIGRATIONS = [
    """
    CREATE TABLE incidents (
        id TEXT PRIMARY KEY, state TEXT NOT NULL, severity TEXT NOT NULL, layer TEXT NOT NULL,
        rule TEXT NOT NULL, root_signal TEXT NOT NULL, root_entity TEXT NOT NULL,
        first_onset REAL NOT NULL, opened_at REAL NOT NULL, updated_at REAL NOT NULL, resolved_at REAL,
        nodes TEXT NOT NULL, services TEXT NOT NULL, data TEXT NOT NULL
    );
    CREATE INDEX incidents_state ON incidents (state, updated_at);
    CREATE TABLE incident_timeline (
        incident_id TEXT NOT NULL REFERENCES incidents (id), pos INTEGER NOT NULL, at REAL NOT NULL,
        kind TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (incident_id, pos)
    );
    CREATE TABLE incident_changes (
        key TEXT PRIMARY KEY, incident_id TEXT NOT NULL REFERENCES incidents (id), kind TEXT NOT NULL,
        seq INTEGER NOT NULL, at REAL NOT NULL, severity TEXT NOT NULL, text TEXT NOT NULL, emitted_at REAL
    );
    CREATE INDEX incident_changes_pending ON incident_changes (emitted_at, at);
    CREATE TABLE change_events (
        id INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, description TEXT NOT NULL,
        labels TEXT NOT NULL, source TEXT NOT NULL, recorded_at REAL NOT NULL
    );
    CREATE INDEX change_events_at ON change_events (at);
    CREATE TABLE incident_acks (
        id INTEGER PRIMARY KEY, incident_id TEXT NOT NULL REFERENCES incidents (id), at REAL NOT NULL,
        by TEXT NOT NULL, note TEXT NOT NULL
    );
    CREATE TABLE incident_silences (
        id INTEGER PRIMARY KEY, incident_id TEXT NOT NULL REFERENCES incidents (id), at REAL NOT NULL,
        until REAL NOT NULL, by TEXT NOT NULL, note TEXT NOT NULL
    );
    """,
    # Analyzers of several shards share one store: each tracks only its own shard's incidents.
    """
    ALTER TABLE incidents ADD COLUMN shard TEXT NOT NULL DEFAULT 'default';
    """,
]

STATES = ("open", "resolved")


class QueryError(ValueError):
    """A malformed filter; the message is the reason shown to the user (CLI exit 2, API 400)."""


def parse_duration(text: str, name: str = "since") -> timedelta:
    """``90s``, ``15m``, ``24h``, ``7d``, ``2w`` (bounded; see :mod:`oximeter.inputs`)."""
    try:
        return timedelta(seconds=parse_duration_s(text, name, allow_number=False))
    except InputValueError as exc:
        raise QueryError(str(exc)) from None


def _ts(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _dt(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _rule_ids() -> tuple[str, ...]:
    # Imported on a rule filter only: the rules read the catalogue (pandas), and the reporter
    # reads this store without them.
    from analyzer.diagnosis.rules import RULE_IDS

    return RULE_IDS


@dataclass(frozen=True)
class IncidentQuery:
    """Filters of ``incidents list`` and ``GET /api/incidents`` (validated on construction).

    ``since``, ``start`` and ``end`` keep the incidents active at some time in the range; ``gpu``
    matches an incident with evidence on that GPU index, on ``node`` when both are given (GPU 3
    of n2, not any GPU 3 of an incident that also touches n2).
    """

    since: timedelta | None = None
    layer: str | None = None
    state: str | None = None
    service: str | None = None
    node: str | None = None
    rule: str | None = None
    limit: int = 500
    severity: str | None = None
    gpu: str | None = None
    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.layer is not None and self.layer not in LAYERS:
            raise QueryError(f"layer: expected one of {', '.join(LAYERS)}, got {self.layer!r}")
        if self.state is not None and self.state not in STATES:
            raise QueryError(f"state: expected open or resolved, got {self.state!r}")
        if self.rule is not None and self.rule not in _rule_ids():
            raise QueryError(f"rule: unknown rule {self.rule!r}")
        if self.severity is not None and self.severity not in SEVERITIES:
            raise QueryError(f"severity: expected one of {', '.join(SEVERITIES)}, got {self.severity!r}")
        if not 1 <= self.limit <= 10_000:
            raise QueryError(f"limit: expected 1..10000, got {self.limit}")
        if self.start is not None and self.end is not None and self.start > self.end:
            raise QueryError(f"from: {iso_utc(self.start)} is after to: {iso_utc(self.end)}")

    @classmethod
    def from_params(cls, params: Mapping[str, str], now: datetime | None = None) -> IncidentQuery:
        """From CLI options or URL query parameters (strings); unknown names are refused.

        ``from`` and ``to`` take an ISO-8601 time or a duration before ``now`` (default: the
        wall clock), see :func:`oximeter.inputs.parse_moment`.
        """
        unknown = sorted(set(params) - set(QUERY_PARAMS))
        if unknown:
            raise QueryError(f"unknown parameter(s): {', '.join(unknown)}")
        now = now or datetime.now(UTC)
        try:
            limit = parse_int(params.get("limit", "500"), "limit", 1, 10_000)
            service, node, gpu = (None if (v := params.get(k)) is None else parse_label_value(v, k)
                                  for k in ("service", "node", "gpu"))
            start, end = (None if (v := params.get(k)) is None else parse_moment(v, k, now)
                          for k in ("from", "to"))
        except InputValueError as exc:
            raise QueryError(str(exc)) from None
        since = params.get("since")
        return cls(since=parse_duration(since) if since else None, layer=params.get("layer"),
                   state=params.get("state"), service=service, node=node,
                   rule=params.get("rule"), limit=limit, severity=params.get("severity"), gpu=gpu,
                   start=start, end=end)


# The names :meth:`IncidentQuery.from_params` reads, with what each takes (CLI help, OpenAPI).
QUERY_PARAMS: dict[str, str] = {
    "since": "active at any time in this last duration, e.g. 24h",
    "from": "active at or after this time: ISO-8601 (2026-11-01) or a duration ago (7d)",
    "to": "active at or before this time: ISO-8601 or a duration ago",
    "severity": "one of " + ", ".join(SEVERITIES),
    "layer": "one of the six layers",
    "state": "open or resolved",
    "rule": "diagnosis rule id",
    "service": "service name",
    "node": "node name",
    "gpu": "GPU index (with node: that node's GPU)",
    "limit": "1..10000",
}


class IncidentStore:
    """Reads and writes incidents; every method takes the connection's lock (the API shares it).

    ``shard``: the analyzer's shard (``analyzer.ha.shard``); the incidents it saves are that
    shard's, and it tracks and tells only those. Queries read every shard's: the whole fleet.
    """

    def __init__(self, conn: Connection, shard: str = "default") -> None:
        self.conn, self.shard = conn, shard
        with lock_for(conn):
            migrate(conn, COMPONENT, MIGRATIONS)

    # -- the daemon's side ----------------------------------------------------------------------
    def save(self, incidents: Iterable[Incident], changes: Sequence[Change] = ()) -> None:
        """Upsert ``incidents`` and record ``changes`` (each key once) in one transaction."""
        with transaction(self.conn) as db:
            for inc in incidents:
                db.execute(
                    "INSERT INTO incidents (id, state, severity, layer, rule, root_signal, root_entity,"
                    " first_onset, opened_at, updated_at, resolved_at, nodes, services, data, shard)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET"
                    " state=excluded.state, severity=excluded.severity, layer=excluded.layer,"
                    " rule=excluded.rule, root_signal=excluded.root_signal, root_entity=excluded.root_entity,"
                    " first_onset=excluded.first_onset, updated_at=excluded.updated_at,"
                    " resolved_at=excluded.resolved_at, nodes=excluded.nodes, services=excluded.services,"
                    " data=excluded.data",
                    (inc.id, inc.state, inc.severity, inc.layer, inc.rule, inc.root_cause.signal,
                     inc.root_cause.entity, _ts(inc.first_onset), _ts(inc.opened_at), _ts(inc.updated_at),
                     _ts(inc.resolved_at), json.dumps(list(inc.nodes)), json.dumps(list(inc.services)),
                     json.dumps(inc.to_dict(), sort_keys=True), self.shard))
                db.executemany(
                    "INSERT OR IGNORE INTO incident_timeline (incident_id, pos, at, kind, text)"
                    " VALUES (?,?,?,?,?)",
                    [(inc.id, pos, _ts(t.at), t.kind, t.text) for pos, t in enumerate(inc.timeline)])
            db.executemany(
                "INSERT OR IGNORE INTO incident_changes (key, incident_id, kind, seq, at, severity, text)"
                " VALUES (?,?,?,?,?,?,?)",
                [(c.key, c.incident_id, c.kind, c.seq, _ts(c.at), c.severity, c.text) for c in changes])

    def tracked(self, now: datetime, reopen_window_s: float) -> list[Incident]:
        """What a (re)starting tracker holds: open incidents and those resolved within the window."""
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT data FROM incidents WHERE shard = ? AND (state = 'open' OR resolved_at >= ?)"
                " ORDER BY first_onset, id",
                (self.shard, now.timestamp() - reopen_window_s)).fetchall()
        return [Incident.from_dict(json.loads(r["data"])) for r in rows]

    def pending_changes(self) -> list[Change]:
        """Change records not yet handed to the outbox, oldest first."""
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT * FROM incident_changes WHERE emitted_at IS NULL"
                " AND incident_id IN (SELECT id FROM incidents WHERE shard = ?)"
                " ORDER BY at, incident_id, seq", (self.shard,)).fetchall()
        return [Change(r["incident_id"], r["kind"], r["seq"], _dt(r["at"]) or datetime.now(UTC),
                       r["severity"], r["text"]) for r in rows]

    def mark_emitted(self, keys: Iterable[str], now: datetime) -> None:
        """Remember that these change records reached the outbox."""
        with transaction(self.conn) as db:
            db.executemany("UPDATE incident_changes SET emitted_at = ? WHERE key = ?",
                           [(now.timestamp(), k) for k in keys])

    def changes_of(self, incident_id: str) -> list[dict[str, Any]]:
        """Every change record of one incident, with whether it was emitted."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT * FROM incident_changes WHERE incident_id = ? ORDER BY seq",
                                     (incident_id,)).fetchall()
        return [{"key": r["key"], "kind": r["kind"], "seq": r["seq"], "at": _iso(r["at"]),
                 "severity": r["severity"], "text": r["text"], "emitted_at": _iso(r["emitted_at"])}
                for r in rows]

    # -- queries --------------------------------------------------------------------------------
    def get(self, incident_id: str) -> Incident | None:
        """One incident by id."""
        with lock_for(self.conn):
            row = self.conn.execute("SELECT data FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        return None if row is None else Incident.from_dict(json.loads(row["data"]))

    def query(self, q: IncidentQuery, now: datetime) -> list[Incident]:
        """Incidents matching ``q``, newest first; ``since`` keeps those active at any time since then."""
        where, args = ["1=1"], []  # type: list[str], list[Any]
        if q.since is not None:
            where.append("(resolved_at IS NULL OR resolved_at >= ?)")
            args.append((now - q.since).timestamp())
        if q.start is not None:
            where.append("(resolved_at IS NULL OR resolved_at >= ?)")
            args.append(q.start.timestamp())
        if q.end is not None:
            where.append("first_onset <= ?")
            args.append(q.end.timestamp())
        for column, value in (("layer", q.layer), ("state", q.state), ("rule", q.rule),
                              ("severity", q.severity)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        for column, value in (("services", q.service), ("nodes", q.node)):
            if value is not None:
                where.append(f"EXISTS (SELECT 1 FROM json_each(incidents.{column}) WHERE value = ?)")
                args.append(value)
        if q.gpu is not None:
            same_node = "" if q.node is None else " AND json_extract(value, '$.labels.node') = ?"
            where.append("EXISTS (SELECT 1 FROM json_each(incidents.data, '$.evidence')"
                         f" WHERE json_extract(value, '$.labels.gpu') = ?{same_node})")
            args += [q.gpu] if q.node is None else [q.gpu, q.node]
        sql = f"SELECT data FROM incidents WHERE {' AND '.join(where)} ORDER BY first_onset DESC, id LIMIT ?"
        with lock_for(self.conn):
            rows = self.conn.execute(sql, (*args, q.limit)).fetchall()
        return [Incident.from_dict(json.loads(r["data"])) for r in rows]

    def stats(self, since: timedelta, now: datetime) -> dict[str, Any]:
        """Counts by layer and rule, MTTD (onset → opened) and MTTR (onset → resolved), in seconds."""
        start = (now - since).timestamp()
        with lock_for(self.conn):
            rows = self.conn.execute(
                "SELECT layer, rule, state, first_onset, opened_at, resolved_at FROM incidents"
                " WHERE opened_at >= ? OR resolved_at IS NULL OR resolved_at >= ?", (start, start)).fetchall()
        by_layer: dict[str, int] = {}
        by_rule: dict[str, int] = {}
        for r in rows:
            by_layer[r["layer"]] = by_layer.get(r["layer"], 0) + 1
            by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
        detect = [r["opened_at"] - r["first_onset"] for r in rows]
        repair = [r["resolved_at"] - r["first_onset"] for r in rows if r["resolved_at"] is not None]
        return {"since_s": since.total_seconds(), "total": len(rows),
                "open": sum(1 for r in rows if r["state"] == "open"),
                "by_layer": dict(sorted(by_layer.items())), "by_rule": dict(sorted(by_rule.items())),
                "mttd_s": sum(detect) / len(detect) if detect else None,
                "mttr_s": sum(repair) / len(repair) if repair else None}

    # -- change events, acks, silences ----------------------------------------------------------
    def record_change_event(self, change: ChangeEvent, now: datetime) -> int:
        """Store a declared change (deploy, config, restart, maintenance); returns its id."""
        with transaction(self.conn) as db:
            cur = db.execute(
                "INSERT INTO change_events (at, kind, description, labels, source, recorded_at)"
                " VALUES (?,?,?,?,?,?)", (change.at.timestamp(), change.kind, change.description,
                                          json.dumps(dict(change.labels), sort_keys=True), change.source,
                                          now.timestamp()))
            return int(cur.lastrowid or 0)

    def change_events(self, start: datetime, end: datetime) -> list[ChangeEvent]:
        """Declared changes with ``start <= at <= end``."""
        with lock_for(self.conn):
            rows = self.conn.execute("SELECT * FROM change_events WHERE at BETWEEN ? AND ? ORDER BY at, id",
                                     (start.timestamp(), end.timestamp())).fetchall()
        return [ChangeEvent(_dt(r["at"]) or start, r["kind"], r["description"],
                            tuple(sorted(json.loads(r["labels"]).items())), r["source"], r["id"])
                for r in rows]

    def ack(self, incident_id: str, by: str, note: str, now: datetime) -> bool:
        """Acknowledge; False when there is no such incident."""
        return self._mark("INSERT INTO incident_acks (incident_id, at, by, note) VALUES (?,?,?,?)",
                          incident_id, (now.timestamp(), by, note))

    def silence(self, incident_id: str, until: datetime, by: str, note: str, now: datetime) -> bool:
        """Silence notifications until ``until``; False when there is no such incident."""
        return self._mark("INSERT INTO incident_silences (incident_id, at, until, by, note)"
                          " VALUES (?,?,?,?,?)",
                          incident_id, (now.timestamp(), until.timestamp(), by, note))

    def _mark(self, sql: str, incident_id: str, values: tuple[Any, ...]) -> bool:
        with transaction(self.conn) as db:
            if db.execute("SELECT 1 FROM incidents WHERE id = ?", (incident_id,)).fetchone() is None:
                return False
            db.execute(sql, (incident_id, *values))
            return True

    def silenced(self, incident_id: str, now: datetime) -> bool:
        """Whether a silence covers ``now``."""
        with lock_for(self.conn):
            row = self.conn.execute("SELECT 1 FROM incident_silences WHERE incident_id = ? AND until > ?",
                                    (incident_id, now.timestamp())).fetchone()
        return row is not None

    def annotations_of(self, incident_id: str) -> dict[str, Any]:
        """Acks and silences of one incident."""
        with lock_for(self.conn):
            acks = self.conn.execute(
                "SELECT at, by, note FROM incident_acks WHERE incident_id = ? ORDER BY id",
                (incident_id,)).fetchall()
            sil = self.conn.execute(
                "SELECT at, until, by, note FROM incident_silences WHERE incident_id = ? ORDER BY id",
                (incident_id,)).fetchall()
        return {"acks": [{"at": _iso(a["at"]), "by": a["by"], "note": a["note"]} for a in acks],
                "silences": [{"at": _iso(s["at"]), "until": _iso(s["until"]), "by": s["by"],
                              "note": s["note"]} for s in sil]}


def _iso(seconds: float | None) -> str | None:
    return iso_utc(_dt(seconds))
