"""SignalCycle: incremental cycles over a replayed week find what yesterday's baseline reveals,
at the same times as one batch evaluation over the whole history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from analyzer.cycle import SignalCycle
from analyzer.evaluate import evaluate_signal
from analyzer.frame import SeriesFrame
from analyzer.signals import CATALOGUE
from analyzer.sources.frames import FrameSource

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
    assert event.detected_at == FAULT + timedelta(minutes=3)  # 4 of 5 one-minute samples
    assert event.detector == "baseline_ratio" and event.score > 2.5
    batch = evaluate_signal(spec, frame, step_s=STEP)
    expected = [(event.labels, event.onset, event.detected_at)]
    assert [(e.labels, e.onset, e.detected_at) for e in batch] == expected


def test_without_history_the_ratio_stays_silent_below_the_static_threshold() -> None:
    spec = CATALOGUE["queue_wait_p99"]
    frame = week()
    recent_only = SeriesFrame(frame.values.loc[FAULT - timedelta(hours=3):], frame.labels)
    source = FrameSource({spec.name: recent_only})
    cycle = SignalCycle(spec, step_s=STEP)
    assert cycle.run(source, FAULT + timedelta(minutes=30)) == []
