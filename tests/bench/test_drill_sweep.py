"""bench/drill_sweep.py's truth: traffic within capacity (drills/sweep.py generates it), harmless
faults out of attribution, and coverage only of faults that last."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import UTC, datetime

import pandas as pd
import pytest

from analyzer.incidents.model import Change
from drills import sweep, sweep_report
from drills.harm import NO_BURN, Peak
from simulator.arrivals import ArrivalStream, mean_lengths
from simulator.load_shape import RequestMix
from simulator.scenario import EngineOverrides
from simulator.trace import Capacity
from tests.script_module import load_script

ds = load_script("bench/drill_sweep.py")


def test_the_mean_request_is_what_the_arrival_stream_draws() -> None:
    stream = ArrivalStream(7, "n1", RequestMix())
    drawn = [stream.lengths() for _ in range(20_000)]
    prompt, output = mean_lengths(RequestMix())
    assert prompt == pytest.approx(sum(p for p, _ in drawn) / len(drawn), rel=0.03)
    assert output == pytest.approx(sum(o for _, o in drawn) / len(drawn), rel=0.03)


def test_a_costlier_prefill_lowers_capacity() -> None:
    lengths = mean_lengths(RequestMix())
    default = Capacity.of(EngineOverrides(), 12).rps(*lengths)
    slow = Capacity.of(EngineOverrides(prefill_s_per_token=0.001), 12).rps(*lengths)
    assert 4.0 < default < 7.0 and slow < 0.7 * default


def test_generated_traffic_stays_within_capacity_at_the_daily_peak() -> None:
    """Whatever the pattern's engine settings: a fleet overloaded every evening would be a real
    capacity incident on every node, not the fault-free stretch the truth says it is."""
    rng = random.Random(3)
    docs = [sweep.generate(rng, i) for i in range(150)]
    for doc in docs:
        assert sweep.peak_utilisation(doc) <= sweep.PEAK_SHARE, (doc["name"], doc.get("engine"),
                                                                 doc["base_rps"])
    # Light to busy: the range is used, not squeezed to one end.
    levels = [sweep.peak_utilisation(d) for d in docs]
    assert min(levels) < 0.2 and max(levels) > 0.45


HARM = [
    ("nothing served during the fault: no one harmed", None, (0.04, 2.0), 1.0),
    ("no fault-free day to compare with: never excused", (0.04, 2.0), None, math.inf),
    ("the worse of TTFT and duration", (0.12, 2.2), (0.04, 2.0), 3.0),
    ("as fast as the day before", (0.041, 1.9), (0.04, 2.0), 1.025),
]


@pytest.mark.parametrize(("name", "fault_run", "day_before", "expected"), HARM, ids=[h[0] for h in HARM])
def test_harm(name: str, fault_run: tuple[float, float] | None, day_before: tuple[float, float] | None,
              expected: float) -> None:
    assert ds.harm(fault_run, day_before) == pytest.approx(expected)


XID, THERMAL = ds.KINDS["xid_critical"], ds.KINDS["thermal_throttle"]
COVERAGE = [
    ("a lasting fault covered from detection to its end", THERMAL, 0, 100, 10, None, 0.9),
    ("resolved half way through", THERMAL, 0, 100, 0, 50, 0.5),
    # The Xid incident opened 40 s into the 60-s nominal span and stayed open long after.
    ("a one-off event has no coverage", XID, 0, 60, 40, 900, None),
    ("never opened", THERMAL, 0, 100, None, None, None),
]
# Opened at 10, resolved at 30, re-opened at 60: chat was told it was over for 30 of the 100 s.
REOPENED = [(30.0, 60.0)]


@pytest.mark.parametrize(("name", "kind", "start", "end", "opened", "resolved", "expected"), COVERAGE,
                         ids=[c[0] for c in COVERAGE])
def test_coverage(name: str, kind: object, start: float, end: float, opened: float | None,
                  resolved: float | None, expected: float | None) -> None:
    got = ds.coverage(kind, start, end, opened, resolved)
    assert got == (None if expected is None else pytest.approx(expected))


def test_the_time_a_reopened_incident_stood_resolved_is_not_covered() -> None:
    assert ds.coverage(THERMAL, 0, 100, 10, None, REOPENED) == pytest.approx(0.6)
    # A resolve after the fault ended takes nothing from it.
    assert ds.coverage(THERMAL, 0, 100, 10, None, [(100.0, 400.0)]) == pytest.approx(0.9)


def test_closed_spans_run_from_each_resolve_to_the_next_open() -> None:
    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, tz=UTC)

    told = [Change(i, kind, seq, at(t), "warning", "") for i, kind, seq, t in (
        ("i", "opened", 1, 10), ("i", "resolved", 2, 30), ("j", "opened", 1, 40), ("i", "opened", 3, 60),
        ("i", "resolved", 4, 90))]
    assert ds.closed_spans(told, "i") == REOPENED
    assert ds.closed_spans(told, "j") == []


def _row(rule: str, right: bool, visible: bool = True) -> dict[str, object]:
    return {"rule": rule, "right": right, "ttd_s": 60.0 if right else None,
            "coverage": 1.0 if right else None, "messages": 2 if right else None, "visible": visible}


def test_a_harmless_miss_is_reported_not_counted() -> None:
    results = [{"name": "a", "rows": [_row("kv_pressure", False, visible=False)], "false": [],
                "node_days": 1.0, "per_incident": []},
               {"name": "b", "rows": [_row("kv_pressure", True)], "false": [], "node_days": 1.0,
                "per_incident": [2]},
               {"name": "c", "rows": [_row("ecc_storm", False)], "false": [], "node_days": 1.0,
                "per_incident": []}]
    lines = ds.report(results, {"a": [0.3], "b": [0.05], "c": [9.0]})
    kv = next(line for line in lines if line.startswith("kv_pressure"))
    assert kv.split()[1:4] == ["2", "1", "100%"]  # two faults, one harmless, the other right
    assert kv.endswith("0.3..0.3")  # the harmless one's strength
    assert lines[-1].startswith("sweep: scenarios=3 attribution=50% ")  # the ECC miss still counts


def test_coverage_is_broken_down_by_fault_duration() -> None:
    # A 10-min fault opened after 5 min and a 3 h fault opened after 5 min that resolved at 2 h.
    short = {**_row("peer_outlier", True), "coverage": 0.5, "duration_s": 600.0, "held": 1.0}
    long = {**_row("peer_outlier", True), "coverage": 115 / 180, "duration_s": 3 * 3600.0, "held": 115 / 175}
    line = sweep_report._coverage_by_duration([short, long])
    assert "10-30 min 50% (n=1)" in line and "30 min-2 h nan% (n=0)" in line
    assert "2 h and more 64% (n=1)" in line and line.endswith("p10 69%")


def test_time_to_detect_is_reported_by_the_fault_s_onset_burn() -> None:
    # Severe faults (onset burn 14.4× or more) seen at 60 and 90 s, one missed; a moderate one at 300 s;
    # a fault within its budget detected late counts in neither band.
    rows = [{**_row("ingress_errors", True), "burn": 97.0, "ttd_s": 60.0, "held": 1.0},
            {**_row("capacity_exhausted", True), "burn": 20.0, "ttd_s": 90.0, "held": 0.9},
            {**_row("ingress_errors", False), "burn": 30.0, "name": "sweep_0007", "onset": 3600.0},
            {**_row("kv_pressure", True), "burn": 8.0, "ttd_s": 300.0, "held": 1.0},
            {**_row("thermal_throttle", True), "burn": 0.0, "ttd_s": 900.0, "held": 1.0}]
    assert sweep_report._ttd_band(rows, sweep_report.SEVERE_BURN, math.inf) == [60.0, 90.0, math.inf]
    results = [{"name": "a", "rows": rows, "false": [{"severity": "warning", "rule": "x", "node": "n1",
                                                     "burn": "none"}],
                "node_days": 10.0, "per_incident": [2, 3]}]
    lines = ds.report(results, {"a": [1.0] * len(rows)})
    assert "severe (≥ 14.4×) p50 90s p90 infs (n=3)" in lines[-2]
    # Each severe fault, slowest first (a miss first of all), with what its incident opened on.
    table = lines[lines.index(next(x for x in lines if x.startswith("severe faults"))) + 1:][:3]
    assert [[*x.split()[1:3], x.split()[4]] for x in table] == [
        ["ingress_errors", "30.0×", "missed"], ["capacity_exhausted", "20.0×", "90s"],
        ["ingress_errors", "97.0×", "60s"]]
    # A missed fault still says which scenario and when it began: the line that most needs them.
    assert table[0].split()[0] == "sweep_0007" and table[0].split()[3] == "01:00:00"
    # A ticket on a fault-free stretch is a false incident, not a false page.
    assert lines[-1] == ("sweep: scenarios=1 attribution=80% coverage_open_p10=93% ttd_severe_p90=infs "
                         "ttd_moderate_p90=300s messages_median=2 messages_max=3 false_per_node_day=0.10 "
                         "paging_false=0")


class _Reader:
    """A replayed window's burn as ``unexplained`` reads it: one peak per node, whole window."""

    def __init__(self, peaks: dict[str | None, Peak]) -> None:
        self.index = pd.DatetimeIndex([pd.Timestamp(0, tz="UTC"), pd.Timestamp(3600, unit="s", tz="UTC")])
        self.peaks = peaks

    def peak(self, node: str | None, start_s: float, end_s: float, every_s: float) -> Peak:
        assert (start_s, end_s, every_s) == (0.0, 3660.0, 60.0)  # the whole window, every cycle
        return self.peaks.get(node, NO_BURN)


