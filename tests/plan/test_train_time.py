"""plan/train_time.py: FLOPs per token, the MFU read off MLPerf Training's published rows, the
projection's invariants, and its accuracy as data (leave-one-out and the v5.1 forward check)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import load_accelerators
from accelscope.plan.llm_memory import ModelShape
from accelscope.plan.projection.llm_serving import llama2_70b_shape
from accelscope.plan.projection.validation import summarise
from accelscope.plan.train_time import (
    MLPERF_MODELS,
    MeasuredStep,
    TrainingResult,
    TrainTime,
    flops_per_token,
    forward_check,
    leave_one_out,
    load_published_training,
    lora_params,
    matmul_params,
    project_train_time,
    shipped_training_calibration,
    tighten_training_leave_one_out,
    tightened_training,
    training_rows,
)

REPO = Path(__file__).resolve().parents[2]
HELD_OUT = REPO / "benchmarks" / "results" / "published_training_v5_1_heldout.toml"
H100 = "NVIDIA H100 SXM 80GB"


def _llama31_8b() -> ModelShape:
    return MLPERF_MODELS["llama31_8b"].shape


def test_flops_per_token_follow_the_palm_accounting() -> None:
    """Llama-3.1-8B by hand: 32 layers x (QKVO 4096 x (4096 + 2 x 1024 + 4096) + MLP 3 x 4096
    x 14336) + the output projection 128256 x 4096 = 7.50e9 weights a token multiplies."""
    shape = _llama31_8b()
    n = 32 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336) + 128256 * 4096
    assert matmul_params(shape) == n
    assert flops_per_token(shape, 8192) == 6 * n + 12 * 32 * 32 * 128 * 8192
    # the attention term grows with the sequence, the weights' term does not
    assert flops_per_token(shape, 2) - flops_per_token(shape, 1) == 12 * 32 * 32 * 128
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(shape, 0)
    with pytest.raises(ValueError, match="recipe"):
        flops_per_token(shape, 8, "qlora")  # type: ignore[arg-type]


def test_lora_skips_the_frozen_weights_gradients() -> None:
    """MLPerf's llama2_70b_lora: rank 16 on fused QKV (8192 -> 10240) and the output
    projection (8192 -> 8192) of 80 layers; 4N + attention + 6 N_lora."""
    shape = llama2_70b_shape()
    adapters = 80 * 16 * ((8192 + 10240) + (8192 + 8192))
    assert lora_params(shape) == adapters
    full, lora = flops_per_token(shape, 8192), flops_per_token(shape, 8192, "lora")
    assert full - lora == pytest.approx(2 * matmul_params(shape) - 6 * adapters)
    with pytest.raises(ValueError, match="rank"):
        lora_params(shape, 0)


def test_each_row_s_mfu_is_its_work_over_its_devices_peaks_and_minutes() -> None:
    """v4.1 NVIDIA eos_n32 gpt3 (256 H100, FP8): recomputed by hand from the table's runs."""
    calibration = shipped_training_calibration()
    row = next(
        r
        for r in calibration.rows
        if r.result.system == "eos_n32_ngc24.09_nemo" and r.result.benchmark == "gpt3"
    )
    tokens = row.result.train_samples_logged_at_end
    assert tokens is not None and row.dtype == "fp8"
    work = sum(tokens) * MLPERF_MODELS["gpt3"].flops_per_token
    expected = work / (256 * 1978.9e12 * sum(row.result.runs_minutes) * 60)
    assert row.mfu == pytest.approx(expected, rel=1e-12)
    assert 0.3 < row.mfu < 0.6


def test_the_calibration_keeps_decoder_rows_and_says_why_it_drops_the_rest() -> None:
    calibration = shipped_training_calibration()
    assert len(calibration.rows) >= 40
    assert {r.result.benchmark for r in calibration.rows} == {
        "gpt3",
        "llama2_70b_lora",
        "llama31_405b",
    }
    assert all(0 < r.mfu < 1 for r in calibration.rows)
    reasons = {why for _, why in calibration.left_out}
    assert "no datasheet for nvidia-gb200 here" in reasons
    assert "bert is not a decoder benchmark" in reasons
    # TPU v5p ran int8 (MaxText's MLPerf config): its 8-bit peak, not its bf16 one
    assert {r.dtype for r in calibration.rows if r.result.family == "google-tpu-v5p"} == {"int8"}


def test_the_leave_one_out_over_mlperf_systems_holds_its_coverage() -> None:
    """Measured 2026-11-28: 49 rows, median |error| 13.2 %, 80 % coverage 78 % (gpt3 94 %,
    llama2_70b_lora 62 %, llama31_405b 100 %), median high/low 1.64. The floor: coverage at
    least 70 %, median |error| at most 18 %, median width below 2."""
    calibration = shipped_training_calibration()
    holdouts = leave_one_out(calibration)
    (total,) = summarise(holdouts)
    assert total.count == len(calibration.rows)
    assert total.coverage >= 0.70, total
    assert total.median_abs_error <= 0.18, total
    assert total.median_width < 2.0, total


