"""``oximeter store check|backup`` on a PostgreSQL store: the store's schema (the one the URL's
search_path names, else the role's default) checked, or dumped with ``pg_dump``.

The check reads every table of the schema in full, values and all, so that a page the server
cannot read fails here rather than in the analyzer's next query; where the database has the
``amcheck`` extension (``CREATE EXTENSION amcheck``, shipped with PostgreSQL), it verifies each
table's heap and each B-tree index against its table instead, as ``pg_amcheck`` does. The backup is
``pg_dump``'s custom format of that schema: one consistent snapshot, taken while the analyzers
write, restored with ``pg_restore``. The password goes to ``pg_dump`` in its environment, never
on its command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from oximeter.errors import OximeterError, StoreError
from oximeter.secrets import read_secret
from oximeter.store_pg import PASSWORD_ENV, PgConnection, PgStoreError, open_session, shown

# Seconds pg_dump may take: an Oximeter store is megabytes, not the database's other tenants.
DUMP_TIMEOUT_S = 600.0


def _quoted(name: str) -> str:
    """An SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def _schema(conn: PgConnection) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise StoreError("no schema: the URL's search_path names none that exists")
    return str(row[0])


def check_problems(url: str) -> tuple[list[str], str]:
    """The problems found in the store at ``url`` (none: sound) and what was checked; StoreError
    when it cannot be opened at all."""
    conn = open_session(url)
    try:
        schema = _schema(conn)
        tables = [str(r[0]) for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = ? ORDER BY tablename", (schema,)).fetchall()]
        if "schema_migrations" not in tables:
            return [f"schema {schema}: no Oximeter store here (no schema_migrations table)"], schema
        # The extension's functions live in the schema it was created in, maybe not on the path.
        found = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                             " ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'").fetchone()
        amcheck = None if found is None else _quoted(str(found[0]))
        problems: list[str] = []
        for table in tables:
            name = f"{_quoted(schema)}.{_quoted(table)}"
            try:
                if amcheck:
                    verify = f"SELECT blkno, offnum, msg FROM {amcheck}.verify_heapam(?::regclass)"
                    heap = conn.execute(verify, (name,))
                    problems += [f"{table}: block {r[0]}, item {r[1]}: {r[2]}" for r in heap.fetchall()]
                else:
                    conn.execute(f"SELECT sum(length(row_data::text)) FROM {name} AS row_data").fetchall()
            except PgStoreError as exc:
                problems.append(f"{table}: {exc}")
        indexes = conn.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam"
            " WHERE n.nspname = ? AND a.amname = 'btree' ORDER BY c.relname", (schema,)).fetchall()
        for (index,) in indexes if amcheck else []:
            try:
                qualified = f"{_quoted(schema)}.{_quoted(index)}"
                conn.execute(f"SELECT {amcheck}.bt_index_check(?::regclass, true)", (qualified,)).fetchall()
            except PgStoreError as exc:
                problems.append(f"index {index}: {exc}")
        how = (f"amcheck verified {len(tables)} tables, {len(indexes)} indexes" if amcheck
               else f"{len(tables)} tables read in full; CREATE EXTENSION amcheck for a deeper check")
        return problems, f"schema {schema}, {how}"
    finally:
        conn.close()


def dump(url: str, dest: Path) -> str:
    """Write the store's schema to ``dest`` with ``pg_dump`` (custom format); returns the schema."""
    binary = shutil.which("pg_dump")
    if binary is None:
        raise OximeterError("pg_dump not found: install PostgreSQL's client programs")
    conn = open_session(url)
    try:
        schema = _schema(conn)
    finally:
        conn.close()
    env = dict(os.environ)
    password = read_secret(PASSWORD_ENV)
    if password is not None:
        env["PGPASSWORD"] = password.get_secret_value()
    argv = [binary, "--dbname", url, "--schema", schema, "--format", "custom", "--no-owner",
            "--file", str(dest)]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        dest.unlink(missing_ok=True)
        raise OximeterError(f"{shown(url)}: pg_dump took longer than {DUMP_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        dest.unlink(missing_ok=True)
        raise OximeterError(f"{shown(url)}: pg_dump failed: {done.stderr.strip()[:500]}")
    return schema
