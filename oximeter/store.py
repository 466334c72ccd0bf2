"""The embedded SQLite store shared by the analyzer (incidents) and the reporter (outbox).

One file, WAL mode (readers never block the daemon's writer), and a schema versioned per
component: each component declares an ordered list of migrations, applied once, in order,
inside a transaction, and recorded in ``schema_migrations``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from oximeter.errors import OximeterError

Migration = str  # one SQL script; its 1-based position in the component's list is its version


class StoreError(OximeterError):
    """The store could not be opened or migrated."""


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating on first use) the store at ``path`` in WAL mode.

    ``check_same_thread=False`` because the daemon's HTTP API and its cycle share one connection
    behind ``lock_for(conn)``; autocommit mode so each ``with conn:`` block is one transaction.
    """
    path = Path(path)
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " component TEXT NOT NULL, version INTEGER NOT NULL, applied_at REAL NOT NULL,"
            " PRIMARY KEY (component, version))"
        )
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot open store: {exc}") from exc
    conn.row_factory = sqlite3.Row
    return conn


_LOCKS: dict[int, threading.Lock] = {}


def lock_for(conn: sqlite3.Connection) -> threading.Lock:
    """The lock that serialises use of ``conn`` across threads."""
    return _LOCKS.setdefault(id(conn), threading.Lock())


def schema_version(conn: sqlite3.Connection, component: str) -> int:
    """The highest migration applied for ``component`` (0 when none)."""
    row = conn.execute(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, component: str, migrations: Sequence[Migration]) -> int:
    """Apply ``component``'s migrations not applied yet; returns the resulting version.

    A store written by a newer Oximeter (more migrations than this code knows) is refused rather
    than silently misread.
    """
    current = schema_version(conn, component)
    if current > len(migrations):
        raise StoreError(
            f"store schema for {component} is version {current}, newer than this Oximeter ({len(migrations)})"
        )
    for version, script in enumerate(migrations, start=1):
        if version <= current:
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (component, version, applied_at) VALUES (?, ?, ?)",
                (component, version, time.time()),
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"{component} migration {version} failed: {exc}") from exc
    return len(migrations)


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction first, so split on complete statements instead.
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
