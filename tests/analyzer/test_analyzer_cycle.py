"""SignalCycle: incremental cycles over a replayed week find what yesterday's baseline reveals,
at the same times as one batch evaluation over the whole history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from analyzer.detection.cycle import SignalCycle
from analyzer.detection.evaluate import evaluate_signal
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import SeriesFrame
from analyzer.signals.sources.frames import FrameSource

STEP = 60.0
START = datetime(2026, 5, 1, tzinfo=UTC)
FAULT = START + timedelta(days=8, hours=14)


def week() -> SeriesFrame:
    index = pd.date_range(START, FAULT + timedelta(hours=1), freq="1min")
    day = (index.as_unit("s").asi8 % 86400) / 86400.0
    base = 0.2 + 0.1 * np.sin(2 * np.pi * day)
    noise = np.random.default_rng(2).normal(0, 0.005, (len(index), 2))
    values = base[:, None] + noise
    values[index >= FAULT, 1] *= 3.0  # service b: queue_wait ×3 from 14:00 (0.6-0.9 s: under 1 s)
    keys = ["node=n1,service=a", "node=n1,service=b"]
    labels = {k: dict(p.split("=") for p in k.split(",")) for k in keys}
    return SeriesFrame(pd.DataFrame(values.astype(np.float32), index=index, columns=keys), labels)


def test_cycles_match_the_batch_and_use_yesterday() -> None:
    spec = CATALOGUE["queue_wait_p99"]
    frame = week()
    source = FrameSource({spec.name: frame})
    cycle = SignalCycle(spec, step_s=STEP, cold_rows=None)
    seen = []
    for minute in range(-30, 31):
        seen = cycle.run(source, FAULT + timedelta(minutes=minute))
    [event] = seen
    assert event.entity == {"node": "n1", "service": "b"}
    assert event.onset == FAULT
    assert event.detected_at == FAULT + timedelta(minutes=7)  # 8 of 10 one-minute samples (window + 5 min)
    assert event.detector == "baseline_ratio" and event.score > 2.5
    assert not event.provisional  # a week of history: judged against yesterday
    batch = evaluate_signal(spec, frame, step_s=STEP)
    expected = [(event.labels, event.onset, event.detected_at)]
    assert [(e.labels, e.onset, e.detected_at) for e in batch] == expected


def test_without_a_day_of_history_the_ratio_uses_the_recent_window_and_says_so() -> None:
    # The first hours after install: no seasonal baseline, and the ×3 step stays under the static
    # 1 s limit. The recent window (the step kept out of it) still finds it, marked provisional.
    spec = CATALOGUE["queue_wait_p99"]
    frame = week()
    recent_only = SeriesFrame(frame.values.loc[FAULT - timedelta(hours=3):], frame.labels)
    source = FrameSource({spec.name: recent_only})
    cycle = SignalCycle(spec, step_s=STEP)
    [event] = cycle.run(source, FAULT + timedelta(minutes=30))
    assert event.entity == {"node": "n1", "service": "b"} and event.provisional
    assert event.baseline is not None and event.baseline < 0.3  # the level before the step


def _frame(columns: dict[str, np.ndarray], start: datetime) -> SeriesFrame:
    index = pd.date_range(start, periods=len(next(iter(columns.values()))), freq="15s")
    labels = {k: dict(p.split("=") for p in k.split(",")) for k in columns}
    return SeriesFrame(pd.DataFrame(columns, index=index, dtype=np.float32), labels)


def test_peers_are_compared_within_their_model_only() -> None:
    values = {f"model=a,node=a{i}": np.full(40, 0.05 + 0.001 * i) for i in range(5)}
    values |= {f"model=b,node=b{i}": np.full(40, 0.20 + 0.001 * i) for i in range(5)}
    values["model=a,node=a4"][20:] = 0.15  # slower than its model's peers, still faster than model b
    [event] = evaluate_signal(CATALOGUE["engine_itl_peer"], _frame(values, START), step_s=15.0)
    assert event.entity == {"model": "a", "node": "a4"}


def test_the_traffic_guard_is_fetched_and_applied() -> None:
    spec = CATALOGUE["error_504_ratio"]
    key = "node=n1,route=chat,service=s"
    ratio = np.r_[np.zeros(40), np.full(40, 0.05)]  # 5 % 504s from row 40
    # 1.5 requests a minute: even the ten minutes the ratio may widen to hold too few to judge.
    for requests_per_min, expected in ((1.5, 0), (50.0, 1)):
        source = FrameSource({spec.name: _frame({key: ratio}, START),
                              f"{spec.name}:traffic": _frame({key: np.full(80, requests_per_min)}, START)})
        cycle = SignalCycle(spec, live_s=1200, step_s=15.0, cold_rows=None)
        assert len(cycle.run(source, START + timedelta(seconds=79 * 15))) == expected
