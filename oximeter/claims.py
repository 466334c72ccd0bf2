"""Claims in the shared store: which one of several processes does a piece of work, such as
building a day's digest, that every one of them would otherwise do.

One row per piece of work (``claims``) names the process that claimed it and until when. Claiming
is one write transaction on both stores: the first to ask holds the claim and the others are
refused until it expires, so that a process that died holding it is replaced by the next to ask.
Times are wall-clock seconds, compared across hosts as a lease's are (``oximeter/lease.py``).
"""

from __future__ import annotations

from oximeter.store import Connection, migrate, transaction

COMPONENT = "claims"
MIGRATIONS = [
    """
    CREATE TABLE claims (
        key TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
]


class Claims:
    """This process's claims (as ``holder``, see ``oximeter.lease.holder_id``) in ``conn``'s store."""

    def __init__(self, conn: Connection, holder: str) -> None:
        self.conn, self.holder = conn, holder
        migrate(conn, COMPONENT, MIGRATIONS)

    def take(self, key: str, now: float, duration_s: float) -> bool:
        """Whether this process holds ``key`` from ``now`` for ``duration_s``: it asked first, it
        already held it, or another's claim had expired."""
        with transaction(self.conn) as db:
            db.execute("INSERT OR IGNORE INTO claims (key, holder, expires_at) VALUES (?, ?, ?)",
                       (key, self.holder, now + duration_s))
            taken = db.execute("UPDATE claims SET holder = ?, expires_at = ? WHERE key = ?"
                               " AND (holder = ? OR expires_at <= ?)",
                               (self.holder, now + duration_s, key, self.holder, now))
            return taken.rowcount == 1
