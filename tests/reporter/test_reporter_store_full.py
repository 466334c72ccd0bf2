"""A paging incident while the store cannot write: paged at once through the working channels, held
in memory, written once space returns and never paged twice; the relay answers 503 meanwhile.

SQLite's ``max_page_count`` makes the store answer exactly as on a full disk (``SQLITE_FULL``,
"database or disk is full") without a filesystem to fill. The store's pages are made small, so
that an incident or a message never fits in the free space of pages it already has.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
from chat_receiver import ChatReceiver, MakeChannel
from pydantic import SecretStr
from relay_harness import ThreadedApp

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Snapshot
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import IncidentSettings
from analyzer.incidents.store import IncidentQuery, IncidentStore
from analyzer.service.api import build_app
from analyzer.service.daemon import Analyzer
from analyzer.service.pipeline import snapshot_from_frames
from analyzer.signals.frame import SeriesFrame
from oximeter.store import connect
from reporter.outbox import Outbox
from reporter.relay import PATH, Relay, mount
from reporter.render import OutboxNotifier
from reporter.settings import ReporterSettings
from tests.incidents.incident_cases import at, ev

TOKEN = "full-relay"


def small_pages(path: Path) -> Path:
    """A new store file with 512-byte pages (``connect`` keeps an existing file's page size)."""
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA page_size = 512")
    raw.execute("VACUUM")
    raw.close()
    return path


def fill(conn: sqlite3.Connection) -> None:
    """No page more than the store has now: the next write that needs one fails with SQLITE_FULL."""
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")


def unfill(conn: sqlite3.Connection) -> None:
    """Space is back."""
    conn.execute("PRAGMA max_page_count = 1073741823")


class Events:
    """A pipeline that finds the same events every cycle."""

    def __init__(self, events: list[AnomalyEvent]) -> None:
        self.events = events

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        return self.events, {}

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        return snapshot_from_frames(frames)

    def remember(self, spans: Iterable[Any]) -> None:
        pass


def test_a_paging_incident_on_a_full_store_is_paged_held_and_written_later(
        tmp_path: Path, receiver: ChatReceiver, make_channel: MakeChannel) -> None:
    conn = connect(small_pages(tmp_path / "oximeter.db"))
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 512
    store = IncidentStore(conn)
    outbox = Outbox(conn, {"chat": make_channel("webhook")})
    notifier = OutboxNotifier(outbox, ReporterSettings())
    clock = [at(2)]
    analyzer = Analyzer(Events([ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79")]), store,
                        IncidentSettings(), Topology(), notifier, clock=lambda: clock[0])
    app = build_app(store, SecretStr(TOKEN))
    mount(app, Relay(store, outbox, ReporterSettings(), SecretStr(TOKEN)))
    fill(conn)
    assert analyzer.cycle()
    # Paged at once, though nothing could be stored: the incident and its message are in memory.
    (inc,) = analyzer.tracker.incidents
    assert inc.severity == "critical"
    assert store.query(IncidentQuery(limit=10), clock[0]) == []
    opened = f"{inc.id}:opened:1"
    pages = [r.data for r in receiver.accepted("webhook") if r.data["idempotency_key"] == opened]
    assert len(pages) == 1
    assert "store failing: 1 incident(s) held in memory" in json.dumps(pages[0])
    notices = [r.data for r in receiver.accepted("webhook") if r.data["idempotency_key"].startswith(
        "analyzer:store_failing:")]
    assert len(notices) == 1 and "store failing: 1 incident(s) held in memory" in json.dumps(notices[0])

    # Alertmanager is told to retry: nothing it sends can be recorded now.
    api = ThreadedApp(app).start()
    try:
        alert = {"status": "firing", "labels": {"alertname": "X", "node": "n7"},
                 "annotations": {"description": "d" * 2000},  # more than a page's free space
                 "startsAt": "2026-03-02T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                 "generatorURL": "", "fingerprint": "fp-x"}
        payload = {"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "oximeter",
                   "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "",
                   "truncatedAlerts": 0, "alerts": [alert]}
        answer = requests.post(f"{api.url}{PATH}", json=payload, headers={"Authorization": f"Bearer {TOKEN}"},
                               timeout=10)
        assert answer.status_code == 503
    finally:
        api.stop()

    clock[0] = at(3)
    assert analyzer.cycle()  # still full: told once, not every cycle
    assert receiver.accepted_keys()[opened] == 1

    unfill(conn)
    clock[0] = at(4)
    assert analyzer.cycle()
    (stored,) = store.query(IncidentQuery(limit=10), clock[0])
    assert (stored.id, stored.rule, stored.severity) == (inc.id, "xid_critical", "critical")
    assert store.pending_changes() == []  # handed to the outbox...
    rows = {(r.channel, r.idempotency_key): r.state for r in outbox.rows()}
    assert rows[("chat", f"{inc.id}:opened:1")] == "sent"  # ...as already sent: never paged twice
    assert rows[("chat", next(k for _c, k in rows if k.startswith("analyzer:store_failing:")))] == "sent"
    assert any(k.startswith("analyzer:store_back:") for _c, k in rows)
    outbox.deliver_due(clock[0].timestamp() + 3600)
    assert receiver.accepted_keys()[f"{inc.id}:opened:1"] == 1
    conn.close()
