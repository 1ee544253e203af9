"""Statistics from raw samples, checked against numpy and exact binomial order statistics."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelscope.measurement.stats import median_ci, percentile, summarise


@given(
    st.lists(st.floats(0.0, 1e3, allow_nan=False), min_size=1, max_size=200), st.floats(0.0, 100.0)
)
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    ordered = sorted(values)
    assert percentile(ordered, q) == pytest.approx(np.percentile(ordered, q), rel=1e-12, abs=1e-9)


def test_summary_of_known_samples() -> None:
    samples = [0.010, 0.012, 0.011, 0.013, 0.030, 0.011, 0.012, 0.010, 0.011, 0.012]
    summary = summarise(samples)
    assert summary.count == 10
    assert summary.mean_s == pytest.approx(np.mean(samples))
    assert summary.std_s == pytest.approx(np.std(samples, ddof=1))
    assert summary.median_s == pytest.approx(0.0115)
    assert summary.min_s == 0.010 and summary.max_s == 0.030
    assert summary.p99_s == pytest.approx(np.percentile(samples, 99))
    assert summary.p999_s == pytest.approx(np.percentile(samples, 99.9))
    assert summary.iqr_s == pytest.approx(np.percentile(samples, 75) - np.percentile(samples, 25))
    # n = 10 at 95 %: the exact interval is [x(2), x(9)]
    ordered = sorted(samples)
    assert (summary.median_ci_low_s, summary.median_ci_high_s) == (ordered[1], ordered[8])


@pytest.mark.parametrize(
    ("n", "lower_rank"),
    [(6, 1), (10, 2), (20, 6), (50, 18), (100, 40)],  # standard tables of the sign-test CI
)
def test_median_ci_ranks_match_tables(n: int, lower_rank: int) -> None:
    values = [float(i) for i in range(1, n + 1)]
    low, high = median_ci(values)
    assert low == lower_rank
    assert high == n - lower_rank + 1


def test_median_ci_too_few_samples_is_full_range() -> None:
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) == (1.0, 5.0)


def test_median_ci_normal_approximation_is_continuous_with_exact() -> None:
    exact = median_ci([float(i) for i in range(1, 1001)])
    approx = median_ci([float(i) for i in range(1, 1002)])
    assert abs(exact[0] - approx[0]) <= 1


def test_median_ci_covers_true_median_at_least_95_percent() -> None:
    rng = random.Random(7)
    trials, covered = 2000, 0
    for _ in range(trials):
        draws = sorted(rng.expovariate(1.0) for _ in range(31))
        low, high = median_ci(draws)
        covered += low <= math.log(2) <= high
    assert covered / trials >= 0.94  # nominal >= 95 %; allow Monte-Carlo error


def test_noise_warning_thresholds() -> None:
    steady = summarise([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0])
    assert steady.noise_warnings() == []
    noisy = summarise([1.0, 1.15, 0.85, 1.1, 1.2, 0.8, 0.9, 1.0])
    assert noisy.iqr_ratio > 0.10
    assert noisy.noise_warnings()[0].startswith("noisy")
    wild = summarise([1.0, 2.0, 0.5, 1.0, 3.0, 0.4, 1.0, 1.5])
    assert wild.noise_warnings()[0].startswith("very noisy")


def test_empty_samples_are_rejected() -> None:
    with pytest.raises(ValueError):
        summarise([])