def test_the_v5_1_forward_check_holds_its_floor() -> None:
    """v5.1 rows (held out of the package) projected from v4.0-v5.0 alone. Measured
    2026-11-28: 22 rows with a datasheet, median |error| 15.6 %, coverage 68 % (Llama-3.1-8B
    pre-training, a new benchmark: 2 of 5 covered, its MFU below the large models'). The
    floor: coverage at least 60 %, median |error| at most 22 %."""
    holdouts, left_out = forward_check(
        shipped_training_calibration(), load_published_training(HELD_OUT), load_accelerators()
    )
    assert len(holdouts) >= 20 and left_out
    (total,) = summarise(holdouts)
    assert total.coverage >= 0.60, total
    assert total.median_abs_error <= 0.22, total


def test_a_projection_is_flops_over_devices_peak_and_mfu() -> None:
    spec = load_accelerators().get(H100)
    flops = flops_per_token(_llama31_8b(), 4096)
    time = project_train_time(spec, dtype="bf16", tokens=1e9, flops_per_token=flops, devices=8)
    assert time.time_s == pytest.approx(1e9 * flops / (8 * 989.4e12 * time.mfu))
    assert time.time_low_s < time.time_s < time.time_high_s
    assert time.rows >= 10 and "nvidia-h100" in time.basis
    twice = project_train_time(spec, dtype="bf16", tokens=1e9, flops_per_token=flops, devices=16)
    assert twice.time_s == pytest.approx(time.time_s / 2)
    with pytest.raises(ValueError, match="no fp4 peak"):
        project_train_time(spec, dtype="fp4", tokens=1e9, flops_per_token=flops, devices=8)
    with pytest.raises(ValueError, match="tokens"):
        project_train_time(spec, dtype="bf16", tokens=0, flops_per_token=flops, devices=8)


def test_a_family_without_a_published_row_takes_the_pooled_mfu_with_a_wider_interval() -> None:
    accelerators = load_accelerators()
    flops = flops_per_token(_llama31_8b(), 4096)
    seen = project_train_time(
        accelerators.get(H100), dtype="bf16", tokens=1e9, flops_per_token=flops, devices=8
    )
    unseen = project_train_time(
        accelerators.get("NVIDIA L4"), dtype="bf16", tokens=1e9, flops_per_token=flops, devices=8
    )
    assert unseen.rows == 0 and unseen.basis.startswith("pooled")
    assert unseen.mfu_high / unseen.mfu_low > seen.mfu_high / seen.mfu_low


def test_a_train_time_checks_itself_where_it_is_built() -> None:
    good = {
        "accelerator": H100,
        "family": "nvidia-h100",
        "devices": 8,
        "tokens": 1e9,
        "flops_per_token": 5e10,
        "dtype": "bf16",
        "peak_flops_per_s": 1e15,
        "mfu": 0.4,
        "mfu_low": 0.3,
        "mfu_high": 0.5,
        "time_s": 1e9 * 5e10 / (8 * 1e15 * 0.4),
        "time_low_s": 1e9 * 5e10 / (8 * 1e15 * 0.5),
        "time_high_s": 1e9 * 5e10 / (8 * 1e15 * 0.3),
        "coverage": 0.8,
        "basis": "test",
        "rows": 1,
    }
    TrainTime(**good)  # type: ignore[arg-type]
    for change, match in (
        ({"mfu_low": 0.45}, "MFU's point"),
        ({"time_s": good["time_s"] * 1.5}, "time"),  # type: ignore[operator]
        ({"devices": 0}, "devices"),
        ({"mfu": 1.2, "mfu_high": 1.3}, "peak"),
        ({"tokens": math.nan}, "tokens"),
    ):
        with pytest.raises(ValueError, match=match):
            TrainTime(**{**good, **change})  # type: ignore[arg-type]


def _row(**change: object) -> TrainingResult:
    fields: dict[str, object] = {
        "round": "v9.9",
        "submitter": "Test",
        "system": "box",
        "family": "nvidia-h100",
        "accelerator": "NVIDIA H100-SXM5-80GB",
        "accelerator_count": 8,
        "benchmark": "llama2_70b_lora",
        "runs_minutes": (30.0, 60.0),
        "samples_at_stop": (3072, 3072),
        "repo": "mlcommons/training_results_v9.9",
        "commit": "0" * 40,
    }
    return TrainingResult.model_validate({**fields, **change})


