"""The incident store: restart into the same open incidents with no second "opened", queries, stats."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from incident_cases import at, ev, gpu
from pg_server import StoreSpace

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import ChangeEvent, IncidentSettings, IncidentTracker, findings
from analyzer.incidents.store import IncidentQuery, IncidentStore, QueryError, parse_duration
from oximeter.store import connect

TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0"], "embed": ["node-1"]}))
SETTINGS = IncidentSettings(resolve_after_s=300, reopen_window_s=1800)
SNAP = {"gpu_utilization_p95": {gpu(): 0.32}}
Q = ev("queue_wait_p99", 4.8, 0.787, node="node-0", service="chat")
XID = ev("xid_paging", 1, 0, onset=2, node="node-1", gpu="3", xid="79")


def cycle(store: IncidentStore, tracker: IncidentTracker, events: list[AnomalyEvent],
          minute: float) -> list[str]:
    now = at(minute)
    changes, touched = tracker.step(findings(events, TOPO, now=now, snapshot=SNAP, settings=SETTINGS), now)
    store.save(touched, changes)
    return [c.key for c in changes]


def test_restart_resumes_open_incidents_without_a_second_opened(stores: StoreSpace) -> None:
    path = stores / "oximeter.db"
    store = IncidentStore(connect(path))
    first = IncidentTracker(SETTINGS)
    keys = cycle(store, first, [Q], 2)
    (inc,) = first.incidents
    assert keys == [f"{inc.id}:opened:1"]
    assert [c.key for c in store.pending_changes()] == keys
    store.mark_emitted(keys, at(2))
    store.conn.close()  # the daemon dies mid-incident

    store = IncidentStore(connect(path))
    again = IncidentTracker(SETTINGS, store.tracked(at(3), SETTINGS.reopen_window_s))
    assert [i.id for i in again.incidents] == [inc.id]
    assert cycle(store, again, [Q], 3) == []
    assert store.pending_changes() == []
    resolved = cycle(store, again, [replace(Q, cleared_at=at(4))], 10)
    assert resolved == [f"{inc.id}:resolved:2"]
    assert [c["kind"] for c in store.changes_of(inc.id)] == ["opened", "resolved"]
    assert [c["emitted_at"] is not None for c in store.changes_of(inc.id)] == [True, False]


def test_unemitted_change_survives_a_crash_and_saving_twice_keeps_one(stores: StoreSpace) -> None:
    store = IncidentStore(connect(stores / "s.db"))
    tracker = IncidentTracker(SETTINGS)
    now = at(2)
    changes, touched = tracker.step(findings([XID], TOPO, now=now, settings=SETTINGS), now)
    store.save(touched, changes)
    store.save(touched, changes)
    store.conn.close()
    store = IncidentStore(connect(stores / "s.db"))
    assert [c.key for c in store.pending_changes()] == [c.key for c in changes]


@pytest.fixture
def filled(stores: StoreSpace) -> IncidentStore:
    store = IncidentStore(connect(stores / "q.db"))
    tracker = IncidentTracker(SETTINGS)
    cycle(store, tracker, [Q, XID], 3)
    cycle(store, tracker, [replace(Q, cleared_at=at(4)), XID], 10)
    return store


QUERIES = [
    ({}, ["xid_critical", "scheduling_bottleneck"]),
    ({"state": "open"}, ["xid_critical"]),
    ({"state": "resolved"}, ["scheduling_bottleneck"]),
    ({"layer": "infrastructure"}, ["xid_critical"]),
    ({"layer": "ingress"}, []),
    ({"service": "chat"}, ["scheduling_bottleneck"]),
    ({"service": "embed"}, ["xid_critical"]),
    ({"node": "node-1"}, ["xid_critical"]),
    ({"node": "node-9"}, []),
    ({"rule": "scheduling_bottleneck"}, ["scheduling_bottleneck"]),
    ({"since": "1m"}, ["xid_critical"]),  # now is minute 20: the resolved one ended at minute 10
    ({"since": "24h"}, ["xid_critical", "scheduling_bottleneck"]),
    ({"limit": "1"}, ["xid_critical"]),
]


@pytest.mark.parametrize(("params", "rules"), QUERIES, ids=[str(p) for p, _ in QUERIES])
def test_query_filters(filled: IncidentStore, params: dict[str, str], rules: list[str]) -> None:
    found = filled.query(IncidentQuery.from_params(params), at(20))
    assert [i.rule for i in found] == rules


BAD = [
    ({"since": "yesterday"}, "since: expected a duration such as 90s, 15m, 24h or 7d, got 'yesterday'"),
    ({"since": "999999999999999d"}, "since: '999999999999999d' is out of range (at most 100y)"),
    ({"since": "-2h"}, "since: expected a duration that is not negative, got '-2h'"),
    ({"layer": "gpu"}, "layer: expected one of infrastructure, platform, engine, dependency, scheduling, "
                       "ingress, got 'gpu'"),
    ({"state": "closed"}, "state: expected open or resolved, got 'closed'"),
    ({"rule": "nope"}, "rule: unknown rule 'nope'"),
    ({"limit": "-3"}, "limit: expected an integer in 1..10000, got -3"),
    ({"limit": "0"}, "limit: expected an integer in 1..10000, got 0"),
    ({"limit": "\u00b2"}, "limit: expected an integer in 1..10000, got '\u00b2'"),
    ({"node": "n" * 300}, "node: longer than 256 characters"),
    ({"colour": "red"}, "unknown parameter(s): colour"),
]


@pytest.mark.parametrize(("params", "reason"), BAD, ids=[str(p) for p, _ in BAD])
def test_malformed_filters_name_the_reason(params: dict[str, str], reason: str) -> None:
    with pytest.raises(QueryError) as caught:
        IncidentQuery.from_params(params)
    assert str(caught.value) == reason


def test_stats(filled: IncidentStore) -> None:
    stats = filled.stats(timedelta(days=7), at(20))
    assert stats == {"since_s": 604800.0, "total": 2, "open": 1,
                     "by_layer": {"infrastructure": 1, "scheduling": 1},
                     "by_rule": {"scheduling_bottleneck": 1, "xid_critical": 1},
                     "mttd_s": (180 + 60) / 2, "mttr_s": 600.0}


def test_change_events_acks_and_silences(filled: IncidentStore) -> None:
    change = ChangeEvent(at(1), "deploy", "engine 0.6.3", (("node", "node-0"),))
    new_id = filled.record_change_event(change, at(1))
    assert filled.change_events(at(0), at(5)) == [replace(change, id=new_id)]
    assert filled.change_events(at(2), at(5)) == []
    inc = filled.query(IncidentQuery(state="open"), at(20))[0]
    assert filled.ack(inc.id, "alice", "looking", at(21))
    assert not filled.ack("inc-missing", "alice", "", at(21))
    assert filled.silence(inc.id, at(60), "bob", "maintenance", at(21))
    assert filled.silenced(inc.id, at(59)) and not filled.silenced(inc.id, at(61))
    assert filled.annotations_of(inc.id) == {
        "acks": [{"at": "2026-03-02T10:21:00Z", "by": "alice", "note": "looking"}],
        "silences": [{"at": "2026-03-02T10:21:00Z", "until": "2026-03-02T11:00:00Z", "by": "bob",
                      "note": "maintenance"}]}


def test_parse_duration() -> None:
    assert [parse_duration(t).total_seconds() for t in ("90s", "15m", "24h", "7d", "1.5h", "2w")] == [
        90, 900, 86400, 604800, 5400, 1209600]
