"""The long-run judges of a detector's score: anomaly likelihood (z of recent means) and range breaks."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detection.detectors.likelihood import range_breaks, score_z


def test_score_z_measures_the_recent_mean_against_earlier_means_only() -> None:
    score = np.r_[np.nan, np.tile([1.0, 3.0], 50), 12.0]
    z = score_z(score, short=2, long=1000, min_history=10, min_spread=0.1)
    # Means of two alternate 1 and 3: always 2, so the spread floor (0.1) is the scale.
    assert np.isnan(z[:12]).all()
    assert z[12:-1] == pytest.approx(0.0)
    assert z[-1] == pytest.approx((7.5 - 2.0) / 0.1)  # the last mean (3 + 12) / 2 is not its own history


def test_score_z_scales_by_the_spread_of_past_means() -> None:
    score = np.r_[np.tile([1.0, 3.0], 50), 5.0]
    z = score_z(score, short=1, long=1000, min_history=10, min_spread=0.1)
    assert z[-1] == pytest.approx((5.0 - 2.0) / np.std(score[:-1], ddof=1))


@pytest.mark.parametrize(("value", "above", "below"), [
    (10.4, False, False),  # within 5 % of the 0–10 range above its top
    (10.6, True, False),
    (-0.6, False, True),
])
def test_range_breaks_need_a_margin_beyond_everything_seen(value: float, above: bool, below: bool) -> None:
    values = np.r_[np.tile([0.0, 10.0, 5.0], 7), np.nan, value]
    up, down = range_breaks(values, warmup=5, tolerance=0.05)
    assert not up[:-1].any() and not down[:-1].any()
    assert (up[-1], down[-1]) == (above, below)


def test_range_breaks_wait_for_the_warmup_and_ignore_a_flat_series() -> None:
    up, _ = range_breaks(np.r_[0.0, 1.0, 50.0], warmup=5, tolerance=0.05)
    assert not up.any()
    up, down = range_breaks(np.r_[np.full(10, 3.0), 9.0], warmup=5, tolerance=0.05)
    assert not up.any() and not down.any()
