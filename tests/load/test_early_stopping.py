"""LoadGen's early-stopping rule: exact binomial sums and the published query counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelscope.load.early_stopping import (
    binomial_cdf,
    min_passing_queries,
    percentile_estimate,
    server_early_stopping,
)
from accelscope.serialise import dump


@given(st.integers(0, 400), st.integers(1, 3000), st.floats(0.001, 0.5))
@settings(max_examples=150, deadline=None)
def test_binomial_cdf_matches_scipy(k: int, n: int, q: float) -> None:
    from scipy.stats import binom

    assert binomial_cdf(k, n, q) == pytest.approx(float(binom.cdf(k, n, q)), rel=1e-6, abs=1e-15)


def test_zero_overlatency_needs_459_queries_at_p99() -> None:
    # 0.99^459 < 0.01 <= 0.99^458
    assert min_passing_queries(0) == math.ceil(math.log(0.01) / math.log(0.99)) == 459
    verdict = server_early_stopping(459, 0)
    assert verdict.passes and verdict.min_queries_no_overlatency == 459
    assert not server_early_stopping(458, 0).passes


def test_loadgen_single_stream_minimum_is_64_queries_at_p90() -> None:
    # "Processed at least 64 queries" in LoadGen's single-stream summaries (p90, 99 %)
    assert min_passing_queries(1, 0.90) + 1 == 64


def test_each_overlatency_query_raises_the_count_needed() -> None:
    needed = [server_early_stopping(0, t).required_queries for t in range(6)]
    assert needed == sorted(needed) and len(set(needed)) == 6
    verdict = server_early_stopping(1000, 3)
    assert verdict.passes == (verdict.required_queries <= 1000)
    assert dump(verdict)["passes"] == verdict.passes


def test_percentile_estimate_is_conservative() -> None:
    latencies = [i / 2048 for i in range(2048)]
    estimate = percentile_estimate(latencies, 0.90)
    assert estimate is not None
    # LoadGen's sample run with 2048 queries discards the 172 highest latencies
    assert estimate == latencies[2048 - 173]
    assert estimate > latencies[int(0.9 * 2048)]
    assert percentile_estimate(latencies[:60], 0.90) is None