def _incident(node: str, severity: str) -> dict[str, object]:
    return {"severity": severity, "rule": "capacity_exhausted", "root_cause": {"labels": {"node": node}}}


def test_an_incident_on_a_fleet_burning_its_own_budget_is_right_when_its_severity_follows_the_burn() -> None:
    ticket = Peak("warning", 2.0, "requests", "queue_wait")
    page = Peak("critical", 20.0, "requests", "queue_wait")
    reader = _Reader({"n1": ticket, "n2": page, "n3": ticket})
    burns: list[tuple[_Reader, list[dict[str, object]]]] = [(reader, [])]
    incidents = [_incident("n1", "warning"), _incident("n2", "critical"), _incident("n3", "critical"),
                 _incident("n4", "warning")]
    false, breaches = ds.unexplained(incidents, burns, 60.0)
    # A slow burn: a ticket is right, a page is false; a fast burn pages rightly; no burn: false.
    assert [(b["node"], b["severity"]) for b in breaches] == [("n1", "warning"), ("n2", "critical")]
    assert [(f["node"], f["severity"], f["burn"]) for f in false] == [
        ("n3", "critical", "ticket 2.0× (requests/queue_wait)"), ("n4", "warning", "none")]
    # On a node with a fault the burn is the fault's: an incident there that its truth does not
    # match is false whatever the burn.
    false_faulted, _ = ds.unexplained(incidents[:1], burns, 60.0, faulted=["n1"])
    assert [(f["node"], f["burn"]) for f in false_faulted] == [("n1", "a fault's")]
    results = [{"name": "a", "rows": [], "false": false, "breaches": breaches, "fault_free_burn": ticket.text,
                "node_days": 10.0, "per_incident": [2]}]
    lines = ds.report(results, {"a": []})
    assert lines[-1].endswith("false_per_node_day=0.20 paging_false=1")
    assert "a (ticket 2.0× (requests/queue_wait))" in lines[-3]


def test_a_missed_load_fault_is_harmless_under_a_ticket_s_burn_or_served_as_the_day_before() -> None:
    asked: list[bool] = []

    def served(ratio: float) -> Callable[[], float]:
        def read() -> float:
            asked.append(True)
            return ratio
        return read

    within = Peak("info", 0.2, "requests", "queue_wait")
    ticket = Peak("warning", 1.5, "requests", "queue_wait")
    assert ds.visible(within, served(3.0)) == (False, "burn none 0.2× (requests/queue_wait)")
    assert asked == []  # the requests are not read when the burn already says it
    assert ds.visible(ticket, served(1.1)) == (False, "served as the day before")
    assert ds.visible(ticket, served(1.5)) == (True, "")
