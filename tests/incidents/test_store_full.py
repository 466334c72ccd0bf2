"""A store that cannot write: SQLite's ``max_page_count`` makes it answer exactly as on a full disk
(``SQLITE_FULL``, "database or disk is full"), without needing a filesystem to fill."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from api_server import ApiServer
from pydantic import SecretStr

from analyzer.incidents.store import IncidentStore
from analyzer.service.api import build_app
from oximeter.store import connect

TOKEN = "full-token"


def fill(conn: sqlite3.Connection) -> None:
    """No page more than the store has now: the next write that needs one fails with SQLITE_FULL."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def unfill(conn: sqlite3.Connection) -> None:
    """Space is back."""
    conn.execute("PRAGMA max_page_count = 1073741823")


def test_changes_on_a_full_store_are_a_503_with_the_reason(tmp_path: Path) -> None:
    conn = connect(tmp_path / "oximeter.db")
    store = IncidentStore(conn)
    api = ApiServer(build_app(store, SecretStr(TOKEN)))
    try:
        fill(conn)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        body = {"kind": "deploy", "description": "x" * 500, "labels": {"node": "n" * 250}}
        answers = [api.session.post(api.url("/api/changes"), json=body, headers=headers, timeout=10)
                   for _ in range(20)]
        refused = [a for a in answers if a.status_code != 201]
        assert refused, "the store never filled up"
        assert {a.status_code for a in refused} == {503}
        assert "database or disk is full" in refused[0].json()["error"]
        assert refused[0].headers["Retry-After"] == "30"
        assert "Traceback" not in refused[0].text
        assert api.session.get(api.url("/api/incidents"), timeout=10).status_code == 200  # reads go on
        unfill(conn)
        again = api.session.post(api.url("/api/changes"), json=body, headers=headers, timeout=10)
        assert again.status_code == 201
    finally:
        api.stop()
        conn.close()

