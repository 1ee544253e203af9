"""plan/projection/efficiency.py: the mixed model recovers what it was simulated from, its
80 % intervals hold about 80 % of new draws, and an unseen family gets a wider interval."""

from __future__ import annotations

import math
import random

import pytest

from accelscope.plan.projection.efficiency import Observation, Prediction, fit

GROUPS = {"conv/Offline": -1.0, "conv/Server": -1.2, "llm/Offline": -2.5}
FAMILIES = {f"fam{i}": 0.25 * (i - 3) for i in range(7)}
SIGMA = 0.1


def _draw(rng: random.Random, group: str, family: str) -> Observation:
    value = GROUPS[group] + FAMILIES[family] + rng.gauss(0.0, SIGMA)
    return Observation(group, family, group.split("/")[0], value)


def _table(seed: int, per_cell: int = 3) -> list[Observation]:
    rng = random.Random(seed)
    return [
        _draw(rng, group, family)
        for group in GROUPS
        for family in FAMILIES
        for _ in range(per_cell)
    ]


def test_it_recovers_the_group_means_and_family_effects() -> None:
    model = fit(_table(seed=1))
    for family, effect in FAMILIES.items():
        for group, mean in GROUPS.items():
            prediction = model.predict(group, family, group.split("/")[0])
            assert prediction.log_mean == pytest.approx(mean + effect, abs=0.1)
    assert 0.05 < model.sigma_pooled < 0.2


def test_its_80_percent_intervals_hold_about_80_percent_of_new_draws() -> None:
    model = fit(_table(seed=2))
    rng = random.Random(3)
    held = total = 0
    for _ in range(40):
        for group in GROUPS:
            for family in FAMILIES:
                new = _draw(rng, group, family)
                low, high = model.predict(group, family, new.workload_class).interval(0.8)
                held += low <= math.exp(new.log_value) <= high
                total += 1
    assert 0.72 <= held / total <= 0.9, held / total


def test_a_family_with_no_rows_gets_a_wider_interval_and_says_so() -> None:
    model = fit(_table(seed=4))
    known = model.predict("conv/Offline", "fam3", "conv")
    unseen = model.predict("conv/Offline", "famX", "conv")
    other_class = model.predict("conv/Offline", "fam3", "encoder")
    assert unseen.log_sd > known.log_sd
    assert other_class.log_sd > known.log_sd
    assert "no published calibration" in unseen.basis
    assert "other workloads only" in other_class.basis
    assert "published on conv" in known.basis


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        fit(_table(seed=5)[:2])
    with pytest.raises(KeyError):
        fit(_table(seed=5)).predict("nothing/Offline", "fam1", "conv")
    with pytest.raises(ValueError, match="coverage"):
        Prediction(0.0, 0.1, 10.0, "x", 1).interval(1.5)
