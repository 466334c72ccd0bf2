"""Leases in the shared store: which of several processes leads a shard, until when.

One row per shard (``leases``) names its holder, an epoch that grows with every change of holder,
and the wall-clock second its lease expires. The holder renews it well before then; another
process takes it only once it has expired. A row rather than PostgreSQL's advisory locks: it
works the same on both stores (an OS lock on a SQLite file is only seen on its host), it says who
led and since when, and its expiry tells the other shards how long one has been without a leader,
which a lock that vanishes with its session cannot. Every read-and-change is one write
transaction (the store's one write lock on both backends), so two processes never both take an
expired lease.

Times are wall-clock seconds (``time.time`` by default, a callable for tests): processes on
different hosts compare them, so their clocks must agree to well within a lease (NTP does).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from oximeter.store import Connection, Row, lock_for, migrate, transaction

COMPONENT = "lease"
MIGRATIONS = [
    """
    CREATE TABLE leases (
        shard TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        acquired_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        released INTEGER NOT NULL DEFAULT 0,
        lapse_reported_epoch INTEGER NOT NULL DEFAULT 0
    );
    """,
]


def holder_id() -> str:
    """This process, as a lease names it: host, pid and a nonce (a restarted process is new)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Grant:
    """The outcome of one ``Lease.hold``.

    ``leader``: this process holds the shard's lease now. ``epoch``: the lease's epoch (one per
    holder in turn). On the cycle that took it from another: ``previous`` (that holder),
    ``previous_expired_at`` and whether that holder ``released`` it (a clean stop) rather than
    letting it lapse. ``holder``/``expires_at``: the current holder, whoever it is.
    """

    leader: bool
    epoch: int
    holder: str
    expires_at: float
    previous: str | None = None
    previous_expired_at: float | None = None
    released: bool = False


@dataclass(frozen=True)
class Lapsed:
    """A shard without a leader for more than one lease: its holder stopped (``released``) or
    stopped renewing, and nobody took its place."""

    shard: str
    holder: str
    epoch: int
    expired_at: float
    released: bool


class Lease:
    """This process's claim on ``shard``'s lease in the store behind ``conn``."""

    def __init__(self, conn: Connection, shard: str, duration_s: float, *, holder: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn, self.shard, self.duration_s, self.clock = conn, shard, duration_s, clock
        self.holder = holder or holder_id()
        with lock_for(conn):
            migrate(conn, COMPONENT, MIGRATIONS)

    def hold(self) -> Grant:
        """Take the lease if it is free or expired, renew it if ours; report who holds it otherwise."""
        now = self.clock()
        expires = now + self.duration_s
        with transaction(self.conn) as db:
            row = db.execute("SELECT * FROM leases WHERE shard = ?", (self.shard,)).fetchone()
            if row is None:
                db.execute("INSERT INTO leases (shard, holder, epoch, acquired_at, expires_at)"
                           " VALUES (?, ?, 1, ?, ?)", (self.shard, self.holder, now, expires))
                return Grant(True, 1, self.holder, expires)
            if row["holder"] == self.holder and not row["released"]:
                # Ours, even when it ran out unnoticed: nobody took it, so nobody else acted.
                db.execute("UPDATE leases SET expires_at = ? WHERE shard = ?", (expires, self.shard))
                return Grant(True, int(row["epoch"]), self.holder, expires)
            if row["expires_at"] > now:
                return Grant(False, int(row["epoch"]), row["holder"], float(row["expires_at"]))
            epoch = int(row["epoch"]) + 1
            db.execute("UPDATE leases SET holder = ?, epoch = ?, acquired_at = ?, expires_at = ?,"
                       " released = 0 WHERE shard = ?", (self.holder, epoch, now, expires, self.shard))
            return Grant(True, epoch, self.holder, expires, previous=row["holder"],
                         previous_expired_at=float(row["expires_at"]), released=bool(row["released"]))

    def renew(self, epoch: int) -> bool:
        """Extend the lease held at ``epoch``; False when it is no longer ours (taken meanwhile)."""
        with transaction(self.conn) as db:
            cursor = db.execute("UPDATE leases SET expires_at = ? WHERE shard = ? AND holder = ?"
                                " AND epoch = ? AND released = 0",
                                (self.clock() + self.duration_s, self.shard, self.holder, epoch))
        return cursor.rowcount == 1

    def release(self) -> None:
        """Give the lease up at once (a clean stop): the next process takes it without waiting."""
        with transaction(self.conn) as db:
            db.execute("UPDATE leases SET expires_at = ?, released = 1 WHERE shard = ? AND holder = ?",
                       (self.clock(), self.shard, self.holder))

    def current(self) -> Grant | None:
        """The shard's lease as the store has it now (None before anyone took it)."""
        with lock_for(self.conn):
            row = self.conn.execute("SELECT * FROM leases WHERE shard = ?", (self.shard,)).fetchone()
        return None if row is None else _grant(row, self.holder)

    def claim_lapsed(self) -> list[Lapsed]:
        """Other shards without a leader for longer than one lease, each returned once across every
        process that asks (the row records the epoch reported): a stopped shard is told once."""
        query = ("SELECT * FROM leases WHERE shard != ? AND expires_at < ? AND lapse_reported_epoch < epoch",
                 (self.shard, self.clock() - self.duration_s))
        with lock_for(self.conn):  # a read first: a healthy fleet's cycles take no write lock here
            if not self.conn.execute(*query).fetchall():
                return []
        claimed = []
        with transaction(self.conn) as db:
            for row in db.execute(*query).fetchall():
                cursor = db.execute("UPDATE leases SET lapse_reported_epoch = epoch WHERE shard = ?"
                                    " AND epoch = ?", (row["shard"], row["epoch"]))
                if cursor.rowcount == 1:
                    claimed.append(Lapsed(row["shard"], row["holder"], int(row["epoch"]),
                                          float(row["expires_at"]), bool(row["released"])))
        return claimed


def _grant(row: Row, holder: str) -> Grant:
    return Grant(row["holder"] == holder and not row["released"], int(row["epoch"]), row["holder"],
                 float(row["expires_at"]))
