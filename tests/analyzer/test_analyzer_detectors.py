"""Every detector through one table: it fires at exact times, stays quiet on noise, survives NaN
and gaps, and is causal (a prefix of the data gives a prefix of the answer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import frame

from analyzer.detection.detectors import (
    DETECTORS,
    AbsoluteThreshold,
    BaselineRatio,
    CounterGrowth,
    Detector,
    Drop,
    NeighbourSurprise,
    PeerOutlier,
    RobustDeviation,
    Trend,
    Vanished,
)
from analyzer.detection.persistence import Persistence, to_events
from analyzer.signals.frame import Baseline, FrameError

ROWS = 40
PERSIST = Persistence(k=3, n=4, clear_n=2)

def _level(base: float, anomalous: float | None, rows: range = range(20, 30)) -> np.ndarray:
    v = np.full(ROWS, base)
    if anomalous is not None:
        v[rows.start:rows.stop] = anomalous
    return v


def _counter(per_step: float, storm: float | None) -> np.ndarray:
    steps = np.full(ROWS, per_step)
    if storm is not None:
        steps[20:30] = storm
    return 1000 + np.cumsum(steps)


def _ramp(rising: bool) -> np.ndarray:
    v = np.full(ROWS, 1000.0) + np.random.default_rng(3).normal(0, 0.5, ROWS)
    if rising:
        v[20:] += 10.0 * np.arange(1, ROWS - 19)
    return v


def _peers(anomalous: float | None) -> dict[str, np.ndarray]:
    cols = {f"gpu={i}": _level(base, None) for i, base in enumerate((1.0, 1.01, 0.99, 1.02, 0.98, 1.0))}
    cols["a"] = _level(1.0, anomalous)
    return cols


def _const_baseline(center: float, scale: float = 0.0) -> Callable[[pd.DataFrame], Baseline]:
    def make(values: pd.DataFrame) -> Baseline:
        return Baseline(pd.DataFrame(center, index=values.index, columns=values.columns),
                        pd.DataFrame(scale, index=values.index, columns=values.columns))
    return make


@dataclass(frozen=True)
class Case:
    """One detector, its data with and without the anomaly, and the exact event of column "a"."""

    name: str
    detector: Detector
    data: Callable[[bool], dict[str, np.ndarray]]
    noise: float  # standard deviation of noise the quiet case must tolerate
    expected: tuple[int, int, int | None]  # onset, detected_at, cleared_at rows
    baseline: Callable[[pd.DataFrame], Baseline] | None = None
    persistence: Persistence = PERSIST


CASES = [
    Case("threshold", AbsoluteThreshold(85.0), lambda on: {"a": _level(70.0, 90.0 if on else None)},
         2.0, (20, 22, 31)),
    Case("baseline_ratio", BaselineRatio(1.5), lambda on: {"a": _level(1.0, 2.0 if on else None)},
         0.05, (20, 22, 31), _const_baseline(1.0)),
    Case("robust_deviation", RobustDeviation(z=6.0), lambda on: {"a": _level(10.0, 20.0 if on else None)},
         0.5, (20, 22, 31), _const_baseline(10.0, 1.0)),
    # +60 per minute against +1: the 5-minute increase passes 100 at row 21 and falls below it
    # after row 32; it stays open while at least 50 (row 33), clearing two quiet rows later.
    Case("counter_growth", CounterGrowth(window_s=300, min_increase=100, ratio=None),
         lambda on: {"a": _counter(1.0, 60.0 if on else None)}, 0.0, (21, 23, 35)),
    Case("drop", Drop(expected=0.95), lambda on: {"a": _level(0.95, 0.6 if on else None)},
         0.01, (20, 22, 31)),
    Case("trend", Trend(window_s=600, min_r2=0.8, min_rise_rel=0.05),
         lambda on: {"a": _ramp(on)}, 0.0, (24, 26, None)),
    Case("peer_outlier", PeerOutlier(z=5.0), lambda on: _peers(2.0 if on else None), 0.005, (20, 22, 31)),
    Case("vanished", Vanished(), lambda on: {"a": _level(1.0, np.nan if on else None, range(20, ROWS))},
         0.1, (20, 22, None)),
    # Flags once per anomaly (then quiet), so it opens on one flag and clears the row after.
    Case("neighbour_surprise", NeighbourSurprise(window=3, neighbours=2, reference=40, block=4, memory=40,
                                                 warmup=10, min_prior=5, quiet=100, likelihood_short=1,
                                                 likelihood_long=40, likelihood_history=5,
                                                 range_tolerance=None),
         lambda on: {"a": _level(10.0, 20.0 if on else None)}, 0.01, (20, 20, 21),
         persistence=Persistence(k=1, n=1, clear_n=1)),
]
IDS = [c.name for c in CASES]


def _run(case: Case, values: pd.DataFrame) -> list[tuple[int, int, int | None]]:
    baseline = case.baseline(values) if case.baseline else None
    detection = case.detector.detect(values, baseline)
    events = to_events(detection, case.detector, case.persistence, signal=case.name, layer="engine")
    rows = {ts: i for i, ts in enumerate(values.index)}
    return [(rows[pd.Timestamp(e.onset)], rows[pd.Timestamp(e.detected_at)],
             None if e.cleared_at is None else rows[pd.Timestamp(e.cleared_at)])
            for e in events if e.entity == {"series": "a"}]


def test_every_registered_detector_has_a_case() -> None:
    assert {type(c.detector) for c in CASES} == set(DETECTORS.values())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_fires_at_exact_times(case: Case) -> None:
    assert _run(case, frame(case.data(True))) == [case.expected]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_quiet_on_noise(case: Case) -> None:
    data = {k: v + np.random.default_rng(1).normal(0, case.noise, ROWS) for k, v in case.data(False).items()}
    assert _run(case, frame(data)) == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_nan_and_gaps_outside_the_anomaly_change_nothing(case: Case) -> None:
    data = {k: v.copy() for k, v in case.data(True).items()}
    for v in data.values():
        v[[3, 4, 12]] = np.nan
    assert _run(case, frame(data)) == [case.expected]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_causal_on_prefixes(case: Case) -> None:
    values = frame(case.data(True))
    baseline = case.baseline(values) if case.baseline else None
    full = case.detector.detect(values, baseline)
    for end in range(2, ROWS + 1):
        prefix = values.iloc[:end]
        part = case.detector.detect(prefix, None if baseline is None else
                                    Baseline(baseline.center.iloc[:end], baseline.scale.iloc[:end]))
        pd.testing.assert_frame_equal(part.flags, full.flags.iloc[:end])
        onsets = [(o, d) for o, d, _ in _run(case, prefix)]
        assert onsets == ([case.expected[:2]] if end > case.expected[1] else [])


def test_rejects_unsorted_index_and_missing_baseline() -> None:
    values = frame({"a": np.arange(5.0)})
    with pytest.raises(FrameError, match="strictly increasing"):
        AbsoluteThreshold(1.0).detect(values.iloc[::-1])
    with pytest.raises(FrameError, match="needs a baseline"):
        BaselineRatio().detect(values)


def test_counter_reset_is_not_growth() -> None:
    # A restart: 5000 → 3 reads as an increase of 3, not −4997 or +5000.
    v = np.r_[np.arange(4990.0, 5010.0), np.arange(3.0, 23.0)]
    inc = CounterGrowth(window_s=300, min_increase=100, ratio=None).transform(frame({"a": v}))
    assert inc["a"].iloc[20] == pytest.approx(4 + 3)
    assert inc["a"].max() <= 5.0 + 3.0


def test_trend_time_to_full() -> None:
    # 10 MB per minute from 1000 MB with 2000 MB capacity: full 100 minutes later.
    v = 1000.0 + 10.0 * np.arange(ROWS)
    det = Trend(window_s=600, capacity=2000.0).detect(frame({"a": v}))
    assert det.flags["a"].iloc[9:].all() and not det.flags["a"].iloc[:9].any()
    assert det.reference["a"].iloc[-1] == pytest.approx((2000.0 - v[-1]) / (10.0 / 60.0), rel=1e-4)


@pytest.mark.parametrize(("level", "per_window", "capacity", "fires"), [
    # A card held at 90 % that gains 2 points in the window: 2 % of its level, a fifth of its headroom.
    (0.90, 0.02, None, False),
    (0.90, 0.02, 1.0, True),
    # A process at 3 % of its host growing 1.5 points (half of itself): its level decides.
    (0.03, 0.015, 1.0, True),
    (0.03, 0.001, 1.0, False),
    # Rising 5 % of the smaller of level and headroom is the boundary.
    (0.50, 0.0251, 1.0, True),
    (0.50, 0.0249, 1.0, False),
])
def test_trend_rise_is_judged_against_level_or_headroom(level: float, per_window: float,
                                                        capacity: float | None, fires: bool) -> None:
    rows = 31  # the 30-minute window on a 1-min grid, ending on the last row
    start = level - per_window
    v = np.r_[np.full(ROWS - rows, start), start + per_window * np.arange(rows) / 30]
    det = Trend(window_s=1800, capacity=capacity, horizon_s=1e9).detect(frame({"a": v}))
    assert bool(det.flags["a"].iloc[-1]) is fires


def test_peer_groups_are_separate() -> None:
    # A100s at 1.0 and H100s at 2.0: neither group is an outlier against the other.
    cols = {f"a{i}": np.full(ROWS, 1.0 + i * 0.01) for i in range(4)}
    cols |= {f"h{i}": np.full(ROWS, 2.0 + i * 0.01) for i in range(4)}
    groups = {k: k[0] for k in cols}
    assert not PeerOutlier(groups=groups).detect(frame(cols)).flags.to_numpy().any()


def test_vanished_by_sample_age_beats_the_lookback() -> None:
    # Ages of the newest sample at a 15 s grid: fresh until row 19, then growing by 15 s a row.
    ages = np.r_[np.zeros(20), 15.0 * np.arange(1, 21)]
    ages[36:] = np.nan  # past the store's 5-minute lookback the series is gone altogether
    flags = Vanished(max_age_s=60).detect(frame({"a": ages}, 15.0)).flags["a"].to_numpy()
    assert np.flatnonzero(flags).tolist() == list(range(24, 40))  # age 75 s at row 24


def test_neighbour_surprise_tells_a_recurring_shape_once_and_a_new_one_again() -> None:
    rng = np.random.default_rng(4)
    v = 50.0 + rng.normal(0, 1.0, 1500)
    v[300:] += 30.0  # a level shift: surprising once, then the new level is the usual
    v[1200] += 40.0  # a spike on the new level, once the shift has left the detector's memory
    # The range is judged from 300 samples on: Gaussian noise still sets new extremes before that.
    flags = NeighbourSurprise(range_warmup=300).detect(frame({"a": v})).flags["a"].to_numpy()
    assert np.flatnonzero(flags).tolist() == [300, 1200]


@pytest.mark.parametrize(("second", "tail", "flagged"), [
    # A later, smaller anomaly still inside the memory of a bigger one: told (its bar is the
    # record of normal behaviour, not the first anomaly's peak).
    (10.0, 4.0, [200, 400]),
    # Smaller than the normal record: not told.
    (4.5, 4.0, [200]),
    # Surprises that stay high after the anomaly's own shapes have passed are behaviour the
    # memory keeps: a second anomaly must beat them.
    (10.0, 12.0, [200]),
])
def test_neighbour_surprise_caps_a_told_anomaly_in_its_memory(second: float, tail: float,
                                                              flagged: list[int]) -> None:
    detector = NeighbourSurprise(window=12, memory=600, min_prior=100, quiet=100, min_z=None)
    surprise = np.r_[np.full(200, 5.0), np.full(12, 20.0), np.full(100, tail), np.full(188, 4.0)]
    surprise[400] = second
    flags = detector.flags_of(surprise, np.ones_like(surprise))
    assert np.flatnonzero(flags).tolist() == flagged
