"""Ratio estimates between two sets of timings: bootstrap, Welch, paired t, Holm, settle count,
and the one rule for ratios between processes (process_ratio)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accelscope.measurement.stats import (
    BETWEEN_PROCESSES_RULE,
    RatioBasis,
    RatioEstimate,
    bootstrap_ratio,
    holm_adjust,
    paired_ratio,
    paired_ratio_ci,
    process_ratio,
    ratio_from_intervals,
    rounds_to_settle,
    welch_ratio,
)
from accelscope.serialise import dump


def _lognormal(median: float, sigma: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in median * np.exp(rng.normal(0.0, sigma, n))]


def _estimate(low: float, high: float, ratio: float = 1.0) -> RatioEstimate:
    return RatioEstimate(
        ratio=ratio,
        low=low,
        high=high,
        p_value=0.5,
        confidence=0.95,
        method="m",
        units="u",
    )


# --- bootstrap_ratio ---------------------------------------------------------------------------


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    a = _lognormal(0.1, 0.05, 60, seed=1)
    b = _lognormal(0.1, 0.05, 60, seed=2)
    first = bootstrap_ratio(a, b, seed=7)
    again = bootstrap_ratio(a, b, seed=7)
    assert first == again
    other = bootstrap_ratio(a, b, seed=8)
    # the point estimate never depends on the seed, the resampled interval does
    assert other.ratio == first.ratio
    assert (other.low, other.high) != (first.low, first.high)


def test_bootstrap_of_identical_samples_is_one() -> None:
    a = _lognormal(0.1, 0.01, 200, seed=1)
    estimate = bootstrap_ratio(a, list(a))
    assert estimate.ratio == 1.0
    assert estimate.low <= 1.0 <= estimate.high
    assert estimate.p_value > 0.5
    assert not estimate.separated
    assert estimate.confidence == 0.95
    assert estimate.method == "bootstrap of p50 ratio (2000 resamples, percentile interval)"
    assert estimate.units == "samples (200 vs 200)"


def test_bootstrap_sees_a_clear_twenty_percent_shift() -> None:
    a = _lognormal(0.1, 0.01, 200, seed=1)
    b = _lognormal(0.12, 0.01, 150, seed=2)
    estimate = bootstrap_ratio(a, b)
    assert estimate.ratio == pytest.approx(np.median(b) / np.median(a), rel=1e-12)
    assert estimate.ratio == pytest.approx(1.2, rel=0.01)
    assert 1.0 < estimate.low < estimate.ratio < estimate.high
    assert estimate.separated
    # no resample reaches 1: the p-value comes from the normal law of the log-ratios, far
    # below what counting 2000 resamples could show (so Holm over many rows can still reject)
    assert estimate.p_value < 1.0 / 2001
    assert estimate.p_value < 0.05
    assert estimate.units == "samples (200 vs 150)"


def test_bootstrap_faster_candidate_gives_interval_below_one() -> None:
    a = _lognormal(0.1, 0.01, 100, seed=3)
    b = _lognormal(0.08, 0.01, 100, seed=4)
    estimate = bootstrap_ratio(a, b, resamples=500)
    assert estimate.high < 1.0
    assert estimate.separated
    assert estimate.p_value < 1.0 / 501
    assert "500 resamples" in estimate.method


def test_bootstrap_of_the_99th_percentile() -> None:
    a = _lognormal(0.1, 0.01, 200, seed=1)
    b = _lognormal(0.12, 0.01, 200, seed=2)
    estimate = bootstrap_ratio(a, b, q=99.0)
    assert estimate.ratio == pytest.approx(np.percentile(b, 99) / np.percentile(a, 99), rel=1e-12)
    assert estimate.method.startswith("bootstrap of p99 ratio")
    assert estimate.low > 1.0
    assert estimate.low <= estimate.ratio <= estimate.high


def test_bootstrap_confidence_widens_the_interval() -> None:
    a = _lognormal(0.1, 0.05, 80, seed=5)
    b = _lognormal(0.1, 0.05, 80, seed=6)
    narrow = bootstrap_ratio(a, b, confidence=0.80)
    wide = bootstrap_ratio(a, b, confidence=0.99)
    assert wide.low <= narrow.low and narrow.high <= wide.high
    assert wide.confidence == 0.99


@pytest.mark.parametrize(
    ("baseline", "candidate"), [([1.0], [1.0, 2.0]), ([1.0, 2.0], [1.0]), ([], [1.0, 2.0])]
)
def test_bootstrap_needs_two_samples_per_side(
    baseline: list[float], candidate: list[float]
) -> None:
    with pytest.raises(ValueError, match="at least two samples"):
        bootstrap_ratio(baseline, candidate)


# --- welch_ratio -------------------------------------------------------------------------------


def test_welch_matches_scipy_on_logs() -> None:
    a = [0.101, 0.097, 0.104, 0.099]
    b = [0.118, 0.122, 0.115]
    estimate = welch_ratio(a, b)
    expected = scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    assert estimate.p_value == pytest.approx(float(expected.pvalue), rel=1e-12)
    interval = expected.confidence_interval(0.95)
    assert estimate.low == pytest.approx(math.exp(interval.low), rel=1e-12)
    assert estimate.high == pytest.approx(math.exp(interval.high), rel=1e-12)
    diff = np.mean(np.log(b)) - np.mean(np.log(a))
    assert estimate.ratio == pytest.approx(math.exp(diff), rel=1e-12)
    # ratio of geometric means, by hand
    geo_a = (0.101 * 0.097 * 0.104 * 0.099) ** (1 / 4)
    geo_b = (0.118 * 0.122 * 0.115) ** (1 / 3)
    assert estimate.ratio == pytest.approx(geo_b / geo_a, rel=1e-12)
    assert estimate.low < estimate.ratio < estimate.high
    assert estimate.method == "Welch t on log values (ratio of geometric means)"
    assert estimate.units == "processes (4 vs 3)"


def test_welch_confidence_level_is_passed_on() -> None:
    a = [1.0, 1.1, 0.9, 1.05]
    b = [1.2, 1.0, 1.3, 1.1]
    expected = scipy_stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    interval = expected.confidence_interval(0.80)
    estimate = welch_ratio(a, b, confidence=0.80)
    assert estimate.confidence == 0.80
    assert estimate.low == pytest.approx(math.exp(interval.low), rel=1e-12)
    assert estimate.high == pytest.approx(math.exp(interval.high), rel=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_welch_of_constant_equal_sides() -> None:
    estimate = welch_ratio([2.0, 2.0, 2.0], [2.0, 2.0])
    assert estimate.p_value == 1.0
    assert (estimate.ratio, estimate.low, estimate.high) == (1.0, 1.0, 1.0)
    assert not estimate.separated


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_welch_of_constant_different_sides() -> None:
    estimate = welch_ratio([2.0, 2.0, 2.0], [3.0, 3.0])
    assert estimate.p_value == 0.0
    assert estimate.ratio == pytest.approx(1.5)
    assert estimate.low == pytest.approx(1.5) and estimate.high == pytest.approx(1.5)


def test_welch_needs_two_values_per_side() -> None:
    with pytest.raises(ValueError, match="at least two values"):
        welch_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least two values"):
        welch_ratio([1.0, 2.0], [3.0])


# --- paired_ratio / paired_ratio_ci ------------------------------------------------------------


def test_paired_ratio_by_hand() -> None:
    baseline = [1.0, 2.0, 4.0]
    candidate = [1.1, 2.4, 4.2]
    logs = [math.log(1.1), math.log(1.2), math.log(1.05)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    se = sd / math.sqrt(3)
    half = float(scipy_stats.t.ppf(0.975, 2)) * se
    p_value = 2.0 * float(scipy_stats.t.sf(abs(mean / se), 2))

    estimate = paired_ratio(baseline, candidate)
    assert estimate.ratio == pytest.approx((1.1 * 1.2 * 1.05) ** (1 / 3), rel=1e-12)
    assert estimate.low == pytest.approx(math.exp(mean - half), rel=1e-12)
    assert estimate.high == pytest.approx(math.exp(mean + half), rel=1e-12)
    assert estimate.p_value == pytest.approx(p_value, rel=1e-12)
    # scipy's paired t-test on the logs gives the same p-value
    expected = scipy_stats.ttest_rel(np.log(candidate), np.log(baseline))
    assert estimate.p_value == pytest.approx(float(expected.pvalue), rel=1e-9)
    assert estimate.method == "paired t on log ratios (geometric mean of per-round ratios)"
    assert estimate.units == "rounds (3 pairs)"


def test_paired_ratio_of_one_pair_is_unbounded() -> None:
    estimate = paired_ratio([2.0], [3.0])
    assert estimate.ratio == pytest.approx(1.5)
    assert estimate.low == 0.0
    assert estimate.high == math.inf
    assert estimate.p_value == 1.0
    assert estimate.units == "rounds (1 pairs)"
    assert dump(estimate)["high"] is None


def test_paired_ratio_with_zero_spread() -> None:
    # every pair is exactly 1.1 apart (scaling by a power of two is exact)
    shifted = paired_ratio([1.0, 2.0, 4.0], [1.1, 2.2, 4.4])
    assert shifted.ratio == pytest.approx(1.1)
    assert shifted.low == shifted.ratio == shifted.high
    assert shifted.p_value == 0.0
    assert shifted.separated
    same = paired_ratio([1.0, 2.0, 4.0], [1.0, 2.0, 4.0])
    assert (same.ratio, same.low, same.high, same.p_value) == (1.0, 1.0, 1.0, 1.0)
    assert not same.separated


@pytest.mark.parametrize(("baseline", "candidate"), [([], []), ([1.0, 2.0], [1.0])])
def test_paired_ratio_needs_matching_pairs(baseline: list[float], candidate: list[float]) -> None:
    with pytest.raises(ValueError, match="same positive number"):
        paired_ratio(baseline, candidate)


def test_paired_ratio_ci_is_the_inverse_ratio() -> None:
    reference = [1.0, 2.0, 4.0, 3.0]
    candidate = [0.8, 1.7, 3.1, 2.5]
    speedup, low, high = paired_ratio_ci(reference, candidate)
    slowdown = paired_ratio(reference, candidate)
    assert speedup == pytest.approx(1.0 / slowdown.ratio, rel=1e-12)
    assert low == pytest.approx(1.0 / slowdown.high, rel=1e-12)
    assert high == pytest.approx(1.0 / slowdown.low, rel=1e-12)
    assert speedup > 1.0  # the candidate is faster
    assert low < speedup < high
    # one pair: unbounded
    one_speedup, one_low, one_high = paired_ratio_ci([2.0], [1.0])
    assert one_speedup == pytest.approx(2.0)
    assert (one_low, one_high) == (0.0, math.inf)


# --- holm_adjust -------------------------------------------------------------------------------


def test_holm_by_hand() -> None:
    # sorted: 0.01 * 4 = 0.04, 0.03 * 3 = 0.09, 0.04 * 2 = 0.08 -> 0.09 (monotone), 0.20 * 1
    assert holm_adjust([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    # 0.02 * 3 = 0.06, 0.3 * 2 = 0.6, 0.9 * 1 = 0.9
    assert holm_adjust([0.3, 0.9, 0.02]) == pytest.approx([0.6, 0.9, 0.06])


def test_holm_is_capped_at_one() -> None:
    assert holm_adjust([0.5, 0.6]) == [1.0, 1.0]
    assert holm_adjust([0.4, 0.001, 0.9]) == pytest.approx([0.8, 0.003, 0.9])


def test_holm_edge_cases() -> None:
    assert holm_adjust([]) == []
    assert holm_adjust([0.03]) == [0.03]


def test_holm_is_monotone_and_never_below_the_raw_p() -> None:
    rng = np.random.default_rng(11)
    raw = [float(x) for x in rng.uniform(0.0, 0.3, 12)]
    adjusted = holm_adjust(raw)
    assert all(a >= p for a, p in zip(adjusted, raw, strict=True))
    assert all(a <= 1.0 for a in adjusted)
    in_order = [adjusted[i] for i in sorted(range(len(raw)), key=lambda i: raw[i])]
    assert in_order == sorted(in_order)


# --- rounds_to_settle --------------------------------------------------------------------------


def _half_width(sd: float, n: int, confidence: float = 0.95) -> float:
    return float(scipy_stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sd / math.sqrt(n)


def test_rounds_to_settle_edge_cases() -> None:
    assert rounds_to_settle(0.1, 0.0) is None
    assert rounds_to_settle(0.1, -0.02) is None
    assert rounds_to_settle(0.0, 0.05) == 2
    assert rounds_to_settle(1.0, 1e-6, limit=50) is None


@pytest.mark.parametrize(("sd", "gap"), [(0.1, 0.05), (0.05, 0.04), (0.2, 0.06), (0.01, 0.5)])
def test_rounds_to_settle_is_the_smallest_n(sd: float, gap: float) -> None:
    n = rounds_to_settle(sd, gap)
    assert n is not None and 2 <= n < 100
    assert _half_width(sd, n) < gap
    if n > 2:
        assert _half_width(sd, n - 1) >= gap


def test_rounds_to_settle_known_value() -> None:
    # t(0.975, 17) * 0.1 / sqrt(18) = 0.0497 < 0.05; t(0.975, 16) * 0.1 / sqrt(17) = 0.0514
    assert rounds_to_settle(0.1, 0.05) == 18


def test_rounds_to_settle_grows_with_confidence() -> None:
    at_95 = rounds_to_settle(0.1, 0.05, confidence=0.95)
    at_99 = rounds_to_settle(0.1, 0.05, confidence=0.99)
    assert at_95 is not None and at_99 is not None
    assert at_99 > at_95
    assert _half_width(0.1, at_99, 0.99) < 0.05 <= _half_width(0.1, at_99 - 1, 0.99)


# --- ratio_from_intervals ----------------------------------------------------------------------


def test_ratio_from_intervals_by_hand() -> None:
    ratio, low, high = ratio_from_intervals((2.0, 1.5, 2.5), (3.0, 2.5, 3.5))
    assert ratio == pytest.approx(1.5)
    assert low == pytest.approx(2.5 / 2.5)
    assert high == pytest.approx(3.5 / 1.5)


def test_ratio_from_intervals_degenerate_bases() -> None:
    assert ratio_from_intervals((0.0, 0.0, 0.0), (3.0, 2.5, 3.5)) == (0.0, 0.0, 0.0)
    assert ratio_from_intervals((-1.0, -2.0, 0.0), (3.0, 2.5, 3.5)) == (0.0, 0.0, 0.0)
    ratio, low, high = ratio_from_intervals((2.0, 0.0, 4.0), (3.0, 2.0, 4.0))
    assert ratio == pytest.approx(1.5)
    assert low == pytest.approx(0.5)
    assert high == math.inf


# --- RatioEstimate -----------------------------------------------------------------------------


def test_ratio_estimate_stores_infinities_as_null() -> None:
    estimate = RatioEstimate(
        ratio=1.2,
        low=0.0,
        high=math.inf,
        p_value=1.0,
        confidence=0.9,
        method="paired",
        units="rounds (1 pairs)",
    )
    assert dump(estimate) == {
        "ratio": 1.2,
        "low": 0.0,
        "high": None,
        "p_value": 1.0,
        "confidence": 0.9,
        "method": "paired",
        "units": "rounds (1 pairs)",
    }
    assert dump(_estimate(-math.inf, 2.0))["low"] is None


@pytest.mark.parametrize(
    ("low", "high", "separated"),
    [
        (1.01, 1.2, True),
        (0.8, 0.99, True),
        (0.9, 1.1, False),
        (1.0, 1.2, False),
        (0.8, 1.0, False),
        (0.0, math.inf, False),
    ],
)
def test_ratio_estimate_separated(low: float, high: float, separated: bool) -> None:
    assert _estimate(low, high).separated is separated


def test_bootstrap_p_value_counts_the_tail_when_enough_resamples_lie_beyond_one() -> None:
    rng = np.random.default_rng(3)
    a = list(1.0 + 0.05 * rng.standard_normal(60))
    b = list(1.01 + 0.05 * rng.standard_normal(60))
    estimate = bootstrap_ratio(a, b, resamples=1000, seed=1)
    # a small shift: many resamples on each side of 1, p is twice the smaller share
    assert 0.01 < estimate.p_value <= 1.0
    assert (estimate.p_value < 0.05) == estimate.separated


def test_bootstrap_subsamples_large_sides_and_says_so() -> None:
    rng = np.random.default_rng(4)
    a = list(1.0 + 0.01 * rng.standard_normal(12_000))
    b = list(1.1 + 0.01 * rng.standard_normal(12_000))
    estimate = bootstrap_ratio(a, b, resamples=200)
    assert "subsampled to 10000" in estimate.units
    assert estimate.ratio == pytest.approx(1.1, rel=0.01)


# --- process_ratio: the one rule for ratios between processes ----------------------------------


def test_one_run_per_side_is_never_a_claim() -> None:
    # the A/A case: two single runs 27 % apart, each pinned to +-1 % by its own samples
    judged = process_ratio([1.0], [0.73])
    assert not judged.claimable and judged.estimate is None
    assert judged.ratio == 0.73
    assert judged.basis is RatioBasis.RUNS
    assert (judged.baseline_count, judged.candidate_count) == (1, 1)
    assert judged.counts_text == "1 vs 1 runs"
    assert judged.why.startswith("one run per side: the drift between processes is not measured")
    assert judged.rule == BETWEEN_PROCESSES_RULE
    assert "never assumed zero" in judged.rule and "cannot tell" in judged.rule


def test_one_run_on_either_side_is_not_a_claim() -> None:
    judged = process_ratio([1.0], [2.0, 2.1, 1.9])
    assert not judged.claimable
    assert judged.why.startswith("1 vs 3 runs:")
    assert judged.ratio == pytest.approx((2.0 * 2.1 * 1.9) ** (1 / 3))
    assert not process_ratio([1.0, 1.1, 0.9], [2.0]).claimable


def test_several_runs_per_side_are_welch_on_the_runs() -> None:
    baseline, candidate = [1.0, 1.12, 0.93], [0.81, 0.95, 0.88]
    judged = process_ratio(baseline, candidate)
    assert judged.claimable and judged.why == ""
    assert judged.estimate == welch_ratio(baseline, candidate)
    assert judged.ratio == judged.estimate.ratio
    assert judged.counts_text == "3 vs 3 runs"


def test_interleaved_rounds_are_paired() -> None:
    baseline, candidate = [1.0, 1.2, 0.9, 1.1], [2.0, 2.5, 1.8, 2.1]
    judged = process_ratio(baseline, candidate, paired=True)
    assert judged.basis is RatioBasis.ROUNDS and judged.claimable
    assert judged.estimate == paired_ratio(baseline, candidate)
    assert judged.counts_text == "4 interleaved rounds"
    one = process_ratio([1.0], [2.0], paired=True)
    assert not one.claimable and one.ratio == 2.0
    assert one.counts_text == "1 interleaved round"
    assert one.why == "one interleaved round: the spread between rounds is not measured"


def test_more_drift_between_runs_widens_the_interval() -> None:
    # the same pattern of run-to-run deviations, scaled: the log interval scales with it
    z_a, z_b = np.array([0.3, -1.1, 0.8]), np.array([-0.4, 1.2, 0.1])
    widths = []
    for drift in (0.01, 0.05, 0.15):
        a = [float(x) for x in np.exp(drift * z_a)]
        b = [float(x) for x in np.exp(drift * z_b)]
        estimate = process_ratio(a, b).estimate
        assert estimate is not None
        widths.append(math.log(estimate.high / estimate.low))
    assert widths[1] == pytest.approx(5 * widths[0]) and widths[2] == pytest.approx(15 * widths[0])


@pytest.mark.parametrize(
    ("baseline", "candidate", "paired", "message"),
    [
        ([], [1.0], False, "at least one value"),
        ([1.0, 0.0], [1.0, 1.0], False, "positive"),
        ([1.0, 2.0], [1.0], True, "same number"),
    ],
)
def test_process_ratio_bad_input(
    baseline: list[float], candidate: list[float], paired: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        process_ratio(baseline, candidate, paired=paired)


def test_process_ratio_to_dict_carries_the_rule() -> None:
    data = process_ratio([1.0], [0.73]).to_dict()
    json.dumps(data)
    assert data["claimable"] is False and data["estimate"] is None
    assert data["basis"] == "runs" and data["rule"] == BETWEEN_PROCESSES_RULE
    data = process_ratio([1.0, 1.1], [2.0, 2.1]).to_dict()
    assert data["claimable"] is True and data["estimate"]["method"].startswith("Welch")
