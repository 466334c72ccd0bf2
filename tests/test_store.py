"""The shared SQLite store: WAL, per-component migrations applied once, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from oximeter.store import StoreError, connect, migrate, schema_version

MIGRATIONS = [
    "CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT);",
    "ALTER TABLE a ADD COLUMN w INTEGER NOT NULL DEFAULT 0;\nCREATE INDEX a_w ON a (w);",
]


def test_migrations_apply_once_and_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "oximeter.db"
    conn = connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert migrate(conn, "test", MIGRATIONS[:1]) == 1
    conn.execute("INSERT INTO a (v) VALUES ('x')")
    conn.close()
    conn = connect(path)
    assert migrate(conn, "test", MIGRATIONS) == 2
    assert migrate(conn, "test", MIGRATIONS) == 2
    assert schema_version(conn, "test") == 2
    assert schema_version(conn, "other") == 0
    assert [tuple(r) for r in conn.execute("SELECT v, w FROM a")] == [("x", 0)]


def test_failed_migration_rolls_back(tmp_path: Path) -> None:
    conn = connect(tmp_path / "db")
    with pytest.raises(StoreError, match="test migration 1 failed"):
        migrate(conn, "test", ["CREATE TABLE b (x);\nCREATE TABLE b (x);"])
    assert schema_version(conn, "test") == 0
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'b'").fetchone() is None


def test_newer_store_is_refused(tmp_path: Path) -> None:
    conn = connect(tmp_path / "db")
    migrate(conn, "test", MIGRATIONS)
    with pytest.raises(StoreError, match="newer than this Oximeter"):
        migrate(conn, "test", MIGRATIONS[:1])
