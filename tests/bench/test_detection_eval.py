"""bench/detection_eval.py's judging: which event detects a fault, how late, and what is a false alarm."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import pytest

from analyzer.detection.events import AnomalyEvent
from tests.script_module import load_script

T0 = datetime(2026, 1, 7, 15, 0, tzinfo=UTC)
de = load_script("bench/detection_eval.py")


def event(signal: str, onset_min: float, detected_min: float, cleared_min: float | None = None,
          **labels: str) -> AnomalyEvent:
    """An event ``*_min`` minutes after T0."""
    at = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    cleared = None if cleared_min is None else at(cleared_min)
    return AnomalyEvent(signal, "infrastructure", AnomalyEvent.labels_from(labels), at(onset_min),
                        at(detected_min), cleared, 1.0, None, 1.0, "")


GPU_FAULT = de.Fault("ecc_storm", "n1", "1", T0, T0 + timedelta(hours=2))
NODE_FAULT = de.Fault("kv_shrink", "n1", None, T0, T0 + timedelta(hours=2))


class Case(NamedTuple):
    name: str
    fault: object
    events: tuple[AnomalyEvent, ...]
    delay_s: float | None
    signal: str


CASES = [
    Case("first detection wins", GPU_FAULT,
         (event("gpu_temperature", 3, 4, node="n1", gpu="1"),
          event("ecc_corrected_increase", 1.75, 2, node="n1", gpu="1")), 120.0, "ecc_corrected_increase"),
    Case("other GPU does not count", GPU_FAULT, (event("gpu_temperature", 1, 2, node="n1", gpu="0"),),
         None, ""),
    Case("node-level event counts for a GPU fault", GPU_FAULT, (event("ttft_p99", 1, 5, node="n1"),),
         300.0, "ttft_p99"),
    Case("other node does not count", NODE_FAULT, (event("queue_length", 1, 2, node="n2"),), None, ""),
    Case("detected before the fault does not count", NODE_FAULT, (event("queue_length", -9, -8, node="n1"),),
         None, ""),
    Case("up to 5 min after the end counts", NODE_FAULT, (event("queue_length", 120, 124, node="n1"),),
         124 * 60.0, "queue_length"),
    Case("later than that does not", NODE_FAULT, (event("queue_length", 120, 126, node="n1"),), None, ""),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdicts(case: Case) -> None:
    [verdict] = de.verdicts(case.events, [case.fault], 15.0)
    assert (verdict.delay_s, verdict.signal) == (case.delay_s, case.signal)


def test_target_is_persistence_plus_two_steps() -> None:
    # ecc: for 30 s, at least 2 samples → 2 × 15 s, + 2 steps; queue_length: 60 s → 4 samples.
    assert de.target_s("ecc_corrected_increase", 15.0) == 60.0
    assert de.target_s("queue_length", 15.0) == 90.0
    assert de.target_s("queue_length", 60.0) == 300.0  # at least 3 samples whatever the step
    [ecc] = de.verdicts([event("ecc_corrected_increase", 1.75, 2, node="n1", gpu="1")], [GPU_FAULT], 15.0)
    assert (ecc.in_target, ecc.confirm_s) == (False, 15.0)


FALSE = [
    ("untouched node", event("request_p99", 30, 34, 40, node="n2"), True),
    ("fault node, inside", event("ttft_p99", 30, 34, 40, node="n1"), False),
    ("fault node, 9 min before", event("ttft_p99", -20, -15, -9, node="n1"), False),
    ("fault node, 11 min before", event("ttft_p99", -20, -15, -11, node="n1"), True),
    ("fault node, 9 min after the end", event("ttft_p99", 129, 133, 140, node="n1"), False),
    ("fault node, 11 min after the end", event("ttft_p99", 131, 135, 140, node="n1"), True),
    ("still active after the window", event("ttft_p99", -60, -55, None, node="n1"), False),
]


@pytest.mark.parametrize(("name", "ev", "false"), FALSE, ids=[f[0] for f in FALSE])
def test_false_alarms(name: str, ev: AnomalyEvent, false: bool) -> None:
    assert (de.false_alarms([ev], [NODE_FAULT]) == [ev]) is false


def test_open_ended_fault_lasts_until_the_window_ends() -> None:
    until = T0 + timedelta(hours=3)
    fault = de.Fault.from_truth({"kind": "rss_leak", "node": "n2", "gpu": None,
                                 "start_epoch_s": T0.timestamp(), "end_epoch_s": None}, until)
    assert (fault.start, fault.end, fault.gpu) == (T0, until, None)
    [verdict] = de.verdicts([event("process_rss_trend", 15, 22, node="n2", process="vllm")], [fault], 15.0)
    assert verdict.delay_s == 22 * 60.0
