"""The estimator-variant metrics of the HedgeSpec benchmark (bench/learner/hedgespec_bench.py)."""

from __future__ import annotations

import math

import pytest

from bench.learner.hedgespec_bench import (
    Run,
    calibration_error,
    estimator_metrics,
    mean_estimates,
    spearman,
)
from bench.prompts import Prompt


def run(name: str, tokens: int, rounds: int, estimates: list[tuple[float, int]] | None = None,
        est: dict[str, float] | None = None, windows: int = 0) -> Run:
    return Run(name, Prompt("p", "a", [1]), tokens, rounds, 1.0, 0.0, 1.0,
               regret_curve=[0.0] * windows, estimates=estimates or [], est_len_sum=est or {})


def test_spearman_is_one_for_monotone_minus_one_for_reversed_and_handles_ties() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 25, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_calibration_error_reports_the_mean_absolute_error_and_slope() -> None:
    perfect = calibration_error([run("h", 10, 3, [(2.0, 2), (4.0, 4), (5.0, 5)])])
    assert perfect["mae"] == 0.0 and perfect["slope"] == pytest.approx(1.0)
    saturated = calibration_error([run("h", 10, 3, [(6.0, 2), (6.0, 4), (5.0, 6)])])
    assert saturated["mae"] == pytest.approx((4 + 2 + 1) / 3) and saturated["slope"] < 0


def test_ranking_compares_mean_estimates_with_each_drafters_mat_alone() -> None:
    hedge = [run("h", 21, 5, [(3.0, 3)], {"a": 10.0, "b": 20.0}, windows=5)]
    assert mean_estimates(hedge) == {"a": 2.0, "b": 4.0}
    alone = {"a": [run("a", 11, 10)], "b": [run("b", 41, 10)]}
    m = estimator_metrics(hedge, alone, oracle=[run("o", 41, 10)], depth=4)
    assert m["rank_corr"] == pytest.approx(1.0) and m["mat"] == 4.0 and m["mat_vs_oracle"] == 1.0
