"""plan/projection/validation.py: the leave-one-out over the shipped table, held on every run.

Each published row is projected from the others (without the rest of its own system's rows on
that benchmark). The issue's bounds: at least 40 rows on at least 8 accelerator families, the
median |error| at most 25 % in each workload class, the 80 % intervals covering at least 70 %
of the left-out rows (and not over-wide: at most 92 %), the median interval narrower than 2x."""

from __future__ import annotations

import pytest

from accelscope.plan.projection.calibration import shipped_calibration
from accelscope.plan.projection.validation import Holdout, leave_one_out, summarise


@pytest.fixture(scope="module")
def holdouts() -> list[Holdout]:
    return leave_one_out(shipped_calibration(), mode="system")


def test_enough_rows_and_families_are_checked(holdouts: list[Holdout]) -> None:
    assert len(holdouts) >= 40
    assert len({h.family for h in holdouts}) >= 8


def test_the_median_error_of_every_workload_class_is_within_25_percent(
    holdouts: list[Holdout],
) -> None:
    for summary in summarise(holdouts, lambda h: h.workload_class):
        assert summary.median_abs_error <= 0.25, summary


def test_the_80_percent_intervals_hold_and_are_narrow(holdouts: list[Holdout]) -> None:
    (overall,) = summarise(holdouts)
    assert 0.70 <= overall.coverage <= 0.92, overall
    assert overall.median_width < 2.0, overall


def test_a_row_alone_in_its_benchmark_is_not_projected_from_nothing() -> None:
    calibration = shipped_calibration()
    keys = {h.key for h in leave_one_out(calibration, mode="system")}
    for row in calibration.rows:
        peers = [
            r
            for r in calibration.rows
            if r.observation.group == row.observation.group and r.result.system != row.result.system
        ]
        if not peers:
            assert row.result.key not in keys
