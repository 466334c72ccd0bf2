"""Counter growth against a real baseline rate, and the slow burn no 5-min window sees.

The ratio criterion compares a window's increase with the counter's own mean rate (no floor that
turns "×100" into "+100"), guarded by a minimum count; the long-window signal catches a steady
burn. Table tests sit at each boundary; the detect tests run the catalogue's own ECC signals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import frame

from analyzer.detection.detectors import CounterGrowth
from analyzer.detection.evaluate import evaluate_signal
from analyzer.detection.judges import detectors_of
from analyzer.signals.catalogue import CATALOGUE
from analyzer.signals.frame import Baseline, SeriesFrame

DAY_ROWS = 1440  # one day of one-minute rows


def _increases(base: float, now: float, history_rows: int = DAY_ROWS + 120) -> pd.DataFrame:
    """5-min increases (already windowed, as a recording rule gives them): ``base`` for the
    history, then ``now`` for the last ten rows."""
    v = np.full(history_rows + 10, base)
    v[-10:] = now
    return frame({"a": v})


RATIO_ROWS = [
    # base rate per 5 min, increase now, fires: ×100 of the true rate, and at least 5 in the window
    (0.05, 5.0, True),
    (0.05, 4.9, False),
    (0.1, 9.9, False),
    (0.1, 10.0, True),
    (0.0, 5.0, True),  # nothing before: the minimum count decides
    (0.0, 4.0, False),  # nor is 4 from nothing: not one cosmic ray, nor four
    (0.01, 4.0, False),  # ×400 but under the minimum count
    (0.5, 49.0, False),
    (0.5, 50.0, True),
    (2.0, 99.0, False),  # ×50: neither ×100 nor +100
    (2.0, 100.0, True),  # +100 in 5 min fires whatever the rate
]


@pytest.mark.parametrize(("base", "now", "fires"), RATIO_ROWS)
def test_ratio_against_the_real_rate(base: float, now: float, fires: bool) -> None:
    det = CounterGrowth(window_s=300, min_increase=100, ratio=100, cumulative=False).detect(
        _increases(base, now))
    assert bool(det.flags["a"].iloc[-1]) is fires
    assert not det.flags["a"].iloc[:-10].any()
    assert det.reference["a"].iloc[-1] == pytest.approx(base, abs=1e-6)


@pytest.mark.parametrize(("history_rows", "known"), [(59, False), (61, True)])
def test_the_rate_needs_an_hour_of_its_own_history(history_rows: int, known: bool) -> None:
    # The rate is averaged over the day that ended an hour ago; with less than an hour of that
    # span there is no rate, and 10 on a rate of 0.1 is judged by the absolute criterion alone.
    values = _increases(0.1, 10.0, history_rows=50 + history_rows)
    det = CounterGrowth(window_s=300, min_increase=100, ratio=100, cumulative=False).detect(values)
    assert bool(det.flags["a"].iloc[-1]) is known


def test_without_its_own_history_the_given_baseline_is_the_rate() -> None:
    values = _increases(0.1, 10.0, history_rows=30)
    center = pd.DataFrame(0.1, index=values.index, columns=values.columns)
    base = Baseline(center, center * 0)
    det = CounterGrowth(window_s=300, min_increase=100, ratio=100, cumulative=False).detect(values, base)
    assert det.flags["a"].iloc[-1] and det.reference["a"].iloc[-1] == pytest.approx(0.1)


BURN_ROWS = [
    # errors per minute, sustained; fires: +300 in 1 h
    (4.98, False),
    (5.0, True),
    (10.0, True),
    (0.01, False),
]


@pytest.mark.parametrize(("per_minute", "fires"), BURN_ROWS)
def test_burn_window_boundary(per_minute: float, fires: bool) -> None:
    spec = CATALOGUE["ecc_corrected_burn"]
    [det] = detectors_of(spec, cumulative=True)
    counter = 1000.0 + per_minute * np.arange(180.0)
    flags = det.detect(frame({"a": counter})).flags["a"]
    assert bool(flags.iloc[-1]) is fires


def _ecc(counter: np.ndarray) -> SeriesFrame:
    return SeriesFrame(frame({"gpu=1,node=n1": counter}), {"gpu=1,node=n1": {"node": "n1", "gpu": "1"}})


def _sparse_then(storm_per_minute: float, storm_rows: int) -> np.ndarray:
    """Two days of one corrected error every 100 minutes (0.05 per 5 min), then a storm."""
    rows = 2 * DAY_ROWS
    steps = np.zeros(rows + storm_rows)
    steps[np.arange(67, rows, 100)] = 1.0
    steps[rows:] = storm_per_minute
    return np.cumsum(steps)


def test_detect_catches_a_rise_from_a_twentieth_to_five_per_5_min() -> None:
    # The day the rate is averaged over (it ended an hour before) holds 14 of the sparse errors:
    # 0.049 per 5 min (a day holds 14 or 15 of them; 15 would make 5 only ×96). One error a minute
    # is 5 per 5 min, ×100 of it, and a twentieth of the absolute +100.
    counter = _sparse_then(1.0, 30)
    [event] = evaluate_signal(CATALOGUE["ecc_corrected_increase"], _ecc(counter), cumulative=True)
    assert event.entity == {"gpu": "1", "node": "n1"}
    assert event.value == pytest.approx(5.0)
    assert event.baseline == pytest.approx(14 * 5 / DAY_ROWS, rel=1e-3)
    assert pd.Timestamp(event.onset) >= frame({"a": counter}).index[2 * DAY_ROWS]
    # The burn signal does not see it: 30 errors in the hour is no burn.
    assert evaluate_signal(CATALOGUE["ecc_corrected_burn"], _ecc(counter), cumulative=True) == []


def test_detect_quiet_on_the_healthy_sparse_rate() -> None:
    counter = _sparse_then(0.0, 600)
    for name in ("ecc_corrected_increase", "ecc_corrected_burn"):
        assert evaluate_signal(CATALOGUE[name], _ecc(counter), cumulative=True) == []


def test_detect_catches_a_steady_burn_of_ten_a_minute_for_three_hours() -> None:
    # 50 per 5 min never reaches +100, and a burn that has lasted is its own baseline: the 1-h
    # window (+600) is what sees it, as a warning-grade event that stays open.
    counter = _sparse_then(10.0, 180)
    steady = CounterGrowth(window_s=300, min_increase=100, ratio=None).detect(frame({"a": counter}))
    assert not steady.flags["a"].any()
    [event] = evaluate_signal(CATALOGUE["ecc_corrected_burn"], _ecc(counter), cumulative=True)
    assert event.active and event.value == pytest.approx(600.0)
    start = frame({"a": counter}).index[2 * DAY_ROWS]
    detected = pd.Timestamp(event.detected_at)
    assert start + pd.Timedelta(minutes=30) <= detected <= start + pd.Timedelta(minutes=40)


def test_blocks_of_series_give_the_same_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The detection works through the series a block at a time: any block size, the same bits."""
    rows = [_increases(base, now, history_rows=200)["a"].to_numpy() for base, now, _ in RATIO_ROWS]
    values = frame({f"s{i}": r for i, r in enumerate(rows)})
    center = pd.DataFrame(np.linspace(0.0, 2.0, values.size).reshape(values.shape).astype(np.float32),
                          index=values.index, columns=values.columns)
    detector = CounterGrowth(window_s=300, min_increase=100, ratio=100, cumulative=False)
    whole = [detector.detect(values, base) for base in (None, Baseline(center, center * 0))]
    monkeypatch.setattr("analyzer.detection.detectors.counter.BLOCK_SERIES", 3)
    for base, want in zip((None, Baseline(center, center * 0)), whole, strict=True):
        got = detector.detect(values, base)
        for name in ("flags", "score", "reference", "keep"):
            pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)
    assert whole[1].flags.to_numpy().any() and not whole[1].flags.to_numpy().all()
