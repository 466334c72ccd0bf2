"""Active/standby analyzers on one store (SQLite and PostgreSQL): one leads by lease, the standby
runs its cycles but neither opens nor tells, and takes over once the lease lapses: the open
incident goes on (no second "opened"), what the leader had not handed on is told once, and the
take-over is one timeline entry and one notice. Time is driven by clocks, never slept."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from incident_cases import at, ev
from pg_server import StoreSpace

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import Snapshot
from analyzer.diagnosis.topology import Topology
from analyzer.incidents.lifecycle import Change, Incident, IncidentSettings
from analyzer.incidents.store import IncidentStore
from analyzer.service.daemon import Analyzer
from analyzer.service.leadership import Gate, Leadership
from analyzer.service.pipeline import snapshot_from_frames
from analyzer.signals.frame import SeriesFrame
from oximeter.lease import Lease
from oximeter.store import connect

LEASE_S = 30.0


class Recorder:
    """A notifier that keeps what it was given."""

    def __init__(self) -> None:
        self.changes: list[str] = []
        self.notices: list[tuple[str, str]] = []

    def notify(self, change: Change, incident: Incident | None) -> None:
        self.changes.append(change.key)

    def notice(self, key: str, text: str) -> None:
        self.notices.append((key, text))


class Fixed:
    """A pipeline that finds the same events every cycle and counts its runs."""

    def __init__(self, events: list[AnomalyEvent]) -> None:
        self.events, self.runs = events, 0

    def run(self, now: datetime) -> tuple[list[AnomalyEvent], dict[str, SeriesFrame]]:
        self.runs += 1
        return self.events, {}

    def snapshot(self, frames: Mapping[str, SeriesFrame], now: datetime) -> Snapshot:
        return snapshot_from_frames(frames)

    def remember(self, spans: Iterable[Any]) -> None:
        pass


class Replica:
    """One analyzer of the pair, with its own connection, notifier and pipeline."""

    def __init__(self, store_path: str, name: str, wall: list[float], now: list[datetime],
                 shard: str = "default") -> None:
        self.pipeline = Fixed([ev("xid_paging", 1, 0, node="n1", gpu="2", xid="79")])
        self.recorder = Recorder()
        self.store = IncidentStore(connect(store_path), shard)
        gate = Gate(self.recorder)
        lease = Lease(self.store.conn, shard, LEASE_S, holder=name, clock=lambda: wall[0])
        self.leadership = Leadership(lease, gate, renew_s=10.0)
        self.analyzer = Analyzer(self.pipeline, self.store, IncidentSettings(), Topology(), gate,
                                 clock=lambda: now[0], leadership=self.leadership)

    def close(self) -> None:
        self.store.conn.close()


def _incidents(store: IncidentStore) -> list[tuple[str, str]]:
    rows = store.conn.execute("SELECT id, state FROM incidents ORDER BY id").fetchall()
    return [(r[0], r[1]) for r in rows]


def test_standby_stays_quiet_then_takes_over_once(stores: StoreSpace) -> None:
    path, wall, now = stores / "ha.db", [1000.0], [at(2)]
    a, b = Replica(path, "a", wall, now), Replica(path, "b", wall, now)
    try:
        assert a.analyzer.cycle() and b.analyzer.cycle()
        assert a.leadership.leading and not b.leadership.leading
        leader = "oximeter_analyzer_leader"
        assert [r.analyzer.metrics.registry.get_sample_value(leader) for r in (a, b)] == [1, 0]
        (incident_id, _), = _incidents(a.store)
        assert a.recorder.changes == [f"{incident_id}:opened:1"]
        # The standby ran its cycle (windows warm) but neither opened nor told anything.
        assert b.pipeline.runs == 1 and b.recorder.changes == [] and b.recorder.notices == []

        # The leader renews, then dies after storing a change it never handed on.
        wall[0], now[0] = 1010.0, at(3)
        assert a.analyzer.cycle()
        a.store.conn.execute("UPDATE incident_changes SET emitted_at = NULL")
        a.close()
        wall[0], now[0] = 1010.0 + LEASE_S - 1, at(4)
        assert b.analyzer.cycle() and not b.leadership.leading  # the lease has not lapsed yet
        wall[0], now[0] = 1010.0 + LEASE_S + 1, at(5)
        assert b.analyzer.cycle() and b.leadership.leading
        assert b.analyzer.metrics.registry.get_sample_value(leader) == 1
        assert _incidents(b.store) == [(incident_id, "open")]
        assert b.recorder.changes == [f"{incident_id}:opened:1"]  # handed on once, never re-opened
        (key, text), = b.recorder.notices
        assert key == "analyzer:takeover:default:2" and "took over shard default from a" in text
        timeline = b.store.get(incident_id).timeline
        assert [(t.kind, t.text) for t in timeline if t.kind == "takeover"] == [("takeover", text)]
        assert b.store.pending_changes() == []

        wall[0], now[0] = wall[0] + 10, at(6)
        assert b.analyzer.cycle()
        assert len(b.recorder.notices) == 1 and b.recorder.changes == [f"{incident_id}:opened:1"]
        # The old leader back (a new process): it stands by behind the new one.
        c = Replica(path, "a-restarted", wall, now)
        assert c.analyzer.cycle() and not c.leadership.leading and c.recorder.changes == []
        c.close()
    finally:
        a.close()
        b.close()


def test_hand_over_and_a_lost_shard_told_once(stores: StoreSpace) -> None:
    path, wall, now = stores / "ha.db", [1000.0], [at(2)]
    a, b = Replica(path, "a", wall, now), Replica(path, "b", wall, now)
    other = Replica(path, "c", wall, now, shard="east")
    try:
        assert a.analyzer.cycle() and b.analyzer.cycle() and other.analyzer.cycle()
        assert a.leadership.leading and other.leadership.leading and not b.leadership.leading
        # A clean stop hands the lease on: the standby leads on its next cycle, nothing announced.
        a.leadership.release()
        assert b.analyzer.cycle() and b.leadership.leading and b.recorder.notices == []
        # Shard east's only analyzer stops: one notice after a lease, from one analyzer only.
        other.leadership.release()
        wall[0] += LEASE_S - 1
        assert b.analyzer.cycle() and b.recorder.notices == []
        wall[0] += 2
        assert b.analyzer.cycle() and a.analyzer.cycle() and b.analyzer.cycle()
        (key, text), = b.recorder.notices
        assert key == "analyzer:shard_lapsed:east:1" and "shard east has no analyzer" in text
        assert a.recorder.notices == [] and other.recorder.notices == []
    finally:
        for replica in (a, b, other):
            replica.close()


def test_between_cycles_the_leader_renews_and_a_standby_wakes(stores: StoreSpace) -> None:
    path, wall, now = stores / "ha.db", [1000.0], [at(2)]
    a, b = Replica(path, "a", wall, now), Replica(path, "b", wall, now)
    try:
        assert a.analyzer.cycle() and b.analyzer.cycle()
        wall[0] += LEASE_S - 1
        assert not a.leadership.tick()  # renewed between cycles: the standby has nothing to wake for
        wall[0] += LEASE_S - 1
        assert not b.leadership.tick()
        wall[0] += 2
        assert b.leadership.tick()  # the lease lapsed: the standby's cycle should run now
        assert b.analyzer.cycle() and b.leadership.leading
        # The old leader learns at its next renewal that it lost the lease, and stops telling.
        assert not a.leadership.tick()
        assert not a.leadership.leading and not a.leadership.gate.open
    finally:
        a.close()
        b.close()


def test_keep_wakes_a_waiting_standby_when_the_lease_lapses(stores: StoreSpace) -> None:
    """The daemon's loop: a standby pausing for a long interval is woken by the lease task as soon
    as the leader's lease has expired (the wall clock is already past it here)."""
    path, wall, now = stores / "ha.db", [1000.0], [at(2)]
    a, b = Replica(path, "a", wall, now), Replica(path, "b", wall, now)

    async def standby_wakes() -> float:
        stop = asyncio.Event()
        keeper = asyncio.create_task(b.leadership.keep(stop))
        started = asyncio.get_running_loop().time()
        await b.leadership.pause(stop, 600.0)
        waited = asyncio.get_running_loop().time() - started
        stop.set()
        await keeper
        return waited

    try:
        assert a.analyzer.cycle() and b.analyzer.cycle() and not b.leadership.leading
        wall[0] += LEASE_S + 1
        # Its first look finds the lapse; the next would be 300 s on, the pause ends at 600 s.
        b.leadership.renew_s = 300.0
        assert asyncio.run(standby_wakes()) < 60
        assert not b.leadership.wake.is_set()  # a pause clears its wake-up
    finally:
        a.close()
        b.close()


