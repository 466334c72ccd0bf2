"""Correlation (what groups, what stays apart) and the incident lifecycle with its exact change records."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from incident_cases import T0, at, ev, gpu

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis import rules as dx
from analyzer.diagnosis.case import Snapshot
from analyzer.diagnosis.correlate import correlate
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import ChangeEvent, Incident, IncidentSettings, IncidentTracker, findings

TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0", "node-1"], "embed": ["node-2"]},
                                               instances={"10.0.0.9:9400": "node-2"}))
SETTINGS = IncidentSettings(resolve_after_s=300, reopen_window_s=1800)
UTIL_LOW: Snapshot = {"gpu_utilization_p95": {gpu(): 0.32}}


def _signals(groups: list) -> list[list[str]]:
    return [[e.signal for e in g.events] for g in groups]


CORRELATION = [
    ("gpu and queue on one node join",
     [ev("gpu_temperature", 91, 70, node="node-0", gpu="0"),
      ev("queue_wait_p99", 3, 1, onset=2, node="node-0", service="chat")],
     [["gpu_temperature", "queue_wait_p99"]]),
    ("two nodes stay apart",
     [ev("gpu_temperature", 91, 70, node="node-0", gpu="0"), ev("ecc_corrected_increase", 300, 1, onset=1,
                                                                node="node-1", gpu="3")],
     [["gpu_temperature"], ["ecc_corrected_increase"]]),
    ("a service-wide symptom joins its nodes through the topology",
     [ev("gpu_temperature", 91, 70, node="node-0", gpu="0"), ev("ttft_p99", 3, 1, onset=2, service="chat"),
      ev("xid_paging", 1, 0, onset=3, node="node-2", gpu="0", xid="79")],
     [["gpu_temperature", "ttft_p99"], ["xid_paging"]]),
    ("an instance maps to its node",
     [ev("target_down", 0, 1, job="exporter", instance="10.0.0.9:9400"),
      ev("queue_wait_p99", 3, 1, onset=4, node="node-2", service="embed")],
     [["target_down", "queue_wait_p99"]]),
    ("same node but far apart in time stay apart",
     [ev("gpu_temperature", 91, 70, node="node-0", gpu="0", cleared=10),
      ev("queue_wait_p99", 3, 1, onset=26, node="node-0", service="chat")],
     [["gpu_temperature"], ["queue_wait_p99"]]),
    ("within the 15 min lookback they join",
     [ev("gpu_temperature", 91, 70, node="node-0", gpu="0", cleared=10),
      ev("queue_wait_p99", 3, 1, onset=24, node="node-0", service="chat")],
     [["gpu_temperature", "queue_wait_p99"]]),
    ("per-replica series do not chain nodes through their service",
     [ev("queue_wait_p99", 3, 1, node="node-0", service="chat"),
      ev("queue_wait_p99", 3, 1, onset=1, node="node-1", service="chat")],
     [["queue_wait_p99"], ["queue_wait_p99"]]),
]


@pytest.mark.parametrize(("name", "events", "expected"), CORRELATION, ids=[c[0] for c in CORRELATION])
def test_correlation(name: str, events: list[AnomalyEvent], expected: list[list[str]]) -> None:
    assert _signals(correlate(events, TOPO, now=at(30))) == expected


def test_topology_from_target_info_merges_with_config() -> None:
    info = Topology.from_target_info([{"service": "chat", "node": "node-5", "model": "m"}, {"service": "x"}])
    merged = TOPO.merged(info)
    assert merged.service_nodes["chat"] == frozenset({"node-0", "node-1", "node-5"})
    assert merged.services_on("node-5") == frozenset({"chat"})
    assert merged.keys_of({"service": "chat"}) == frozenset(
        {("node", "node-0"), ("node", "node-1"), ("node", "node-5"), ("service", "chat")})


# -- lifecycle ------------------------------------------------------------------------------------
Q = ev("queue_wait_p99", 4.8, 0.787, node="node-0", service="chat")
TEMP = ev("gpu_temperature", 88, 70, onset=3, node="node-0", gpu="0")
XID = ev("xid_paging", 1, 0, onset=6, node="node-0", gpu="0", xid="79")


def _step(tracker: IncidentTracker, events: list[AnomalyEvent], minute: float,
          snapshot: Snapshot = UTIL_LOW, changes: tuple[ChangeEvent, ...] = ()) -> list[tuple[str, int, str]]:
    now = at(minute)
    out, _ = tracker.step(findings(events, TOPO, now=now, snapshot=snapshot, settings=SETTINGS), now, changes)
    return [(c.kind, c.seq, c.severity) for c in out]


def test_open_update_resolve_reopen_exact_changes() -> None:
    tracker = IncidentTracker(SETTINGS)
    soft = replace(Q, value=0.6, baseline=0.25)
    assert _step(tracker, [soft], 2) == [("opened", 1, "warning")]
    (inc,) = tracker.incidents
    assert inc.id == "inc-20260302T100000-" + inc.id.rsplit("-", 1)[1]
    assert (inc.rule, inc.layer, inc.root_cause.signal) == (
        "scheduling_bottleneck", "scheduling", "queue_wait_p99")
    assert _step(tracker, [soft], 3) == []  # same evidence: nothing to say
    # A lower-layer cause joins (the GPU throttles for heat): the root cause moves to the GPU once
    # it has held for the dwell time.
    hot: Snapshot = {**UTIL_LOW, "gpu_temperature": {gpu(): 88.0}, "gpu_clock_thermal": {gpu(): 1.0}}
    assert _step(tracker, [soft, TEMP], 4, hot) == []
    assert tracker.incidents[0].root_cause.signal == "queue_wait_p99"
    assert _step(tracker, [soft, TEMP], 9, hot) == [("root_cause_changed", 2, "warning")]
    assert (tracker.incidents[0].rule, tracker.incidents[0].root_cause.signal) == (
        "thermal_throttle", "gpu_temperature")
    # The queue crosses the 1 s P0 line: severity up.
    assert _step(tracker, [Q, TEMP], 10, hot) == [("severity_up", 3, "critical")]
    assert _step(tracker, [Q, TEMP], 11, hot) == []
    cleared = [replace(Q, cleared_at=at(12)), replace(TEMP, cleared_at=at(13))]
    assert _step(tracker, cleared, 15) == []  # normal for 2 min < 5 min
    assert _step(tracker, cleared, 18) == [("resolved", 4, "critical")]
    (inc,) = tracker.incidents
    assert (inc.state, inc.resolved_at, inc.services, inc.nodes) == (
        "resolved", at(18), ("chat",), ("node-0",))
    assert [t.kind for t in inc.timeline] == [
        "opened", "evidence", "root_cause_changed", "severity_up", "resolved"]
    # Recurrence within the window re-opens the same incident (one "opened" record, a new seq).
    again = ev("gpu_temperature", 90, 70, onset=25, node="node-0", gpu="0")
    assert _step(tracker, [again], 26) == [("opened", 5, "critical")]
    assert [i.id for i in tracker.incidents] == [inc.id]
    assert tracker.incidents[0].state == "open"


def test_recurrence_after_the_window_opens_a_new_incident() -> None:
    tracker = IncidentTracker(SETTINGS)
    _step(tracker, [replace(TEMP, cleared_at=at(4))], 4)
    assert _step(tracker, [], 10) == [("resolved", 2, "info")]
    later = ev("gpu_temperature", 90, 70, onset=50, node="node-0", gpu="0")
    assert _step(tracker, [later], 51) == [("opened", 1, "info")]
    assert len(tracker.incidents) == 1 and tracker.incidents[0].first_onset == at(50)


def test_a_reopened_incident_needs_twice_the_quiet_to_resolve_again() -> None:
    # Resolve after 5 min of quiet; once it came back, after 10; after a second return, 20.
    tracker = IncidentTracker(SETTINGS)
    _step(tracker, [replace(TEMP, cleared_at=at(4))], 4)
    assert [kind for kind, _, _ in _step(tracker, [], 9)] == ["resolved"]
    back = ev("gpu_temperature", 90, 70, onset=12, node="node-0", gpu="0", cleared=12)
    assert [kind for kind, _, _ in _step(tracker, [back], 12)] == ["opened"]
    assert _step(tracker, [], 17) == []  # 5 min quiet: not enough any more
    assert [kind for kind, _, _ in _step(tracker, [], 22)] == ["resolved"]
    again = ev("gpu_temperature", 90, 70, onset=25, node="node-0", gpu="0", cleared=25)
    assert [kind for kind, _, _ in _step(tracker, [again], 25)] == ["opened"]
    assert _step(tracker, [], 35) == []
    assert [kind for kind, _, _ in _step(tracker, [], 45)] == ["resolved"]
    assert len(tracker.incidents) == 1


def test_a_fault_back_hours_later_reopens_its_incident_under_the_shipped_window() -> None:
    # A fault that goes quiet between busy hours (a cut KV pool at night) and returns two hours
    # after its incident resolved is the same fault: re-opened, not a second incident.
    tracker = IncidentTracker(IncidentSettings())
    _step(tracker, [replace(TEMP, cleared_at=at(4))], 4)
    assert [kind for kind, _, _ in _step(tracker, [], 20)] == ["resolved"]
    (first,) = tracker.incidents
    later = ev("gpu_temperature", 90, 70, onset=140, node="node-0", gpu="0")
    assert [kind for kind, _, _ in _step(tracker, [later], 141)] == ["opened"]
    assert [(i.id, i.state) for i in tracker.incidents] == [(first.id, "open")]


def test_unrelated_faults_make_separate_incidents_and_keys_are_stable() -> None:
    tracker = IncidentTracker(SETTINGS)
    other = ev("ecc_corrected_increase", 300, 1, onset=1, node="node-1", gpu="3")
    now = at(3)
    changes, _ = tracker.step(findings([XID, other], TOPO, now=now, settings=SETTINGS), now)
    rules = sorted(i.rule for i in tracker.incidents)
    assert rules == ["ecc_storm", "xid_critical"]
    assert sorted(c.key for c in changes) == sorted(f"{i.id}:opened:1" for i in tracker.incidents)


def test_old_cleared_events_do_not_open_incidents() -> None:
    tracker = IncidentTracker(SETTINGS)
    assert _step(tracker, [replace(TEMP, cleared_at=at(5))], 30) == []
    assert tracker.incidents == []


def test_seed_001_compound_impact_and_change_events() -> None:
    tracker = IncidentTracker(SETTINGS)
    events = [ev("dependency_latency_p99", 0.8, 0.02, node="node-0", dependency="vectordb"),
              ev("cache_hit_ratio", 0.6, 0.95, onset=1, node="node-0", cache="redis"),
              ev("queue_wait_p99", 3.0, 0.5, onset=3, node="node-0", service="chat"),
              ev("gpu_utilization_p95", 0.32, 0.8, onset=5, node="node-0", gpu="0")]
    deploy = ChangeEvent(at(-5), "deploy", "vectordb 2.4 import", (("node", "node-0"),))
    elsewhere = ChangeEvent(at(-5), "deploy", "other", (("node", "node-7"),))
    _step(tracker, events, 7, changes=(deploy, elsewhere))
    (inc,) = tracker.incidents
    assert (inc.rule, inc.layer, inc.root_cause.signal) == ("dependency_degraded", "dependency",
                                                           "dependency_latency_p99")
    assert inc.impact_signals == ("gpu_utilization_p95", "queue_wait_p99")
    assert {e.signal: e.role for e in inc.evidence} == {
        "dependency_latency_p99": "cause", "cache_hit_ratio": "cause", "queue_wait_p99": "impact",
        "gpu_utilization_p95": "impact"}
    assert inc.changes == (deploy,)
    assert inc.runbook == "docs/runbook.md#dependency_degraded"


def test_a_change_goes_beside_the_incident_it_names_else_its_node_else_its_service() -> None:
    """Two incidents on two nodes of one service: an alert the relay matched to one of them, or a
    change on one node, must not show up in the other's story (and its chat messages)."""
    tracker = IncidentTracker(SETTINGS)
    events = [ev("gpu_temperature", 91, 70, node="node-0", gpu="0"),
              ev("ecc_corrected_increase", 300, 1, onset=1, node="node-1", gpu="3")]
    _step(tracker, events, 3)
    by_node = {inc.nodes[0]: inc for inc in tracker.incidents}
    assert sorted(by_node) == ["node-0", "node-1"]
    named = ChangeEvent(at(2), "alert", "relayed alert",
                        (("incident", by_node["node-0"].id), ("node", "node-1"), ("service", "chat")),
                        "alertmanager")
    on_node = ChangeEvent(at(2), "restart", "engine restart", (("node", "node-1"), ("service", "chat")))
    service_wide = ChangeEvent(at(2), "deploy", "chat 1.2", (("service", "chat"),))
    _step(tracker, events, 4, changes=(named, on_node, service_wide))
    by_node = {inc.nodes[0]: inc for inc in tracker.incidents}
    assert by_node["node-0"].changes == (named, service_wide)
    assert by_node["node-1"].changes == (on_node, service_wide)


