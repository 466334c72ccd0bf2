"""bench/nab_eval.py's folds: the scorer's arithmetic on flagged rows, and choosing by the worst category."""

from __future__ import annotations

import numpy as np
import pytest

from tests.script_module import load_script

ne = load_script("bench/nab_eval.py")


def labelled(category: str = "c") -> object:
    """Eight rows one step apart: two in probation, one window over rows 3-4, the rest outside."""
    rows_s = np.arange(8.0) * 300
    where = np.array([-2, -2, -1, 0, 0, -1, -1, -1])
    weight = np.array([0.0, 0.0, -1.0, 1.0, 0.5, -0.9, -0.5, -0.2])
    weights = {p: (weight * (2 if p == "reward_low_FP_rate" else 1), where, 1, 1.0)
               for p in ("standard", "reward_low_FP_rate", "reward_low_FN_rate")}
    return ne.Labelled(category, rows_s, np.zeros(8), np.zeros(8), rows_s, weights)


@pytest.mark.parametrize(("flagged", "standard", "false_alarms"), [
    ([], -1.0, 0),                # a missed window costs fnw
    ([0, 1], -1.0, 0),            # probation is never scored
    ([4], 0.5, 0),                # a late hit earns its row's weight
    ([3, 4], 1.0, 0),             # the best hit in a window counts once
    ([3, 6, 7], 1.0 - 0.5 - 0.2, 2),
])
def test_file_points_are_the_scorers_sums_over_flagged_rows(flagged: list[int], standard: float,
                                                            false_alarms: int) -> None:
    flags = np.zeros(8, dtype=bool)
    flags[flagged] = True
    points, alarms = ne.file_points(labelled(), flags)
    assert points["standard"] == (pytest.approx(standard), -1.0)
    assert alarms == false_alarms


def test_choose_takes_the_best_worst_category_not_the_best_mean() -> None:
    def cats(a: float, b: float) -> dict[str, dict[str, float]]:
        return {name: {"windows": 1, "false_alarms": 0, "standard": low_fp, "reward_low_FP_rate": low_fp}
                for name, low_fp in (("a", a), ("b", b))}
    table = {("even",): cats(60.0, 60.0), ("lopsided",): cats(90.0, 50.0)}
    assert ne.choose(table, ["a", "b"]) == ("even",)
    assert ne.choose(table, ["a"]) == ("lopsided",)
