"""Vectorised window quantiles equal pandas' rolling median and quantiles, NaN and edges included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzer.windowstats import window_quantiles


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
