"""``oximeter store check|backup``: verify the shared SQLite store, or copy it while the daemon runs.

``check`` runs SQLite's full ``integrity_check`` (exit 0 when sound, 1 when damaged, 2 when it
cannot be read at all). ``backup DEST`` writes a consistent copy through SQLite's online backup
API, so it is safe while the analyzer and the outbox worker write; restoring is stopping them and
putting the copy in the store's place (``oximeter store check`` it first).
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
    parser.add_argument("--store", default=None, help="store file (default: incidents.store_path)")
    sub = parser.add_subparsers(dest="store_command", metavar="SUBCOMMAND")
    check = sub.add_parser("check", help="full integrity check of the store; exit 1 when damaged")
    check.set_defaults(func=check_command)
    backup = sub.add_parser("backup", help="write a consistent copy of the store to DEST (safe while in use)")
    backup.add_argument("dest", help="the backup file to write (must not exist)")
    backup.set_defaults(func=backup_command)


def _path(args: argparse.Namespace) -> Path:
    store = args.store or load_config(args.config).incidents.store_path
    if is_postgres_url(store):
        raise OximeterError("the store is a PostgreSQL database: check and back it up with PostgreSQL's "
                            "own tools (pg_amcheck, pg_dump)")
    path = Path(store)
    if not path.is_file():
        raise OximeterError(f"{path}: no store there")
    if path.stat().st_size == 0:
        raise OximeterError(f"{path}: the store file is empty (0 bytes)")
    return path


def _open_read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0)


def check_command(args: argparse.Namespace) -> int:
    """Print ``PATH: ok`` or the problems SQLite finds."""
    try:
        path = _path(args)
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
    """Copy the store to ``args.dest`` with SQLite's online backup."""
    dest = Path(args.dest)
    try:
        path = _path(args)
        if dest.exists():
            raise OximeterError(f"{dest}: already exists; choose a new file")
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
