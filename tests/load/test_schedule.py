"""Seeded schedules: Poisson and gamma gaps, LoadGen's minimum count and duration."""

from __future__ import annotations

import math
import statistics

import pytest

from accelscope.errors import BadInputError
from accelscope.load.batcher import BatchPolicy
from accelscope.load.schedule import arrival_offsets_s, sample_indices
from accelscope.serialise import dump, load


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_gaps_have_the_rate_and_cv(cv: float) -> None:
    offsets = arrival_offsets_s(200.0, min_queries=40_000, min_duration_s=0.0, seed=3, cv=cv)
    gaps = [b - a for a, b in zip((0.0, *offsets), offsets, strict=False)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 200.0, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.05)


def test_same_seed_same_schedule_and_minimums() -> None:
    a = arrival_offsets_s(50.0, min_queries=100, min_duration_s=5.0, seed=1)
    assert a == arrival_offsets_s(50.0, min_queries=100, min_duration_s=5.0, seed=1)
    assert a != arrival_offsets_s(50.0, min_queries=100, min_duration_s=5.0, seed=2)
    assert a[-1] >= 5.0 and a[-2] < 5.0 and len(a) > 100
    b = arrival_offsets_s(50.0, min_queries=1000, min_duration_s=1.0, seed=1)
    assert len(b) == 1000
    assert list(a) == sorted(a)
    assert sample_indices(10, 4, 0) == sample_indices(10, 4, 0)
    assert set(sample_indices(1000, 4, 0)) == {0, 1, 2, 3}


@pytest.mark.parametrize(("rate", "cv"), [(0.0, 1.0), (-5.0, 1.0), (math.inf, 1.0), (1.0, 0.0)])
def test_bad_rates_are_bad_input(rate: float, cv: float) -> None:
    with pytest.raises(BadInputError):
        arrival_offsets_s(rate, min_queries=1, min_duration_s=0.0, seed=0, cv=cv)


def test_batch_policy_rule() -> None:
    policy = BatchPolicy(4, 0.01)
    assert policy.launch_at_s(0, 1.0) == math.inf
    assert policy.launch_at_s(2, 1.0) == pytest.approx(1.01)
    assert policy.launch_at_s(4, 1.0) == -math.inf
    assert load(BatchPolicy, dump(policy)) == policy
    with pytest.raises(BadInputError):
        BatchPolicy(0, 0.0)
    with pytest.raises(BadInputError):
        BatchPolicy(2, -1.0)
