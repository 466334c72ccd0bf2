"""``oximeter store check|backup``: verify the shared store, or copy it while the daemon runs.

On a SQLite file, ``check`` runs SQLite's full ``integrity_check`` and ``backup DEST`` writes a
consistent copy through SQLite's online backup API, so it is safe while the analyzer and the
outbox worker write; restoring is stopping them and putting the copy in the store's place
(``oximeter store check`` it first). On PostgreSQL (a ``postgresql://`` store), ``check`` reads or
verifies the store's schema and ``backup DEST`` is ``pg_dump``'s custom format of it, restored
with ``pg_restore`` (``oximeter/store_pg_admin.py``). Exit 0 when sound, 1 when damaged, 2 when
the store cannot be read at all.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

from oximeter.config import load_config
from oximeter.errors import OximeterError
from oximeter.store import integrity_problems, is_postgres_url


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``check`` and ``backup``."""
    parser.add_argument("--store", default=None,
                        help="store file or postgresql:// URL (default: incidents.store_path)")
    sub = parser.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    check = sub.add_parser("check", help="full integrity check of the store; exit 1 when damaged")
    check.set_defaults(func=check_command)
    backup = sub.add_parser("backup", help="write a consistent copy of the store to DEST (safe while in use)")
    backup.add_argument("dest", help="the backup file to write (must not exist)")
    backup.set_defaults(func=backup_command)


def _store(args: argparse.Namespace) -> str:
    return str(args.store or load_config(args.config).incidents.store_path)


def _path(store: str) -> Path:
    path = Path(store)
    if not path.is_file():
        raise OximeterError(f"{path}: no store there")
    if path.stat().st_size == 0:
        raise OximeterError(f"{path}: the store file is empty (0 bytes)")
    return path


def _open_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)


def check_command(args: argparse.Namespace) -> int:
    """Print ``PATH: ok`` or the problems SQLite (or PostgreSQL) finds."""
    try:
        store = _store(args)
        if is_postgres_url(store):
            return _check_postgres(store)
        path = _path(store)
    except OximeterError as exc:
        print(f"oximeter store: {exc}", file=sys.stderr)
        return 2
    try:
        with _open_read_only(path) as conn:
            problems = integrity_problems(conn)
    except sqlite3.Error as exc:
        print(f"oximeter store: {path}: damaged, not readable as a store: {exc}", file=sys.stderr)
        return 1
    if problems:
        print(f"oximeter store: {path}: damaged:", *problems[:20], sep="\n  ", file=sys.stderr)
        return 1
    print(f"{path}: ok")
    return 0


def backup_command(args: argparse.Namespace) -> int:
    """Copy the store to ``args.dest`` with SQLite's online backup (``pg_dump`` on PostgreSQL)."""
    dest = Path(args.dest)
    try:
        store = _store(args)
        if dest.exists():
            raise OximeterError(f"{dest}: already exists; choose a new file")
        if is_postgres_url(store):
            from oximeter.store_pg_admin import dump

            schema = dump(store, dest)
            print(f"schema {schema} -> {dest}: backed up (pg_restore --dbname URL {dest} restores it)")
            return 0
        path = _path(store)
        with _open_read_only(path) as source:
            if problems := integrity_problems(source, quick=True):
                raise OximeterError(f"{path}: damaged ({'; '.join(problems[:3])}); not backed up")
            target = sqlite3.connect(str(dest))
            try:
                source.backup(target)
            finally:
                target.close()
    except (OximeterError, sqlite3.Error) as exc:
        print(f"oximeter store: {exc}", file=sys.stderr)
        return 2
    print(f"{path} -> {dest}: backed up")
    return 0


def _check_postgres(url: str) -> int:
    from oximeter.store_pg import shown
    from oximeter.store_pg_admin import check_problems

    problems, checked = check_problems(url)
    if problems:
        print(f"oximeter store: {shown(url)}: damaged ({checked}):", *problems[:20], sep="\n  ",
              file=sys.stderr)
        return 1
    print(f"{shown(url)}: ok ({checked})")
    return 0
