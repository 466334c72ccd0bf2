"""The persistent outbox: every chat message is a row in the shared store until it is delivered.

- One row per (channel, idempotency key), UNIQUE: announcing the same incident change twice
  queues it once.
- At least once: a row is claimed (``delivering``) before it is sent and finished after; a row
  whose claiming process died is claimed again, so a crash re-sends rather than loses. Several
  deliverers (analyzers sharing a store) claim rows atomically, each row to one of them; the
  webhook channel sends the row's idempotency key, so a receiver can drop the one re-send a crash
  mid-send causes. Parts
  already delivered of a split message are remembered (``parts_sent``) and not re-sent.
- Exponential back-off (and the service's ``Retry-After``) in ``next_attempt_at``, wall-clock
  seconds, so the schedule survives restarts.
- Storm control: past ``storm_cap`` messages per channel in a fixed window, messages are kept as
  ``suppressed`` and one summary is sent when the window closes.

``deliver_due(now)`` is one step with no sleeps; ``reporter.worker`` runs it in a loop.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge

from oximeter.lease import holder_id
from oximeter.store import Connection, Row, dialect, lock_for, migrate, transaction
from oximeter.vocabulary import SEVERITY_RANK, as_severity, priority
from reporter.channels.base import Channel, DeliveryResult, Outcome
from reporter.message import Message, Section
from reporter.settings import ReporterSettings

COMPONENT = "reporter"
MIGRATIONS = [
    """
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY,
        channel TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        kind TEXT NOT NULL DEFAULT 'message',
        title TEXT NOT NULL,
        severity TEXT NOT NULL,
        payload TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        parts_sent INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        next_attempt_at REAL NOT NULL,
        claimed_by TEXT,
        claimed_at REAL,
        sent_at REAL,
        last_error TEXT,
        UNIQUE (channel, idempotency_key)
    );
    CREATE INDEX outbox_due ON outbox (state, next_attempt_at);
    CREATE INDEX outbox_window ON outbox (channel, kind, created_at);
    """,
    # The digest's charts, served by the analyzer API to channels that show images by URL
    # (reporter/chart_link.py).
    """
    CREATE TABLE digest_charts (
        name TEXT PRIMARY KEY,
        day TEXT NOT NULL,
        png BLOB NOT NULL,
        created_at REAL NOT NULL
    );
    """,
]
RESULTS = ("sent", "retry", "failed", "suppressed")


class State(StrEnum):
    """Where a row is in its life."""

    PENDING = "pending"
    DELIVERING = "delivering"
    SENT = "sent"
    FAILED = "failed"
    SUPPRESSED = "suppressed"


@dataclass(frozen=True)
class OutboxPolicy:
    """Back-off, give-up and storm-control numbers (from ``ReporterSettings``)."""

    storm_cap: int = 10
    storm_window_s: float = 300.0
    retry_base_s: float = 5.0
    retry_max_s: float = 600.0
    max_attempts: int = 12
    claim_lease_s: float = 120.0

    @classmethod
    def from_settings(cls, settings: ReporterSettings) -> OutboxPolicy:
        """The policy part of the ``reporter:`` section."""
        return cls(settings.storm_cap, settings.storm_window_s, settings.retry_base_s,
                   settings.retry_max_s, settings.max_attempts, settings.claim_lease_s)

    def backoff_s(self, attempts: int) -> float:
        """Delay after the ``attempts``-th failed attempt: base, 2×base, 4×base… capped."""
        return min(self.retry_max_s, self.retry_base_s * 2 ** max(attempts - 1, 0))


@dataclass(frozen=True)
class OutboxRow:
    """One row as ``outbox list`` shows it (no payload, never a URL)."""

    id: int
    channel: str
    idempotency_key: str
    kind: str
    title: str
    severity: str
    state: str
    attempts: int
    parts_sent: int
    created_at: float
    next_attempt_at: float
    sent_at: float | None
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _process_gone(owner: str) -> bool:
    """True when ``owner`` (host:pid:nonce) is a process on this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a killed child not yet reaped by its parent is a zombie: gone for our purpose
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class Outbox:
    """The outbox table plus the channels it delivers to."""

    def __init__(self, conn: Connection, channels: Mapping[str, Channel] | None = None,
                 policy: OutboxPolicy | None = None, *, registry: CollectorRegistry | None = None) -> None:
        self.conn = conn
        self.channels = dict(channels or {})
        self.policy = policy or OutboxPolicy()
        self.worker_id = holder_id()
        self._lock = lock_for(conn)
        migrate(conn, COMPONENT, MIGRATIONS)
        registry = registry if registry is not None else CollectorRegistry()
        self.pending_gauge = Gauge("oximeter_outbox_pending",
                                   "Chat notifications queued or being delivered", registry=registry)
        self.notifications = Counter("oximeter_notifications", "Chat notification attempts by result",
                                     ["channel", "result"], registry=registry)
        for name in self.channels:
            for result in RESULTS:
                self.notifications.labels(name, result)
        self._refresh_pending()

    def _refresh_pending(self) -> None:
        with self._lock:
            row = self.conn.execute(
                "SELECT COUNT(*) FROM outbox WHERE state IN ('pending', 'delivering')").fetchone()
        self.pending_gauge.set(int(row[0]))

    # --- enqueue ---

    def enqueue(self, message: Message, channels: Iterable[str] | None = None, *, now: float,
                delivered: Iterable[str] = ()) -> list[int]:
        """Queue ``message`` for each channel (default: all); returns ids of new rows (duplicates skip).

        ``delivered``: channels that already received it (sent while the store could not write):
        recorded as sent, never sent again.
        """
        delivered = set(delivered)
        if not message.idempotency_key:
            raise ValueError("an outbox message needs an idempotency_key")
        names = list(self.channels) if channels is None else list(channels)
        window = self.policy.storm_window_s
        window_start = math.floor(now / window) * window
        inserted: list[int] = []
        with transaction(self.conn) as conn:
            for name in names:
                (recent,) = conn.execute(
                    "SELECT COUNT(*) FROM outbox WHERE channel = ? AND kind = 'message' AND created_at >= ?"
                    " AND state != 'suppressed'", (name, window_start)).fetchone()
                state = State.PENDING if recent < self.policy.storm_cap else State.SUPPRESSED
                state = State.SENT if name in delivered else state
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO outbox (channel, idempotency_key, title, severity, payload, state,"
                    " created_at, next_attempt_at, sent_at, attempts, parts_sent)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, message.idempotency_key, message.title, message.severity,
                     message.to_json(), state.value, now, now, now if state is State.SENT else None,
                     int(state is State.SENT), 0))
                if cursor.rowcount != 1:
                    continue
                inserted.append(int(cursor.lastrowid or 0))
                if state is State.SUPPRESSED:
                    self.notifications.labels(name, "suppressed").inc()
                    # One summary per channel and window, sent when the window closes.
                    conn.execute(
                        "INSERT OR IGNORE INTO outbox (channel, idempotency_key, kind, title, severity,"
                        " payload, state, created_at, next_attempt_at)"
                        " VALUES (?, ?, 'summary', ?, ?, '', 'pending', ?, ?)",
                        (name, f"storm-summary:{window_start:.0f}", "storm control summary",
                         "info", now, window_start + window))
        self._refresh_pending()
        return inserted

    # --- delivery ---

    def _reclaim(self, now: float) -> None:
        with self._lock:  # a read first: idle steps take no write lock
            claimed = self.conn.execute("SELECT 1 FROM outbox WHERE state = 'delivering' LIMIT 1").fetchone()
        if claimed is None:
            return
        with transaction(self.conn) as conn:
            rows = conn.execute(
                "SELECT id, claimed_by, claimed_at FROM outbox WHERE state = 'delivering'").fetchall()
            for row in rows:
                owner = row["claimed_by"] or ""
                if (owner == self.worker_id or _process_gone(owner)
                        or (row["claimed_at"] or 0) < now - self.policy.claim_lease_s):
                    conn.execute("UPDATE outbox SET state = 'pending', claimed_by = NULL WHERE id = ?"
                                 " AND state = 'delivering'", (row["id"],))
                    logger.warning("outbox: re-queued row {} claimed by a stopped deliverer", row["id"])

    def _claim(self, now: float, limit: int) -> list[Row]:
        """Claim up to ``limit`` due rows for this deliverer in one statement: on PostgreSQL the
        rows another deliverer is claiming are skipped (``FOR UPDATE SKIP LOCKED``), on SQLite a
        statement holds the file's one write lock; either way each row goes to one deliverer."""
        due = self.next_due_at()
        if due is None or due > now:
            return []
        skip_locked = " FOR UPDATE SKIP LOCKED" if dialect(self.conn) == "postgresql" else ""
        with self._lock:
            rows = self.conn.execute(
                "UPDATE outbox SET state = 'delivering', claimed_by = ?, claimed_at = ? WHERE id IN"
                " (SELECT id FROM outbox WHERE state = 'pending' AND next_attempt_at <= ?"
                f" ORDER BY next_attempt_at, id LIMIT ?{skip_locked}) RETURNING *",
                (self.worker_id, now, now, limit)).fetchall()
        return sorted(rows, key=lambda row: (row["next_attempt_at"], row["id"]))

    def _summary(self, row: Row) -> Message:
        window = self.policy.storm_window_s
        start = row["next_attempt_at"] - window
        with self._lock:
            suppressed = self.conn.execute(
                "SELECT severity, title, payload FROM outbox WHERE channel = ? AND state = 'suppressed'"
                " AND created_at >= ? AND created_at < ? ORDER BY id",
                (row["channel"], start, start + window)).fetchall()
        severities = [as_severity(r["severity"]) for r in suppressed] or ["info"]
        worst = max(severities, key=SEVERITY_RANK.__getitem__)
        lines = [f"- [{priority(r['severity'])}] {r['title']}" for r in suppressed]
        simulation = bool(suppressed) and all(Message.from_json(r["payload"]).simulation for r in suppressed)
        return Message(
            title=f"{len(suppressed)} more notifications held back by storm control",
            severity=worst,
            sections=(Section("Not sent individually", "\n".join(lines)),),
            fields=(("channel", row["channel"]), ("window", f"{window:.0f} s"),
                    ("cap", f"{self.policy.storm_cap} per window")),
            simulation=simulation,
            idempotency_key=row["idempotency_key"],
        )

    def deliver_due(self, now: float, limit: int = 50) -> int:
        """Attempt every row due at ``now`` (wall-clock seconds); returns how many were attempted."""
        self._reclaim(now)
        rows = self._claim(now, limit)
        for row in rows:
            channel = self.channels.get(row["channel"])
            if channel is None:
                result = DeliveryResult(Outcome.FAILED, row["parts_sent"], 0, code="config",
                                        error=f"channel {row['channel']!r} is not configured")
            else:
                try:
                    summary = row["kind"] == "summary"
                    message = self._summary(row) if summary else Message.from_json(row["payload"])
                    result = channel.send(message, start_part=row["parts_sent"])
                except (ValueError, KeyError, TypeError) as exc:
                    # A malformed stored row fails alone; the loop and the other rows carry on.
                    result = DeliveryResult(Outcome.FAILED, row["parts_sent"], 0, code="invalid",
                                            error=channel.scrub(f"invalid: {type(exc).__name__}: {exc}"))
            self._finish(row, result, now)
        self._refresh_pending()
        return len(rows)

    def _finish(self, row: Row, result: DeliveryResult, now: float) -> None:
        attempts = row["attempts"] + (0 if result.outcome is Outcome.THROTTLED else 1)
        state, next_at, error = State.PENDING, now, result.error or None
        if result.outcome is Outcome.SENT:
            state, error = State.SENT, None
        elif result.outcome is Outcome.THROTTLED:
            # Waiting on a rate limit says nothing about the service: the last real error stays.
            next_at, error = now + (result.retry_after_s or 0.0), error or row["last_error"]
        elif result.outcome is Outcome.FAILED or attempts >= self.policy.max_attempts:
            state = State.FAILED
        else:
            next_at = now + max(self.policy.backoff_s(attempts), result.retry_after_s or 0.0)
        with transaction(self.conn) as conn:
            conn.execute(
                "UPDATE outbox SET state = ?, attempts = ?, parts_sent = ?, next_attempt_at = ?,"
                " last_error = ?, sent_at = ?, claimed_by = NULL WHERE id = ? AND claimed_by = ?",
                (state.value, attempts, result.parts_sent, next_at, error,
                 now if state is State.SENT else None, row["id"], self.worker_id))
        if result.outcome is not Outcome.THROTTLED:
            counted = "retry" if state is State.PENDING else state.value
            self.notifications.labels(row["channel"], counted).inc()
        log = logger.bind(channel=row["channel"], key=row["idempotency_key"], attempts=attempts)
        if state is State.FAILED:
            log.error("outbox: giving up on notification: {}", error)
        elif result.outcome is Outcome.RETRY:
            log.warning("outbox: delivery failed, retrying in {:.1f}s: {}", next_at - now, error)

    # --- reading ---

    def rows(self, states: Iterable[str] | None = None) -> list[OutboxRow]:
        """Rows (newest last), optionally only in ``states``."""
        query = ("SELECT id, channel, idempotency_key, kind, title, severity, state, attempts, parts_sent,"
                 " created_at, next_attempt_at, sent_at, last_error FROM outbox")
        wanted = list(states or ())
        if wanted:
            query += f" WHERE state IN ({', '.join('?' * len(wanted))})"
        with self._lock:
            found = self.conn.execute(query + " ORDER BY id", wanted).fetchall()
        return [OutboxRow(**dict(row)) for row in found]

    def purge(self, before: float) -> int:
        """Delete sent and suppressed rows created before ``before``; returns how many.

        Suppressed rows are kept until their window's summary is out, so purge with a margin of
        at least ``storm_window_s``.
        """
        with transaction(self.conn) as conn:
            cursor = conn.execute(
                "DELETE FROM outbox WHERE state IN ('sent', 'suppressed') AND created_at < ?", (before,))
        return int(cursor.rowcount)

    def next_due_at(self) -> float | None:
        """When the earliest pending row becomes due (None when nothing is pending)."""
        with self._lock:
            row = self.conn.execute(
                "SELECT MIN(next_attempt_at) FROM outbox WHERE state = 'pending'").fetchone()
        return None if row[0] is None else float(row[0])
