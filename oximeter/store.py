"""The store shared by the analyzer (incidents) and the reporter (outbox): an embedded SQLite file
by default, or a PostgreSQL database when ``store_path`` is a ``postgresql://`` URL.

SQLite: one file, WAL mode (readers never block the daemon's writer). On both, a schema versioned
per component: each component declares an ordered list of migrations, applied once, in order,
inside a transaction, and recorded in ``schema_migrations`` (``oximeter.store_pg`` runs the same
list on PostgreSQL).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from loguru import logger

from oximeter.errors import StoreError

Migration = str  # one SQL script; its 1-based position in the component's list is its version


class Row(Protocol):
    """A row read by column name or position (``sqlite3.Row`` and PostgreSQL's rows alike)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    """What a statement returns."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    """The part of ``sqlite3.Connection`` the stores use, which ``oximeter.store_pg`` also offers."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...

    def close(self) -> None: ...


def dialect(conn: Connection) -> str:
    """The SQL dialect behind ``conn``: ``"postgresql"`` (``oximeter.store_pg``) or ``"sqlite"``."""
    return str(getattr(conn, "dialect", "sqlite"))


def is_postgres_url(store: object) -> bool:
    """Whether a ``store_path`` names a PostgreSQL database rather than a SQLite file."""
    return str(store).startswith(("postgresql://", "postgres://"))


def connect(path: str | Path) -> Connection:
    """Open the store: a ``postgresql://`` URL (``oximeter.store_pg``) or a SQLite file."""
    if is_postgres_url(path):
        from oximeter.store_pg import connect_postgres

        return connect_postgres(str(path))
    return connect_sqlite(path)


def connect_sqlite(path: str | Path) -> sqlite3.Connection:
    """Open the store at ``path`` in WAL mode, after an integrity check; create it where none exists.

    A file that is there but is not a sound store (empty, truncated, overwritten in part) is
    refused with a ``StoreError`` and left as it is: replacing it would throw the history away,
    and the operator may still restore it from a backup (``oximeter store check|backup``).

    ``check_same_thread=False`` because the daemon's HTTP API and its cycle share one connection
    behind ``lock_for(conn)``; autocommit mode so each ``with conn:`` block is one transaction.
    """
    path = Path(path)
    memory = str(path) == ":memory:"
    created = not memory and not path.exists()
    if not memory:
        if path.exists() and path.is_file() and path.stat().st_size == 0:
            raise StoreError(f"{path}: the store file is empty (0 bytes), so its history is gone; "
                             "restore a backup there, or remove the file to start a new store")
        path.parent.mkdir(parents=True, exist_ok=True)
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(str(path), timeout=10.0, check_same_thread=False, isolation_level=None)
        if not created:
            problems = integrity_problems(conn, quick=True)
            if problems:
                raise StoreError(f"{path}: the store is damaged ({'; '.join(problems[:3])}); "
                                 "it was left untouched: restore a backup or move it aside")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " component TEXT NOT NULL, version INTEGER NOT NULL, applied_at REAL NOT NULL,"
            " PRIMARY KEY (component, version))"
        )
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise StoreError(f"{path}: cannot open store: {exc}") from exc
    except StoreError:
        if conn is not None:
            conn.close()
        raise
    if created:
        logger.warning("no store at {}: created a new, empty one", path)
    conn.row_factory = sqlite3.Row
    return conn


def integrity_problems(conn: sqlite3.Connection, *, quick: bool = False) -> list[str]:
    """What SQLite's ``quick_check`` (or the slower, fuller ``integrity_check``) finds; empty when sound.

    A file that is not a database at all raises ``sqlite3.DatabaseError`` here already.
    """
    pragma = "quick_check" if quick else "integrity_check"
    rows = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}")]
    return [] if rows == ["ok"] else rows


_LOCKS: dict[int, threading.Lock] = {}


def lock_for(conn: Connection) -> threading.Lock:
    """The lock that serialises use of ``conn`` across threads."""
    return _LOCKS.setdefault(id(conn), threading.Lock())


@contextmanager
def transaction(conn: Connection) -> Iterator[Connection]:
    """One write transaction on ``conn`` under its lock: taken at once (``BEGIN IMMEDIATE``, so two
    writers never deadlock upgrading a read), committed on success, rolled back on any exception."""
    with lock_for(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            # SQLite has rolled back already after some errors (SQLITE_FULL, a full disk): a second
            # ROLLBACK would fail and hide the reason.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:  # a COMMIT that failed (full disk) leaves the transaction open
                conn.execute("ROLLBACK")
            raise


def schema_version(conn: Connection, component: str) -> int:
    """The highest migration applied for ``component`` (0 when none)."""
    row = conn.execute(
        "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0])


def migrate(conn: Connection, component: str, migrations: Sequence[Migration]) -> int:
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
            if schema_version(conn, component) >= version:
                # Another process (an analyzer starting beside this one) applied it after this one
                # read the version: the write lock makes the second read the one that counts.
                conn.execute("ROLLBACK")
                continue
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
