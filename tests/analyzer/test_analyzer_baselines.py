"""Baselines: same time of day, least-deviating day, exclusions, static fallback, causality."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from analyzer_frames import T0, frame

from analyzer.detection.baselines import BaselinePolicy, combine, compute_baseline, history_start, recent

STEP = 300.0  # 5-minute grid: 288 rows a day
DAY = 288


def daily(days: int) -> np.ndarray:
    """A daily shape (quiet night, busy afternoon) with a little noise."""
    t = np.arange(days * DAY)
    shape = 10.0 + 5.0 * np.sin(2 * np.pi * (t % DAY) / DAY)
    return shape + np.random.default_rng(0).normal(0, 0.1, len(t))


def row(day: int, hour: float) -> int:
    return day * DAY + int(hour * 12)


def test_same_time_yesterday_follows_the_daily_shape() -> None:
    values = frame({"a": daily(3)}, STEP)
    base = compute_baseline(values, policy=BaselinePolicy(lags_s=(86400.0,)))
    today = slice(row(2, 0), row(3, 0))
    expected = 10.0 + 5.0 * np.sin(2 * np.pi * np.arange(DAY) / DAY)
    np.testing.assert_allclose(base.center["a"].to_numpy()[today], expected, atol=0.5)


@pytest.mark.parametrize(("days", "provisional"), [(0.5, True), (1.5, False)])
def test_the_first_day_is_judged_against_the_recent_window(days: float, provisional: bool) -> None:
    # Under a day of history there is no seasonal baseline: the recent window stands alone (not
    # NaN, which left a ratio detector blind for the first day), marked provisional.
    values = frame({"a": daily(2)[: int(days * DAY)]}, STEP)
    base = compute_baseline(values)
    assert base.center["a"].iloc[-1] == pytest.approx(values["a"].iloc[-13:-1].median(), rel=0.2)
    assert base.provisional is not None
    assert bool(base.provisional["a"].iloc[-1]) is provisional
    assert bool(base.provisional["a"].iloc[0])  # the first samples of any history are young


def test_the_least_deviating_candidate_wins() -> None:
    idx = pd.date_range(T0, periods=3, freq="5min")
    values = pd.DataFrame({"a": [10.0, 10.0, 30.0]}, index=idx)
    yesterday = pd.DataFrame({"a": [20.0, 20.0, 20.0]}, index=idx)  # a holiday: busier
    last_week = pd.DataFrame({"a": [11.0, 11.0, 11.0]}, index=idx)
    recent_center = pd.DataFrame({"a": [np.nan, 14.0, 14.0]}, index=idx)
    recent_scale = pd.DataFrame({"a": [1.0, 1.0, 1.0]}, index=idx)
    base = combine(values, [yesterday, last_week], recent_center, recent_scale,
                   BaselinePolicy(min_history_s=0.0))  # old enough: every candidate is trusted
    assert base.center["a"].tolist() == [11.0, 11.0, 20.0]


def test_margin_floor_on_the_scale() -> None:
    values = frame({"a": np.full(100, 50.0)}, 60.0)
    base = compute_baseline(values, policy=BaselinePolicy(margin_rel=0.1, margin_abs=2.0))
    assert base.scale["a"].iloc[-1] == pytest.approx(5.0)
    base = compute_baseline(values, policy=BaselinePolicy(margin_rel=0.0, margin_abs=2.0))
    assert base.scale["a"].iloc[-1] == pytest.approx(2.0)


def _spiked_yesterday() -> tuple[pd.DataFrame, pd.DataFrame, int]:
    v = np.full(2 * DAY, 10.0) + np.random.default_rng(1).normal(0, 0.1, 2 * DAY)
    v[row(0, 10): row(0, 11)] = 50.0  # yesterday 10:00-11:00: an incident
    now = row(1, 10.5)
    v[now] = 35.0  # today 10:30: a real anomaly
    values = frame({"a": v}, STEP)
    anomalous = pd.DataFrame(False, index=values.index, columns=values.columns)
    anomalous.iloc[row(0, 10): row(0, 11)] = True
    return values, anomalous, now


def test_yesterdays_incident_does_not_blind_today() -> None:
    values, anomalous, now = _spiked_yesterday()
    policy = BaselinePolicy(lags_s=(86400.0,))
    blinded = compute_baseline(values, policy=policy).center["a"].iloc[now]
    assert blinded == pytest.approx(50.0)
    clean = compute_baseline(values, anomalous=anomalous, policy=policy).center["a"].iloc[now]
    assert clean == pytest.approx(10.0, abs=0.3)
    change = [(values.index[row(0, 10)], values.index[row(0, 11) - 1])]
    declared = compute_baseline(values, changes=change, policy=policy).center["a"].iloc[now]
    assert declared == pytest.approx(10.0, abs=0.3)


def test_excluded_long_anomaly_keeps_the_last_good_recent_baseline() -> None:
    v = np.full(360, 10.0)
    v[180:300] = 20.0
    values = frame({"a": v}, 60.0)
    mask = pd.DataFrame(False, index=values.index, columns=values.columns)
    mask.iloc[180:300] = True
    chased, _ = recent(values, 3600)
    assert chased["a"].iloc[290] == 20.0
    kept = compute_baseline(values, anomalous=mask, policy=BaselinePolicy())
    assert kept.center["a"].iloc[290] == 10.0


@pytest.mark.parametrize("end", [DAY - 1, DAY, DAY + 7, 2 * DAY + 100])
def test_causal_on_prefixes(end: int) -> None:
    values = frame({"a": daily(3), "b": daily(3)[::-1].copy()}, STEP)
    full = compute_baseline(values)
    part = compute_baseline(values.iloc[:end])
    pd.testing.assert_frame_equal(part.center, full.center.iloc[:end])
    pd.testing.assert_frame_equal(part.scale, full.scale.iloc[:end])


def test_same_time_windows_give_the_same_baseline_as_the_whole_history() -> None:
    values = frame({"a": daily(8), "b": daily(8) * 2}, STEP)
    policy = BaselinePolicy()
    live = values.iloc[-12:]  # the last hour
    whole = compute_baseline(live, values, policy=policy)
    half = pd.Timedelta(seconds=policy.seasonal_half_window_s)
    windows = {}
    for lag in policy.lags_s:
        shift = pd.Timedelta(seconds=lag)
        lo, hi = live.index[0] - shift - half, live.index[-1] - shift + half
        windows[lag] = values.loc[(values.index >= lo) & (values.index <= hi)]
    by_window = compute_baseline(live, windows, policy=policy)
    # The recent baseline sees only the live hour in both; the seasonal candidates must agree.
    assert whole.center.notna().all().all()
    pd.testing.assert_frame_equal(by_window.center, whole.center)


def test_tracker_incremental_equals_the_batch_baseline() -> None:
    from analyzer.detection.baseline_tracker import BaselineTracker

    values = frame({"a": daily(8), "b": daily(8) * 2, "c": daily(8)[::-1].copy()}, STEP)
    values.iloc[2000:2010, 1] = np.nan
    policy = BaselinePolicy()
    tracker = BaselineTracker(policy)
    half = pd.Timedelta(seconds=policy.seasonal_half_window_s)
    live_rows = 24  # more than the 12-sample recent window, as the live hour is
    for end in range(2290, 2304):
        live = values.iloc[end - live_rows:end]
        windows = {}
        for lag in policy.lags_s:
            shift = pd.Timedelta(seconds=lag)
            lo, hi = live.index[0] - shift - half, live.index[-1] - shift + half
            windows[lag] = values.loc[(values.index >= lo) & (values.index <= hi)]
        got = tracker.update(live, windows)
        # The tracker computed older rows when they were new, from the live window of that
        # cycle: the batch over everything seen since the first cycle gives the same numbers.
        seen = values.iloc[2290 - live_rows:end]
        want = compute_baseline(seen, values, policy=policy)
        pd.testing.assert_frame_equal(got.center, want.center.iloc[-live_rows:], rtol=1e-5, check_freq=False)
        pd.testing.assert_frame_equal(got.scale, want.scale.iloc[-live_rows:], rtol=1e-4, check_freq=False)


def test_tracker_hour_scale_equals_the_whole_windows_row_for_row() -> None:
    """The hour scale is kept between cycles like the centre: every row the tracker computed when it
    was new equals that row of the whole live window's, like-node floor included."""
    from analyzer.detection.baseline_tracker import BaselineTracker
    from analyzer.detection.hour_scale import hour_scale

    rng = np.random.default_rng(3)
    columns = {f"n{i}": daily(8) * (1.0 + 0.1 * i) + rng.gamma(1.0, 0.2 * i, 8 * DAY) for i in range(6)}
    values = frame(columns, STEP)
    like = {f"n{i}": "service=a" for i in range(5)}  # n5 has no like nodes
    policy = BaselinePolicy()
    tracker = BaselineTracker(policy, max_new_rows=4)
    half = pd.Timedelta(seconds=policy.seasonal_half_window_s)
    live_rows = 24
    for end in range(2290, 2300):
        live = values.iloc[end - live_rows:end]
        windows = {}
        for lag in policy.lags_s:
            shift = pd.Timedelta(seconds=lag)
            lo, hi = live.index[0] - shift - half, live.index[-1] - shift + half
            windows[lag] = values.loc[(values.index >= lo) & (values.index <= hi)]
        got = tracker.update(live, windows, like_nodes=like).hour_scale
        assert got is not None
        whole = hour_scale(pd.DatetimeIndex(live.index), live.columns, windows, policy, like)
        assert whole is not None
        computed = got.notna().all(axis=1).to_numpy()
        assert computed.sum() == min(live_rows, 4 + end - 2290)  # the cold start's rows, then one a cycle
        np.testing.assert_array_equal(got.to_numpy()[computed], whole[computed])


