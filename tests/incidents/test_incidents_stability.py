"""Stable root causes and the message budget: the tracker over cycles whose evidence arrives late,
alternates, or outlives its cause (as under late scrapes and slow cycles)."""

from __future__ import annotations

from dataclasses import replace

from incident_cases import at, ev, gpu

from analyzer.detection.events import AnomalyEvent
from analyzer.diagnosis.case import THERMAL_REASON, Snapshot
from analyzer.diagnosis.topology import Topology, TopologySettings
from analyzer.incidents.lifecycle import ChangeEvent, IncidentSettings, IncidentTracker, findings

TOPO = Topology.from_settings(TopologySettings(services={"chat": ["node-0"]}))
SETTINGS = IncidentSettings(resolve_after_s=300, reopen_window_s=1800, root_cause_dwell_s=300)
MODEL = (("model", "m"), ("node", "node-0"))
HOT: Snapshot = {"gpu_temperature": {gpu(index="1"): 92.0}, "gpu_sm_clock_ratio": {gpu(index="1"): 0.45},
                 THERMAL_REASON: {gpu(index="1"): 1.0}, "gpu_utilization_p95": {gpu(index="1"): 0.9}}
# The throttle has ended: clock back to max, no thermal reason, the card still cooling past 85 °C,
# and the node's GPUs busy working off the backlog.
ENDED: Snapshot = {"gpu_temperature": {gpu(index="1"): 88.0}, "gpu_sm_clock_ratio": {gpu(index="1"): 1.0},
                   THERMAL_REASON: {gpu(index="1"): 0.0}, "gpu_utilization_p95": {gpu(index="1"): 0.95}}


def _step(tracker: IncidentTracker, events: list[AnomalyEvent], minute: float, snapshot: Snapshot,
          changes: tuple[ChangeEvent, ...] = ()) -> list[tuple[str, str]]:
    now = at(minute)
    out, _ = tracker.step(findings(events, TOPO, now=now, snapshot=snapshot, settings=SETTINGS), now, changes)
    return [(c.kind, c.severity) for c in out]


def test_a_queue_that_outlives_a_thermal_throttle_stays_its_impact() -> None:
    """The live thermal fault: the queue wait crosses 1 s after the throttle ended (a slow cycle, a
    late scrape); it is the throttle's impact, never a new root cause nor a P0."""
    tracker = IncidentTracker(SETTINGS)
    temp = ev("gpu_temperature", 92, 70, node="node-0", gpu="1")
    assert _step(tracker, [temp], 1, HOT) == [("opened", "warning")]
    queue = ev("queue_wait_p99", 1.6, 0.2, onset=2, node="node-0", service="chat")
    for minute in range(3, 20):
        assert _step(tracker, [temp, queue], minute, ENDED) == []
    (inc,) = tracker.incidents
    assert (inc.rule, inc.layer, inc.severity) == ("thermal_throttle", "infrastructure", "warning")
    assert dict(inc.root_cause.labels) == {"gpu": "1", "node": "node-0"}
    assert {e.signal: e.role for e in inc.evidence}["queue_wait_p99"] == "impact"


def test_kv_usage_and_preemptions_taking_turns_cannot_flap() -> None:
    """KV usage hovering about its 95 % line makes the rule name KV usage one cycle and the
    preemptions the next: one cause of one engine, so the root cause never changes."""
    tracker = IncidentTracker(SETTINGS)
    queue = ev("queue_wait_p99", 3.0, 0.5, node="node-0", service="chat")
    preempt = ev("preemption_rate", 0.7, 0.1, node="node-0", model="m")
    told = []
    for minute in range(2, 60):
        usage = 0.97 if minute % 2 else 0.93
        told += _step(tracker, [queue, preempt], minute, {"kv_cache_usage": {MODEL: usage}})
    assert [kind for kind, _ in told] == ["opened"]
    (inc,) = tracker.incidents
    assert inc.rule == "kv_pressure"
    assert [t.kind for t in inc.timeline if t.kind == "root_cause_changed"] == []