def test_incident_round_trips_through_json() -> None:
    tracker = IncidentTracker(SETTINGS)
    _step(tracker, [Q, TEMP], 5, changes=(ChangeEvent(at(1), "restart", "engine restart"),))
    (inc,) = tracker.incidents
    assert Incident.from_dict(inc.to_dict()) == inc
    assert inc.first_onset == T0 and inc.opened_at == T0 + timedelta(minutes=5)


THERMAL_CTX: Snapshot = {"gpu_temperature": {gpu(): 92.0}, "gpu_sm_clock_ratio": {gpu(): 0.45},
                         "gpu_clock_thermal": {gpu(): 1.0}, "gpu_utilization_p95": {gpu(): 0.3}}
COOL: Snapshot = {"gpu_temperature": {gpu(): 60.0}, "gpu_sm_clock_ratio": {gpu(): 1.0},
                  "gpu_clock_thermal": {gpu(): 0.0}, "gpu_utilization_p95": {gpu(): 0.3}}


def test_recovery_does_not_rejudge_the_diagnosis() -> None:
    """Seed 003 §4.1 replayed: temperature first, then the queue; the GPU cools before the queue drains."""
    tracker = IncidentTracker(SETTINGS)
    temp = ev("gpu_temperature", 92, 80, node="node-0", gpu="0")
    clock = ev("gpu_sm_clock_ratio", 0.45, 1.0, node="node-0", gpu="0")
    queue = ev("queue_wait_p99", 0.9, 0.3, onset=4, node="node-0", service="chat")
    assert _step(tracker, [temp, clock], 2, THERMAL_CTX) == [("opened", 1, "warning")]
    assert (tracker.incidents[0].rule, tracker.incidents[0].root_cause.signal) == (
        "thermal_throttle", "gpu_temperature")
    # The queue joins as impact: same rule, same root cause, nothing to notify.
    assert _step(tracker, [temp, clock, queue], 6, THERMAL_CTX) == []
    cooled = [replace(temp, cleared_at=at(20)), replace(clock, cleared_at=at(20))]
    assert _step(tracker, [*cooled, queue], 21, COOL) == []  # queue still draining, GPU cool
    assert _step(tracker, [*cooled, replace(queue, cleared_at=at(24))], 25, COOL) == []  # 1 min quiet
    drained = [*cooled, replace(queue, cleared_at=at(24))]
    assert _step(tracker, drained, 30, COOL) == [("resolved", 2, "warning")]
    assert tracker.incidents[0].rule == "thermal_throttle"
    assert [t.kind for t in tracker.incidents[0].timeline] == [
        "opened", "evidence", "resolved"]


