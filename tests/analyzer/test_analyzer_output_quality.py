"""The empty-output share: the gateway's counters → its replayed query, its traffic guard, an event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from analyzer_frames import write_history

from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.sources.frames import FrameSource

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STEP = 15.0
ROWS = 240  # one hour
ONSET = 120


def _labels(node: str, **more: str) -> tuple[tuple[str, str], ...]:
    found = {"instance": f"{node}:8000", "model": "m", "node": node, "service": "chat", **more}
    return tuple(sorted(found.items()))


def test_empty_outputs_fire_only_with_enough_answers(tmp_path: Path) -> None:
    series = {}
    # n1: 4 answers per step (80 per 5 min), one in ten empty from ONSET; n2: one answer every other
    # step (10 per 5 min, under the guard), every one empty from ONSET.
    for node, per_step, empty_share in (("n1", 4.0, 0.1), ("n2", 0.5, 1.0)):
        answers = np.full(ROWS, per_step)
        empty = np.r_[np.zeros(ONSET), np.full(ROWS - ONSET, per_step * empty_share)]
        # Split over two finish reasons: the ratio sums them.
        series[("oximeter_completions_total", _labels(node, finish_reason="stop"))] = np.cumsum(answers / 2)
        series[("oximeter_completions_total", _labels(node, finish_reason="length"))] = np.cumsum(answers / 2)
        series[("oximeter_empty_completions_total", _labels(node))] = np.cumsum(empty)
    write_history(tmp_path, series, T0, STEP)
    source = FrameSource.from_history(tmp_path)
    spec = CATALOGUE["empty_output_ratio"]
    end = T0 + timedelta(hours=1)
    frame = source.fetch(spec, T0, end, STEP)
    guard = spec.traffic_spec()
    assert guard is not None
    traffic = source.fetch(guard, T0, end, STEP).values
    n1 = "model=m,node=n1,service=chat"
    assert frame.values[n1].iloc[ONSET - 1] == 0.0
    assert frame.values[n1].iloc[-1] == np.float32(0.1)
    assert traffic[n1].iloc[-1] == 80.0
    assert frame.values["model=m,node=n2,service=chat"].iloc[-1] == 1.0

    events = evaluate_signal(spec, frame, traffic=traffic)
    assert [e.entity for e in events] == [{"model": "m", "node": "n1", "service": "chat"}]
    assert events[0].onset >= T0 + timedelta(seconds=ONSET * STEP)


def test_a_retry_storm_fires_only_with_enough_requests(tmp_path: Path) -> None:
    series = {}
    # 4 requests per step (80 per 5 min) on n1 and n2: from ONSET, n1 re-sends one in five, n2 one in
    # twenty (under the 10 % line); n3 re-sends every request but serves 10 per 5 min (under the guard).
    for node, per_step, share in (("n1", 4.0, 0.2), ("n2", 4.0, 0.05), ("n3", 0.5, 1.0)):
        requests = np.full(ROWS, per_step)
        retried = np.r_[np.zeros(ONSET), np.full(ROWS - ONSET, per_step * share)]
        route = {"route": "/v1/chat/completions"}
        series[("oximeter_requests_total", _labels(node, code="200", **route))] = np.cumsum(requests * 0.75)
        series[("oximeter_requests_total", _labels(node, code="429", **route))] = np.cumsum(requests * 0.25)
        series[("oximeter_retried_requests_total", _labels(node, **route))] = np.cumsum(retried)
    write_history(tmp_path, series, T0, STEP)
    source = FrameSource.from_history(tmp_path)
    spec = CATALOGUE["retry_ratio"]
    end = T0 + timedelta(hours=1)
    frame = source.fetch(spec, T0, end, STEP)
    guard = spec.traffic_spec()
    assert guard is not None
    traffic = source.fetch(guard, T0, end, STEP).values
    n1 = "model=m,node=n1,route=/v1/chat/completions,service=chat"
    assert frame.values[n1].iloc[-1] == np.float32(0.2)
    assert traffic[n1].iloc[-1] == 80.0
    events = evaluate_signal(spec, frame, traffic=traffic)
    assert [e.entity["node"] for e in events] == ["n1"]
    assert events[0].layer == "ingress"