def test_tracker_cold_start_limit_computes_only_the_newest_rows() -> None:
    from analyzer.detection.baseline_tracker import BaselineTracker

    values = frame({"a": daily(2)}, STEP)
    tracker = BaselineTracker(BaselinePolicy(), max_new_rows=5)
    first = tracker.update(values.iloc[:100], {})
    assert first.center["a"].iloc[:95].isna().all() and first.center["a"].iloc[95:].notna().all()
    second = tracker.update(values.iloc[1:101], {})
    assert second.center["a"].iloc[:94].isna().all() and second.center["a"].iloc[94:].notna().all()


def test_without_a_recent_past_the_same_time_spread_is_the_scale() -> None:
    """The first rows of a window have no recent IQR: yesterday's spread at that hour stands in
    (else the scale is only the 5 % margin and a swinging p99 looks 5 σ out)."""
    swing = np.tile(np.array([0.8, 1.2], dtype=np.float32), 160)  # IQR 0.4 -> σ 0.4 / 1.349
    history = frame({"a": swing}, 60.0).set_axis(
        pd.date_range(T0 - pd.Timedelta(days=1) - pd.Timedelta(hours=1), periods=320, freq="60s"), axis=0)
    values = frame({"a": np.full(5, 1.0)}, 60.0)
    base = compute_baseline(values, {86400.0: history})
    assert base.scale["a"].tolist() == pytest.approx([0.4 / 1.349] * 5, rel=1e-4)


def test_history_starts_at_each_series_first_value_in_any_window() -> None:
    nan = np.nan
    live = frame({"from_start": [1.0, 2, 3], "later": [nan, nan, 5], "never": [nan, nan, nan]})
    day_before = live.index[:2] - pd.Timedelta(days=1)
    yesterday = frame({"from_start": [nan, 1.0], "later": [nan, nan], "never": [nan, nan]}).set_axis(
        day_before, axis=0)
    starts = history_start([live, yesterday])
    assert starts["from_start"] == day_before[1].tz_convert(None)
    assert starts["later"] == live.index[2].tz_convert(None)
    assert pd.isna(starts["never"])