def test_a_late_symptom_after_the_cause_cleared_does_not_reroot() -> None:
    """504s at the edge, cleared; a TTFT rise joins minutes later (drill ingress_errors): it is
    evidence on the incident, not a new root cause that no rule explains."""
    tracker = IncidentTracker(SETTINGS)
    e504 = ev("error_504_ratio", 0.13, 0.01, node="node-0", service="chat", route="/v1/chat/completions")
    assert _step(tracker, [e504], 2, {}) == [("opened", 1, "critical")]
    late = ev("engine_ttft_p99", 0.22, 0.1, onset=9, node="node-0", model="m")
    assert _step(tracker, [replace(e504, cleared_at=at(8)), late], 11, {}) == []
    inc = tracker.incidents[0]
    assert (inc.rule, inc.root_cause.signal, inc.layer) == ("ingress_errors", "error_504_ratio", "ingress")
    assert [t.kind for t in inc.timeline] == ["opened", "evidence"]


def test_draining_queue_after_a_spike_keeps_capacity_exhausted() -> None:
    tracker = IncidentTracker(SETTINGS)
    queue = ev("queue_wait_p99", 19.8, 1.0, node="node-0", service="chat")
    util = ev("gpu_utilization_p95", 1.0, 0.95, onset=1, node="node-0", gpu="0")
    busy: Snapshot = {"gpu_utilization_p95": {gpu(): 1.0}}
    assert _step(tracker, [queue, util], 3, busy) == [("opened", 1, "critical")]
    assert tracker.incidents[0].rule == "capacity_exhausted"
    # Traffic back to normal: utilisation falls while the queue drains; no rule matches any more.
    assert _step(tracker, [queue, util], 30, {"gpu_utilization_p95": {gpu(): 0.6}}) == []
    assert (tracker.incidents[0].rule, tracker.incidents[0].root_cause.signal) == (
        "capacity_exhausted", "queue_wait_p99")