def test_a_gpu_cause_outranks_the_node_symptom_when_its_signal_crosses_later() -> None:
    """The node's inter-token latency crosses first; the throttled GPU's own temperature crosses
    later: once it has held for the dwell time the incident names the GPU, in one change."""
    tracker = IncidentTracker(SETTINGS)
    itl = ev("engine_itl_peer", 0.09, 0.03, node="node-0", model="m")
    quiet: Snapshot = {"gpu_utilization_p95": {gpu(index="1"): 0.6}}
    assert _step(tracker, [itl], 1, quiet) == [("opened", "warning")]
    assert tracker.incidents[0].root_cause.signal == "engine_itl_peer"
    temp = ev("gpu_temperature", 92, 70, onset=3, node="node-0", gpu="1")
    assert _step(tracker, [itl, temp], 4, HOT) == []  # stronger, but not yet for the dwell time
    assert tracker.incidents[0].root_cause.signal == "engine_itl_peer"
    assert _step(tracker, [itl, temp], 9, HOT) == [("root_cause_changed", "warning")]
    inc = tracker.incidents[0]
    assert (inc.rule, dict(inc.root_cause.labels)) == ("thermal_throttle", {"gpu": "1", "node": "node-0"})
    # The cause cools, the node's symptom lingers: no way back to the node-level signal.
    cooled = [itl, replace(temp, cleared_at=at(12))]
    for minute in range(13, 30):
        assert _step(tracker, cooled, minute, quiet) == []
    assert tracker.incidents[0].rule == "thermal_throttle"


def test_a_stronger_candidate_that_does_not_hold_changes_nothing() -> None:
    tracker = IncidentTracker(SETTINGS)
    queue = ev("queue_wait_p99", 0.6, 0.25, node="node-0", service="chat")
    low: Snapshot = {"gpu_utilization_p95": {gpu(): 0.3}}
    assert _step(tracker, [queue], 1, low) == [("opened", "warning")]
    blip = ev("gpu_temperature", 88, 70, onset=2, node="node-0", gpu="0", cleared=4)
    for minute in (3, 4):
        assert _step(tracker, [queue, replace(blip, cleared_at=None)], minute, low) == []
    for minute in range(5, 12):
        assert _step(tracker, [queue, blip], minute, low) == []
    assert tracker.incidents[0].rule == "scheduling_bottleneck"


def test_budget_folds_a_second_root_change_into_the_timeline() -> None:
    """Unclassified on a latency rise, then a dependency fault (the one root-cause change), then an
    ECC storm below it (a second change: folded; its rise to critical is told)."""
    tracker = IncidentTracker(SETTINGS)
    # Two anomalous signals: an unclassified incident needs two (or a static-limit breach).
    ttft = [ev("ttft_p99", 2.0, 0.5, node="node-0", service="chat"),
            ev("request_p99", 6.0, 2.0, node="node-0", service="chat", route="/v1/chat")]
    dep = ev("dependency_latency_p99", 0.9, 0.05, onset=2, node="node-0", dependency="vectordb")
    ecc = ev("ecc_corrected_increase", 300, 1, onset=10, node="node-0", gpu="0")
    told = _step(tracker, ttft, 1, {})
    for minute in range(2, 10):
        told += _step(tracker, [*ttft, dep], minute, {})
    for minute in range(10, 20):
        told += _step(tracker, [*ttft, dep, ecc], minute, {})
    assert [kind for kind, _ in told] == ["opened", "root_cause_changed", "severity_up"]
    inc = tracker.incidents[0]
    assert (inc.rule, inc.severity) == ("ecc_storm", "critical")
    folded = [(t.kind, t.notified) for t in inc.timeline if t.kind in ("root_cause_changed", "severity_up")]
    assert folded == [("root_cause_changed", True), ("root_cause_changed", False), ("severity_up", True)]
    done = [replace(e, cleared_at=at(20)) for e in (*ttft, dep, ecc)]
    told = _step(tracker, done, 26, {})
    assert told == [("resolved", "critical")]


def test_an_attached_alert_is_a_timeline_entry_not_a_message() -> None:
    tracker = IncidentTracker(SETTINGS)
    temp = ev("gpu_temperature", 92, 70, node="node-0", gpu="1")
    assert _step(tracker, [temp], 1, HOT) == [("opened", "warning")]
    alert = ChangeEvent(at(2), "alert", "Alertmanager GatewayQueueWaitHigh firing (incident x)",
                        (("layer", "scheduling"), ("node", "node-0")), "alertmanager")
    assert _step(tracker, [temp], 3, HOT, (alert,)) == []
    inc = tracker.incidents[0]
    assert [(t.kind, t.text, t.notified) for t in inc.timeline][-1] == ("alert", alert.description, False)


