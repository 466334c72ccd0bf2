"""External queue growth: the exporter's queue lengths → the signal's replay expression (least-squares
slope, the lowest length in 5 min) → an event only for a queue that grows and never empties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from analyzer_frames import write_history

from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.sources.frames import FrameSource

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STEP = 15.0
ROWS = 240  # one hour
ONSET = 80  # 20 min


def _labels(node: str) -> tuple[tuple[str, str], ...]:
    return (("instance", f"{node}:9400"), ("job", "oximeter-exporter"), ("node", node), ("queue", "jobs"))


def _queues() -> dict[str, np.ndarray]:
    t = np.arange(ROWS, dtype=np.float64)
    growing = np.where(t < ONSET, 5.0, 5.0 + 0.25 * STEP * (t - ONSET))  # +0.25 a second from 20 min
    slow = np.where(t < ONSET, 5.0, 5.0 + 0.05 * STEP * (t - ONSET))  # +0.05 a second: under the line
    # Emptied every 2 minutes, the batch its workers find growing by 40 each time: a slope over the
    # line, but a queue somebody drains.
    drained = np.where(t % 8 < 4, 0.0, 40.0 * (t // 8 + 1))
    busy = 500.0 + 20.0 * np.sin(t / 3.0)  # long, but steady
    return {"n1": growing, "n2": slow, "n3": drained, "n4": busy}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> FrameSource:
    root: Path = tmp_path_factory.mktemp("queues")
    write_history(root, {("oximeter_external_queue_length", _labels(n)): v for n, v in _queues().items()},
                  T0, STEP)
    return FrameSource.from_history(root)


def test_the_expression_is_the_slope_per_second_and_the_guard_the_lowest_length(source: FrameSource) -> None:
    spec = CATALOGUE["external_queue_growth"]
    end = T0 + timedelta(hours=1)
    slope = source.fetch(spec, T0, end, STEP).values
    guard = spec.traffic_spec()
    assert guard is not None
    lowest = source.fetch(guard, T0, end, STEP).values
    n1, n3 = "node=n1,queue=jobs", "node=n3,queue=jobs"
    assert np.isnan(slope[n1].iloc[10])  # the 10-min window is not full yet
    assert slope[n1].iloc[-1] == pytest.approx(0.25)
    assert slope["node=n2,queue=jobs"].iloc[-1] == pytest.approx(0.05)
    assert slope[n3].iloc[-120:].mean() > spec.threshold  # type: ignore[operator]
    assert lowest[n3].iloc[-1] == 0.0
    assert lowest[n1].iloc[-1] == pytest.approx(5.0 + 0.25 * STEP * (ROWS - 20 - ONSET))  # 20 rows: 5 min


def test_only_the_queue_nobody_drains_opens_an_event(source: FrameSource) -> None:
    spec = CATALOGUE["external_queue_growth"]
    end = T0 + timedelta(hours=1)
    guard = spec.traffic_spec()
    assert guard is not None
    frame = source.fetch(spec, T0, end, STEP)
    # The slope alone would also open the queue its workers keep emptying: the guard is what tells.
    unguarded = evaluate_signal(spec, frame)
    assert sorted(e.entity["node"] for e in unguarded) == ["n1", "n3"]
    events = evaluate_signal(spec, frame, traffic=source.fetch(guard, T0, end, STEP).values)
    assert [e.entity for e in events] == [{"node": "n1", "queue": "jobs"}]
    assert events[0].layer == "scheduling"
    assert events[0].onset >= T0 + timedelta(seconds=ONSET * STEP)