def test_shards_share_the_store_and_each_tracks_its_own(stores: StoreSpace) -> None:
    path, wall, now = stores / "ha.db", [1000.0], [at(2)]
    east, west = Replica(path, "e", wall, now, shard="east"), Replica(path, "w", wall, now, shard="west")
    west.pipeline.events = [ev("xid_paging", 1, 0, node="n7", gpu="0", xid="79")]
    try:
        assert east.analyzer.cycle() and west.analyzer.cycle()
        both = _incidents(east.store)
        assert len(both) == 2 and _incidents(west.store) == both  # one store: the whole fleet
        (east_id,) = [i.id for i in east.store.tracked(now[0], 0)]
        (west_id,) = [i.id for i in west.store.tracked(now[0], 0)]
        assert {east_id, west_id} == {i for i, _ in both}
        assert east.recorder.changes == [f"{east_id}:opened:1"]
        assert west.recorder.changes == [f"{west_id}:opened:1"]
        # Each shard's leader goes on with its own incidents only: nothing of the other's resolves.
        east.store.conn.execute("UPDATE incident_changes SET emitted_at = NULL")
        assert [c.incident_id for c in east.store.pending_changes()] == [east_id]
        east.store.mark_emitted([f"{east_id}:opened:1"], now[0])
        now[0] = at(30)
        east.pipeline.events = []
        assert east.analyzer.cycle() and west.analyzer.cycle()
        states = dict(_incidents(east.store))
        assert (states[east_id], states[west_id]) == ("resolved", "open")
        assert east.recorder.changes == [f"{east_id}:opened:1", f"{east_id}:resolved:2"]
    finally:
        east.close()
        west.close()
