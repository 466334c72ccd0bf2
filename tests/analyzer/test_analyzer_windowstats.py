"""Vectorised window quantiles equal pandas' rolling median and quantiles, NaN and edges included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzer.signals.windowstats import window_quantiles


@pytest.mark.parametrize(("window", "min_count", "nan_share"), [(5, 3, 0.0), (12, 6, 0.2), (31, 1, 0.5)])
def test_equals_pandas_rolling(window: int, min_count: int, nan_share: float) -> None:
    rng = np.random.default_rng(window)
    data = rng.normal(size=(80, 7)).astype(np.float32)
    data[rng.random(data.shape) < nan_share] = np.nan
    rows = np.array([0, 1, 4, 30, 79])
    med, q25, q75 = window_quantiles(data, rows - window + 1, window, (0.5, 0.25, 0.75), min_count)
    roll = pd.DataFrame(data.astype(np.float64)).rolling(window, min_periods=min_count)
    for got, want in ((med, roll.median()), (q25, roll.quantile(0.25)), (q75, roll.quantile(0.75))):
        np.testing.assert_allclose(got, want.to_numpy()[rows], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_windows_beyond_the_data_are_missing() -> None:
    data = np.arange(10, dtype=np.float32)[:, None]
    [med] = window_quantiles(data, np.array([-20, 8, 15]), 3, (0.5,), 1)
    assert np.isnan(med[0, 0]) and med[1, 0] == 8.5 and np.isnan(med[2, 0])


@pytest.mark.parametrize("block_values", [1, 31 * 3, 31 * 7 * 2])
def test_blocks_of_any_size_give_the_same_numbers(block_values: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory is bounded by cutting the work into blocks of rows and of series (one window at a
    time at the smallest): the numbers are the same bits, full windows and gappy ones alike."""
    rng = np.random.default_rng(1)
    data = rng.normal(size=(80, 7)).astype(np.float32)
    data[rng.random(data.shape) < 0.1] = np.nan
    data[:, 3] = rng.normal(size=80)  # a full series
    starts = np.array([-5, 0, 10, 20, 30, 49])
    whole = window_quantiles(data, starts, 31, (0.5, 0.9), 10)
    monkeypatch.setattr("analyzer.signals.windowstats.BLOCK_VALUES", block_values)
    for got, want in zip(window_quantiles(data, starts, 31, (0.5, 0.9), 10), whole, strict=True):
        np.testing.assert_array_equal(got, want)