def test_members_clearing_one_by_one_after_resolve_open_nothing_new() -> None:
    tracker = IncidentTracker(SETTINGS)
    temp = ev("gpu_temperature", 91, 70, node="node-0", gpu="0", cleared=4)
    clock = ev("gpu_sm_clock_ratio", 0.5, 1.0, node="node-0", gpu="0", cleared=4)
    assert _step(tracker, [temp, clock], 3) == [("opened", 1, "warning")]
    assert _step(tracker, [temp, clock], 10) == [("resolved", 2, "warning")]
    # A slow member clears later and a cleared group is still "recent": not a new incident.
    late = replace(clock, cleared_at=at(12))
    assert _step(tracker, [temp, late], 13) == []
    assert _step(tracker, [temp, late], 20) == []
    assert len(tracker.incidents) == 1


def test_stale_cleared_group_does_not_split_the_open_incident() -> None:
    tracker = IncidentTracker(SETTINGS)
    early = [ev("ttft_p99", 2.0, 0.5, node="node-0", service="chat"),
             ev("request_p99", 6.0, 2.0, node="node-0", service="chat", route="/v1/chat")]
    assert _step(tracker, early, 2) == [("opened", 1, "warning")]
    # 40 min later: the early symptoms have cleared (still in the live window), a dependency
    # fault starts on the same node and keeps the incident open; the two groups are > 15 min apart.
    dep = ev("dependency_latency_p99", 0.9, 0.05, onset=40, node="node-0", dependency="vectordb")
    cleared = [*(replace(e, cleared_at=at(5)) for e in early), dep]
    assert _step(tracker, cleared, 42) == []  # the candidate's dwell
    changes = _step(tracker, cleared, 47)
    assert changes == [("root_cause_changed", 2, "warning")]  # carrying the severity it rose to
    assert [(i.state, i.rule) for i in tracker.incidents] == [("open", "dependency_degraded")]


