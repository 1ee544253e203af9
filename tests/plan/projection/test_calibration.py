"""plan/projection/calibration.py: each published row is set against the right datasheet."""

from __future__ import annotations

from accelscope.plan.accelerators import load_accelerators
from accelscope.plan.projection.calibration import project, shipped_calibration, spec_for
from accelscope.plan.projection.published import load_published
from accelscope.plan.projection.workloads import benchmark


def _row(**where: str):  # type: ignore[no-untyped-def]
    return next(
        r for r in load_published().results if all(getattr(r, k) == v for k, v in where.items())
    )


def test_form_factors_and_cpu_models_pick_their_own_datasheet() -> None:
    parts = load_accelerators()
    assert spec_for(_row(family="nvidia-h100", variant="SXM"), parts).name == "NVIDIA H100 SXM 80GB"  # type: ignore[union-attr]
    assert spec_for(_row(family="nvidia-h100", variant="NVL"), parts).name == "NVIDIA H100 NVL 94GB"  # type: ignore[union-attr]
    gnr = _row(accelerator="INTEL(R) XEON(R) 6980P")
    assert spec_for(gnr, parts).name == "Intel Xeon 6980P"  # type: ignore[union-attr]
    emr = _row(accelerator="INTEL(R) XEON(R) PLATINUM 8592+")
    assert spec_for(emr, parts).name == "Intel Xeon Platinum 8592+"  # type: ignore[union-attr]


def test_rows_without_a_datasheet_are_left_out_and_say_why() -> None:
    calibration = shipped_calibration()
    assert len(calibration.rows) + len(calibration.left_out) == len(load_published().results)
    for result, why in calibration.left_out:
        assert result.accelerator in why


def test_a_projection_of_a_published_row_lands_near_it() -> None:
    calibration = shipped_calibration()
    row = _row(system="DGX-H100_H100-SXM-80GBx1_TRT", benchmark="resnet50", scenario="Offline")
    spec = spec_for(row, load_accelerators())
    assert spec is not None
    prediction = project(calibration.model, benchmark(row.benchmark), row.scenario, spec)
    low, high = prediction.interval(0.8)
    assert low <= row.per_device <= high
    assert 0.8 < prediction.point / row.per_device < 1.25
