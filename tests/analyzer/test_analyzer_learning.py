"""Series too young for a same-time baseline are reported as learning, per signal."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.detection.baseline_tracker import BaselineTracker
from analyzer.service.daemon_metrics import DaemonMetrics

DAY = pd.Timedelta(days=1)


def test_a_series_without_yesterday_is_learning_until_it_has_one() -> None:
    index = pd.date_range("2026-01-02", periods=240, freq="15s", tz="UTC")
    rng = np.random.default_rng(7)
    live = pd.DataFrame({"old": rng.random(240), "new": rng.random(240)}, index=index)
    tracker = BaselineTracker()
    tracker.update(live, {})
    assert tracker.learning() == 2  # no history at all: both judged against their last hour
    tracker = BaselineTracker()
    # Yesterday's window holds only the old series: the new one is still learning.
    tracker.update(live, {DAY.total_seconds(): pd.DataFrame({"old": rng.random(240)}, index=index - DAY)})
    assert tracker.learning() == 1


def test_the_learning_gauge_says_how_many_series_per_signal() -> None:
    metrics = DaemonMetrics()
    metrics.update_learning({"gpu_temperature": 3, "queue_wait_p99": 1})
    metrics.update_learning({"gpu_temperature": 2})  # queue wait has learnt its day
    get = metrics.registry.get_sample_value
    assert get("oximeter_series_learning", {"signal": "gpu_temperature"}) == 2
    assert get("oximeter_series_learning", {"signal": "queue_wait_p99"}) is None