def test_a_slow_gpus_own_peer_signal_outranks_its_nodes_latency_gap() -> None:
    """A GPU slower than its peers: the node's inter-token latency gap crosses first, the GPU's own
    peer signal later; the incident moves to the GPU once, after the dwell time."""
    tracker = IncidentTracker(SETTINGS)
    itl = ev("engine_itl_peer", 0.065, 0.048, node="node-0", model="m")
    assert _step(tracker, [itl], 1, {}) == [("opened", "warning")]
    busy = ev("gpu_utilization_peer", 0.6, 0.4, onset=5, node="node-0", gpu="3")
    told = []
    for minute in range(6, 20):
        told += _step(tracker, [itl, busy], minute, {})
    assert told == [("root_cause_changed", "warning")]
    inc = tracker.incidents[0]
    assert (inc.rule, inc.root_cause.signal, dict(inc.root_cause.labels)) == (
        "peer_outlier", "gpu_utilization_peer", {"gpu": "3", "node": "node-0"})


def test_a_matched_rule_outranks_the_guess_an_incident_opened_on() -> None:
    """Latency symptoms cross first (an unclassified guess: two anomalous signals, no rule); once
    the queue backs up on busy GPUs, capacity_exhausted explains them and takes over after the
    dwell time."""
    tracker = IncidentTracker(SETTINGS)
    ttft = ev("ttft_p99", 2.0, 0.5, node="node-0", service="chat")
    edge = ev("request_p99", 9.0, 3.0, node="node-0", service="chat", route="/v1")
    busy: Snapshot = {"gpu_utilization_p95": {gpu(): 1.0}}
    assert _step(tracker, [ttft, edge], 1, busy) == [("opened", "warning")]
    assert tracker.incidents[0].rule == "unclassified"
    queue = ev("queue_wait_p99", 0.8, 0.1, onset=2, node="node-0", service="chat")
    told = []
    for minute in range(3, 12):
        told += _step(tracker, [ttft, edge, queue], minute, busy)
    assert told == [("root_cause_changed", "warning")]
    inc = tracker.incidents[0]
    assert (inc.rule, inc.layer, inc.root_cause.signal) == (
        "capacity_exhausted", "scheduling", "queue_wait_p99")


def test_a_second_severity_rise_is_folded_into_the_next_message() -> None:
    """A GPU past its temperature limit without a thermal reason opens alone (a static-limit
    breach, info); latency joins (warning, told); the queue passes its 1 s limit (critical,
    folded into the next message)."""
    tracker = IncidentTracker(SETTINGS)
    hot = ev("gpu_temperature", 88, 70, node="node-0", gpu="0")
    ttft = ev("ttft_p99", 2.0, 0.5, onset=1, node="node-0", service="chat")
    edge = ev("request_p99", 9.0, 3.0, onset=1, node="node-0", service="chat", route="/v1")
    queue = ev("queue_wait_p99", 1.5, 0.2, onset=3, node="node-0", service="chat")
    told = _step(tracker, [hot], 1, {})
    told += _step(tracker, [hot, ttft, edge], 2, {})
    told += _step(tracker, [hot, ttft, edge, queue], 4, {})
    assert told == [("opened", "info"), ("severity_up", "warning")]
    inc = tracker.incidents[0]
    assert inc.severity == "critical"
    assert [(t.kind, t.notified) for t in inc.timeline if t.kind == "severity_up"] == [
        ("severity_up", True), ("severity_up", False)]
    done = [replace(e, cleared_at=at(5)) for e in (hot, ttft, edge, queue)]
    assert _step(tracker, done, 11, {}) == [("resolved", "critical")]


def test_a_stronger_cause_still_live_when_the_first_symptom_clears_takes_over_at_once() -> None:
    """An engine stall: the edge's 504s cross first (ingress_errors), the stalled queue later; when
    the 504s clear the queue is the cause still standing, without waiting out the dwell time."""
    tracker = IncidentTracker(SETTINGS)
    e504 = ev("error_504_ratio", 1.0, 0.01, node="node-0", service="chat", route="/v1")
    assert _step(tracker, [e504], 1, {}) == [("opened", "critical")]
    queue = ev("queue_wait_p99", 18.9, 0.2, onset=2, node="node-0", service="chat")
    busy: Snapshot = {"gpu_utilization_p95": {gpu(): 1.0}}
    assert _step(tracker, [e504, queue], 3, busy) == []  # stronger, waiting out the dwell time
    assert _step(tracker, [replace(e504, cleared_at=at(4)), queue], 4, busy) == [
        ("root_cause_changed", "critical")]
    inc = tracker.incidents[0]
    assert (inc.rule, inc.layer, inc.root_cause.signal) == (
        "capacity_exhausted", "scheduling", "queue_wait_p99")