def test_a_run_that_missed_its_target_does_not_count() -> None:
    accelerators = load_accelerators()
    (both,), _ = training_rows([_row()], accelerators)
    (first,), _ = training_rows([_row(runs_converged=(True, False))], accelerators)
    assert first.minutes == 30.0 and both.minutes == 45.0
    assert first.mfu == pytest.approx(both.mfu * 1.5)  # the same work in 30 of 45 mean minutes
    rows, left_out = training_rows([_row(samples_at_stop=(3072,))], accelerators)
    assert not rows and "do not pair up" in left_out[0][1]
    rows, left_out = training_rows([_row(family="nvidia-gb200")], accelerators)
    assert not rows and "no datasheet" in left_out[0][1]


def test_a_broken_published_table_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "table.toml"
    path.write_text("[[result]]\nround = 1\n", encoding="utf-8")
    with pytest.raises(BadInputError, match="row 1"):
        load_published_training(path)
    path.write_text("not toml = [", encoding="utf-8")
    with pytest.raises(BadInputError, match="not valid TOML"):
        load_published_training(path)
    with pytest.raises(BadInputError, match="cannot read"):
        load_published_training(tmp_path / "absent.toml")


def test_a_measured_step_narrows_its_family_and_reproduces_itself() -> None:
    """A user's step on an L4 (no MLPerf Training row: the pooled MFU, wide) at MFU 0.30: the
    L4's interval narrows and moves to the measured MFU; an H100's (13 rows) barely moves."""
    accelerators = load_accelerators()
    l4, h100 = accelerators.get("NVIDIA L4"), accelerators.get(H100)
    flops = flops_per_token(_llama31_8b(), 4096)
    peak = l4.peak("bf16")
    assert peak is not None
    tokens = 4 * 4096.0
    step_s = tokens * flops / (4 * peak * 0.30)
    step = MeasuredStep(
        spec=l4, dtype="bf16", devices=4, tokens_per_step=tokens, flops_per_token=flops,
        step_s=step_s, label="your step on 4 x NVIDIA L4",
    )  # fmt: skip
    assert step.mfu == pytest.approx(0.30)
    shipped = shipped_training_calibration()
    narrowed = tightened_training(shipped, [step])
    assert narrowed.measured_of("nvidia-l4") == (step,) and not narrowed.measured_of("nvidia-h100")
    kwargs = {"dtype": "bf16", "tokens": 1e9, "flops_per_token": flops, "devices": 8}
    before = project_train_time(l4, calibration=shipped, **kwargs)  # type: ignore[arg-type]
    after = project_train_time(l4, calibration=narrowed, **kwargs)  # type: ignore[arg-type]
    assert after.mfu_high / after.mfu_low < 0.8 * (before.mfu_high / before.mfu_low)
    assert abs(math.log(after.mfu / 0.30)) < abs(math.log(before.mfu / 0.30))
    assert after.basis.endswith("+ your step on 4 x NVIDIA L4")
    h_before = project_train_time(h100, calibration=shipped, **kwargs)  # type: ignore[arg-type]
    h_after = project_train_time(h100, calibration=narrowed, **kwargs)  # type: ignore[arg-type]
    assert h_after.mfu == pytest.approx(h_before.mfu, rel=0.1)
    assert tightened_training(shipped, []) is shipped


def test_a_measured_step_that_beats_the_datasheet_is_refused() -> None:
    l4 = load_accelerators().get("NVIDIA L4")
    base = {"spec": l4, "dtype": "bf16", "devices": 1, "tokens_per_step": 4096.0}
    with pytest.raises(ValueError, match="cannot beat the datasheet"):
        MeasuredStep(**base, flops_per_token=5e10, step_s=1e-3, label="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no fp4 peak"):
        MeasuredStep(  # type: ignore[arg-type]
            **base | {"dtype": "fp4"}, flops_per_token=5e10, step_s=10.0, label="x"
        )
    with pytest.raises(ValueError, match="step_s"):
        MeasuredStep(**base, flops_per_token=5e10, step_s=0.0, label="x")  # type: ignore[arg-type]


def test_measure_then_tighten_by_leave_one_out_over_mlperf_training() -> None:
    """Another system's published row of the family plays the user's measured step. Measured
    2026-11-28 (46 rows each): a family MLPerf has rows of, median |error| 14.9 -> 13.6 %,
    coverage 67 -> 76 %, high/low 1.64 -> 1.62; a family it has none of (its rows left out of
    the fit), 22.3 -> 12.7 %, coverage 83 -> 83 %, high/low 2.58 -> 1.65. The floor: for an
    unpublished family the error and the width both fall, and coverage stays at least 70 %."""
    held = tighten_training_leave_one_out(shipped_training_calibration(), unpublished=True)
    assert len(held) >= 30
    (before,) = summarise([t.before for t in held])
    (after,) = summarise([t.after for t in held])
    assert after.median_abs_error < before.median_abs_error
    assert after.median_width < 0.8 * before.median_width
    assert after.coverage >= 0.70, after
    published = tighten_training_leave_one_out(shipped_training_calibration(), unpublished=False)
    (after,) = summarise([t.after for t in published])
    assert after.coverage >= 0.65 and after.median_abs_error <= 0.18, after