def test_a_resolved_throttles_cleared_queue_does_not_join_another_nodes_shortage() -> None:
    tracker = IncidentTracker(SETTINGS)
    busy: Snapshot = {"gpu_utilization_p95": {gpu("node-0"): 0.97, gpu("node-1"): 0.96}}
    hot: Snapshot = {**busy, "gpu_temperature": {gpu("node-1"): 91.0},
                     "gpu_sm_clock_ratio": {gpu("node-1"): 0.5}, dx.THERMAL_REASON: {gpu("node-1"): 1.0}}
    throttle = [ev("gpu_temperature", 91, 70, node="node-1", gpu="0", cleared=6),
                ev("queue_wait_p99", 3.0, 0.01, node="node-1", service="chat", cleared=6)]
    short = ev("queue_wait_p99", 2.5, 0.01, onset=1, node="node-0", service="chat")
    _step(tracker, [*throttle, short], 3, hot)
    assert sorted((i.rule, i.nodes) for i in tracker.incidents) == [
        ("capacity_exhausted", ("node-0",)), ("thermal_throttle", ("node-1",))]
    # The GPU cools; node-1's queue clears with it, its incident resolves, and its cleared events,
    # still inside the lookback, read as a capacity problem on busy GPUs: node-1's, not node-0's.
    for minute in range(7, 16):
        _step(tracker, [*throttle, short], minute, busy)
    states = {i.rule: (i.state, i.nodes, {dict(k).get("node") for _, k in i.members})
              for i in tracker.incidents}
    assert states == {"capacity_exhausted": ("open", ("node-0",), {"node-0"}),
                      "thermal_throttle": ("resolved", ("node-1",), {"node-1"})}, states


