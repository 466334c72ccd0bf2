"""``oximeter store check|backup`` on a PostgreSQL store: the store's schema read in full (or
verified by amcheck where the database has it), dumped by pg_dump with the password in its
environment only; a schema that holds no store is said to."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
from pg_server import PostgresServer, StoreSpace

from oximeter.cli import main
from oximeter.store import connect, migrate

TABLE = ["CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);"]
ROWS = 300


def _filled(url: str) -> None:
    conn = connect(url)
    try:
        migrate(conn, "test", TABLE)
        conn.executemany("INSERT INTO notes (text) VALUES (?)", [(f"note {i}",) for i in range(ROWS)])
    finally:
        conn.close()


def test_check_reads_the_store_and_amcheck_verifies_it(tmp_path: Path, postgres: PostgresServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    url = StoreSpace("postgresql", tmp_path, postgres) / "checked"
    _filled(url)
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute("DROP EXTENSION IF EXISTS amcheck")
        assert main(["store", "--store", url, "check"]) == 0
        # schema_migrations and notes, each with its primary key's index.
        assert "2 tables read in full" in capsys.readouterr().out
        # In a schema of its own, off the store's search_path, as an administrator would put it.
        admin.execute("CREATE SCHEMA IF NOT EXISTS tools")
        admin.execute("CREATE EXTENSION amcheck SCHEMA tools")
        try:
            assert main(["store", "--store", url, "check"]) == 0
            assert "amcheck verified 2 tables, 2 indexes" in capsys.readouterr().out
        finally:
            admin.execute("DROP EXTENSION amcheck")
    empty = StoreSpace("postgresql", tmp_path, postgres) / "empty"
    assert main(["store", "--store", empty, "check"]) == 1
    assert "no Oximeter store here" in capsys.readouterr().err


def test_backup_is_a_pg_dump_of_the_store_schema(tmp_path: Path, postgres: PostgresServer,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    space = StoreSpace("postgresql", tmp_path, postgres)
    url = space / "saved"
    _filled(url)
    dest = tmp_path / "store.dump"
    assert main(["store", "--store", url, "backup", str(dest)]) == 0
    schema = capsys.readouterr().out.split()[1]
    script = subprocess.run(["pg_restore", "--file", "-", str(dest)], capture_output=True, text=True,
                            check=True).stdout
    copied = script.split(f"COPY {schema}.notes", 1)[1].split("\\.", 1)[0]
    assert len(copied.strip().splitlines()) == ROWS + 1  # the COPY line's rest, then one line a row
    assert main(["store", "--store", url, "backup", str(dest)]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err


def test_the_password_reaches_pg_dump_in_its_environment_only(
        tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    url = StoreSpace("postgresql", tmp_path, postgres) / "secret"
    _filled(url)
    # A pg_dump that writes down what it was given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pg_dump"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/argv\necho "$PGPASSWORD" > {tmp_path}/password\n'
                    'while [ "$1" != "--file" ]; do shift; done; : > "$2"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OXIMETER_STORE_PASSWORD", "hunter2")
    assert main(["store", "--store", url, "backup", str(tmp_path / "out.dump")]) == 0
    assert (tmp_path / "password").read_text().strip() == "hunter2"
    argv = (tmp_path / "argv").read_text()
    assert "hunter2" not in argv and "--format custom" in argv and (tmp_path / "out.dump").exists()
