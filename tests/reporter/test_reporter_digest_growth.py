"""The digest's steady growth: a leak too slow for the trend alert is a line with its rate and date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from analyzer.detection.detectors.trend import Trend
from analyzer.signals.catalogue import CATALOGUE
from oximeter.prometheus import Series
from reporter.digest import Digest
from reporter.digest_growth import Growth, growth
from reporter.digest_render import growth_section

START = datetime(2026, 3, 4, tzinfo=UTC)
END = START + timedelta(days=1)
STEP_S = 60.0
HOST_BYTES = 512 * 2**30
# A gigabyte an hour on a 512 GiB host, from 20 GiB: the analyzer's 30-min trend wants 5 % of the
# level per window (about 2.4 % here) and the host full within a week (about 20 days here).
LEAK_PER_S = 2**30 / 3600 / HOST_BYTES
T = np.arange(START.timestamp(), END.timestamp(), STEP_S)
NOISE = np.random.default_rng(7).normal(0.0, 1e-4, len(T))


class _Prom:
    """A store holding one query's range result per signal."""

    def __init__(self, results: dict[str, list[Series]]) -> None:
        self.results = results
        self.asked: list[str] = []

    def range(self, expr: str, start: datetime, end: datetime, step_s: float) -> list[Series]:
        self.asked.append(expr)
        return self.results.get(expr, [])

    def instant(self, expr: str, at: datetime) -> list[Series]:
        raise AssertionError("growth reads ranges only")


def _series(labels: dict[str, str], values: np.ndarray) -> Series:
    return Series(tuple(sorted(labels.items())), tuple(zip(T.tolist(), values.tolist(), strict=True)))


def test_a_leak_beyond_the_alert_horizon_is_a_line_with_its_rate_and_date() -> None:
    rss = CATALOGUE["process_rss_trend"]
    leak = 20 * 2**30 / HOST_BYTES + LEAK_PER_S * (T - T[0]) + NOISE * 1e-2
    flat = 0.3 + NOISE  # a busy but steady process
    gpu = CATALOGUE["gpu_memory_trend"]
    fast = 0.5 + 0.4 * (T - T[0]) / 86400.0  # 40 points a day from half full: full tomorrow afternoon
    prom = _Prom({rss.promql: [_series({"node": "n1", "process": "vllm"}, leak),
                               _series({"node": "n2", "process": "vllm"}, flat)],
                  gpu.promql: [_series({"node": "n3", "gpu": "0"}, fast)]})
    found = growth(prom, CATALOGUE, START, END, STEP_S)
    assert [(g.signal, g.series, g.alerted) for g in found] == [
        ("gpu_memory_trend", "gpu=0,node=n3", True), ("process_rss_trend", "node=n1,process=vllm", False)]
    slow = found[1]
    assert slow.per_day == pytest.approx(LEAK_PER_S * 86400, rel=1e-3)
    expected_full = T[-1] + (1.0 - leak[-1]) / LEAK_PER_S
    assert slow.full_at == pytest.approx(expected_full, abs=3600)
    assert 14 * 86400 < slow.full_at - END.timestamp() < 30 * 86400

    # The analyzer's own trend detector stays quiet on that leak: the line is all that says it.
    frame = pd.DataFrame({"leak": leak}, index=pd.to_datetime(T, unit="s", utc=True))
    assert not Trend(window_s=rss.window_s, capacity=rss.capacity).detect(frame).flags.to_numpy().any()

    table = growth_section(_digest(found), UTC).table
    assert table[2][:5] == ("process_rss_trend", "node=n1,process=vllm",
                            f"{leak[-1] * 100:.1f} % of capacity",
                            f"+{LEAK_PER_S * 86400 * 100:.2f} % per day",
                            f"{datetime.fromtimestamp(slow.full_at, UTC):%Y-%m-%d}")
    assert table[2][5] == "none: beyond the alert horizon"


def _digest(found: tuple[Growth, ...]) -> Digest:
    return Digest(day=START.date(), start=START, end=END, max_queue_length=None, max_queue_where="-",
                  queue_colour="none", top_504_routes=(), gpu_spread=None, spread_colour="none", incidents=0,
                  by_layer=(), by_rule=(), mttd_s=None, mttr_s=None, services=(), gpu_health=(),
                  growth=found)
