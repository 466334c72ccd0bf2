"""The demo's histogram arithmetic matches Prometheus's histogram_quantile."""

from __future__ import annotations

import math

import pytest

from oximeter.scrape import delta, quantile


@pytest.mark.parametrize(
    ("q", "cumulative", "expected"),
    [
        (0.5, {0.1: 0.0, 0.2: 10.0, math.inf: 10.0}, 0.15),
        (0.99, {0.1: 50.0, 1.0: 100.0, math.inf: 100.0}, 0.982),
        (0.99, {0.1: 0.0, 1.0: 0.0, math.inf: 10.0}, 1.0),  # beyond the last bucket: its bound
        (0.5, {0.1: 0.0, math.inf: 0.0}, math.nan),
        (0.5, {}, math.nan),
    ],
)
def test_quantile(q: float, cumulative: dict[float, float], expected: float) -> None:
    got = quantile(q, cumulative)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected)


def test_delta_survives_reset() -> None:
    assert delta({1.0: 5.0, math.inf: 7.0}, {1.0: 3.0, math.inf: 10.0}) == {1.0: 2.0, math.inf: 7.0}