BUSY: Snapshot = {"gpu_utilization_p95": {gpu("node-0"): 0.97, gpu("node-1"): 0.96, gpu("node-2"): 0.97}}
SHORTAGES = [
    # A fleet too small for its traffic: every replica of the service queues at about the same time.
    ("one service's nodes all short: one incident", ["node-0", "node-1"], 1),
    # Two services short at once are two shortages (and two owners).
    ("two services short: two incidents", ["node-0", "node-2"], 2),
]


@pytest.mark.parametrize(("name", "nodes", "expected"), SHORTAGES, ids=[c[0] for c in SHORTAGES])
def test_a_capacity_shortage_of_one_service_is_one_incident(name: str, nodes: list[str],
                                                             expected: int) -> None:
    tracker = IncidentTracker(SETTINGS)
    service = {"node-0": "chat", "node-1": "chat", "node-2": "embed"}
    events = [ev("queue_wait_p99", 2.5, 0.01, onset=i, node=n, service=service[n])
              for i, n in enumerate(nodes)]
    told = [*_step(tracker, events[:1], 2, BUSY), *_step(tracker, events, 3, BUSY),
            *_step(tracker, events, 4, BUSY)]
    assert [c[0] for c in told] == ["opened"] * expected
    assert len(tracker.incidents) == expected
    assert all(i.rule == "capacity_exhausted" for i in tracker.incidents)
    # The first node seen keeps the root cause; the other node's queue is its evidence.
    first = tracker.incidents[0]
    assert dict(first.root_cause.labels)["node"] == "node-0"
    assert first.nodes == (("node-0", "node-1") if expected == 1 else ("node-0",))


def test_a_throttled_nodes_queue_stays_with_its_own_incident_not_an_earlier_shortage() -> None:
    tracker = IncidentTracker(SETTINGS)
    busy: Snapshot = {"gpu_utilization_p95": {gpu("node-0"): 0.97, gpu("node-1"): 0.96}}
    hot: Snapshot = {**busy, "gpu_temperature": {gpu("node-1"): 91.0},
                     "gpu_sm_clock_ratio": {gpu("node-1"): 0.5}, dx.THERMAL_REASON: {gpu("node-1"): 1.0}}
    short = ev("queue_wait_p99", 2.5, 0.01, node="node-0", service="chat")  # the shortage starts first
    temp = ev("gpu_temperature", 91, 70, onset=1, node="node-1", gpu="0")
    queue = ev("queue_wait_p99", 3.0, 0.01, onset=2, node="node-1", service="chat")
    _step(tracker, [short], 2, busy)
    _step(tracker, [short, temp, queue], 4, hot)
    assert sorted((i.rule, i.nodes) for i in tracker.incidents) == [
        ("capacity_exhausted", ("node-0",)), ("thermal_throttle", ("node-1",))]
    # The GPU cools while node-1's queue is still draining: that queue, read as a capacity problem on
    # busy GPUs, is still node-1's incident's evidence, not the shortage's that began before it.
    cooled = [short, replace(temp, cleared_at=at(6)), queue]
    for minute in range(7, 12):
        _step(tracker, cooled, minute, busy)
    states = {i.id: (i.nodes, {dict(k).get("node") for _, k in i.members}) for i in tracker.incidents}
    assert sorted(states.values()) == [(("node-0",), {"node-0"}), (("node-1",), {"node-1"})], states
