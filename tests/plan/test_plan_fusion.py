"""The fused floor and the calibration by the best configuration measured here, hand-computed."""

from __future__ import annotations

import dataclasses

import pytest

from accelscope.commands.plan.workflow import bench_figures
from accelscope.documents import Operator, RooflineProfile
from accelscope.hardware.fingerprint import Environment
from accelscope.plan.capacity import Calibration, best_calibration, floor_time_s, project_capacity
from accelscope.plan.catalog import load_catalog
from accelscope.plan.fleet import PlanSettings
from accelscope.plan.fusion import ANCHOR, FUSED, KEPT, at_precision, fuse, fusion_role
from accelscope.plan.service import BenchFigure, Evidence, build_plan
from accelscope.plan.traffic import constant_traffic
from accelscope.spec import Precision
from accelscope.testing import fake_result
from plan_helpers import roofline_payload

COMPILE_INT8 = Calibration(
    label="compile/int8/b16/t2",
    backend="compile",
    precision="int8",
    batch_size=16,
    batch_time_s=0.2,
)


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("aten::conv2d", ANCHOR),
        ("aten::convolution", ANCHOR),
        ("aten::linear", ANCHOR),
        ("aten::addmm", ANCHOR),
        ("aten::bmm", ANCHOR),
        ("aten::scaled_dot_product_attention", ANCHOR),
        ("aten::relu_", FUSED),
        ("aten::add_.Tensor", FUSED),
        ("aten::batch_norm", FUSED),
        ("aten::layer_norm", FUSED),
        ("aten::_softmax", FUSED),
        ("aten::_to_copy", FUSED),
        ("aten::view", FUSED),
        ("aten::max_pool2d", KEPT),
        ("aten::adaptive_avg_pool2d", KEPT),
        ("aten::cat", KEPT),
        ("mylib::mystery_op", KEPT),
    ],
)
def test_operators_are_classified_by_name(name: str, role: str) -> None:
    assert fusion_role(name) == role


def test_fused_floor_of_a_hand_made_operator_list() -> None:
    ops = (
        Operator(name="aten::conv2d", dtype="fp32", flops=1e9, bytes=4e6),
        Operator(name="aten::relu_", dtype="fp32", flops=1e6, bytes=8e6),
        Operator(name="aten::max_pool2d", dtype="fp32", flops=1e6, bytes=2e6),
    )
    mapped = fuse(at_precision(ops, "int8", scale=2.0))
    # conv → int8 (its peak), 2x the work, 1/4 the bytes; relu fused (bytes 0, fp32 FLOPs kept);
    # pooling unfused, its activations int8 too
    assert [(o.dtype, o.flops, o.bytes) for o in mapped] == [
        ("int8", 2e9, 2e6),
        ("fp32", 2e6, 0.0),
        ("fp32", 2e6, 1e6),
    ]
    floor, notes = floor_time_s(mapped, {"fp32": 1e12, "int8": 4e12}, 1e9)
    assert floor == pytest.approx(max(2e9 / 4e12, 2e6 / 1e9) + 2e6 / 1e12 + max(2e6 / 1e12, 1e-3))
    assert floor == pytest.approx(3.002e-3) and notes == ()
    unfused, _ = floor_time_s(ops, {"fp32": 1e12}, 1e9)
    assert unfused == pytest.approx(4e-3 + 8e-3 + 2e-3)  # every op memory-bound


def _int8_profile() -> RooflineProfile:
    payload = roofline_payload()
    payload["ceilings"]["theoretical"]["flops_per_s"]["int8"] = 6.56e12
    return RooflineProfile.from_payload(payload)


def test_a_bench_result_calibrates_at_its_precision_and_batch_with_the_fused_floor() -> None:
    # helper profile: conv 6.5e10 FLOPs / 3e8 B and add 1e8 / 1e8, bf16, batch 8
    g6 = load_catalog().get("g6.xlarge")
    estimate = project_capacity(_int8_profile(), g6, sla_p99_s=1.0, calibration=COMPILE_INT8)
    # batch 16 in int8: conv 1.3e11 ops, 3e8 B (2x items, half the bytes); add fused
    floor_here = max(1.3e11 / 6.56e12, 3e8 / 6.4e9) + 2e8 / 3.28e12
    efficiency = floor_here / 0.2
    floor_there = max(1.3e11 / 242.5e12, 3e8 / 300e9) + 2e8 / 121e12
    assert estimate.detail["floor"] == "fused" and estimate.detail["precision"] == "int8"
    assert estimate.detail["floor_here_s"] == pytest.approx(floor_here)
    assert estimate.detail["efficiency"] == pytest.approx(efficiency)
    assert estimate.detail["floor_target_s"] == pytest.approx(floor_there)
    assert estimate.qps_per_instance == pytest.approx(16 * efficiency / floor_there)
    assert estimate.label == "estimate" and estimate.is_estimate
    text = " | ".join(estimate.assumptions)
    assert "bench 'compile/int8/b16/t2'" in text and "fused floor" in text
    assert "scaled linearly to batch 16" in text
    assert "across device types" in text  # CPU here, GPU there


def test_an_eager_bench_result_calibrates_against_the_unfused_floor() -> None:
    eager = dataclasses.replace(
        COMPILE_INT8, label="eager/bf16/b8/t2", backend="eager", precision="bf16", batch_size=8
    )
    profile = _int8_profile()
    estimate = project_capacity(profile, load_catalog().get("g6.xlarge"), 1.0, calibration=eager)
    floor_here = max(6.5e10 / 3.28e12, 3e8 / 6.4e9) + max(1e8 / 3.28e12, 1e8 / 6.4e9)
    assert estimate.detail["floor"] == "unfused"
    assert estimate.detail["floor_here_s"] == pytest.approx(floor_here)
    assert estimate.detail["efficiency"] == pytest.approx(floor_here / 0.2)


def test_a_target_without_the_calibrated_precision_says_which_fallback() -> None:
    bf16 = dataclasses.replace(COMPILE_INT8, precision="bf16")
    t4 = load_catalog().get("g4dn.xlarge")  # Turing: no bf16 peak
    estimate = project_capacity(_int8_profile(), t4, 1.0, calibration=bf16)
    assert any("no bf16 peak" in a and "fp32 rate" in a for a in estimate.assumptions)


def test_the_fastest_configuration_on_the_profiles_device_calibrates() -> None:
    slow_big = Calibration(
        label="a", backend="compile", precision="int8", batch_size=32, batch_time_s=1.0
    )  # 32 items/s
    fast_small = Calibration(
        label="b", backend="compile", precision="bf16", batch_size=8, batch_time_s=0.1
    )  # 80 items/s
    gpu = Calibration(
        label="c",
        backend="compile",
        precision="int8",
        batch_size=8,
        batch_time_s=0.001,
        device="cuda",
    )
    assert best_calibration([slow_big, fast_small, gpu], "cpu") is fast_small
    assert best_calibration([gpu], "cpu") is None


def _plan_projection(evidence: Evidence) -> dict[str, object]:
    plan = build_plan(
        "resnet50",
        load_catalog(),
        constant_traffic(10.0),
        PlanSettings(10.0),
        evidence,
        only=("g6.xlarge",),
    )
    option = next(o for o in plan.options if o.option.name == "g6.xlarge")
    assert option.option.capacity is not None
    capacity = option.option.capacity
    assert capacity.label.startswith("estimate") and capacity.assumptions
    detail = dict(capacity.detail)
    if detail.get("method") == "published":
        # the option is projected from published results; the projection that carries this
        # machine's efficiency over is kept beside it, and is what these tests check
        assert any("carried over instead" in a for a in capacity.assumptions)
        return dict(detail["carried"])
    assert any("across device types" in a for a in capacity.assumptions)
    return detail


def test_plan_calibrates_with_the_fastest_bench_result_else_the_eager_profile() -> None:
    profile = _int8_profile()
    fallback = _plan_projection(Evidence(profile=profile))
    assert fallback["floor"] == "unfused" and fallback["calibration"] == "roofline eager run"
    assert fallback["measured_here_s"] == pytest.approx(0.4)
    figures = (
        BenchFigure(
            label="eager/fp32/b8/t2",
            items_per_s=20.0,
            p99_s=0.5,
            device="cpu",
            backend="eager",
            precision="fp32",
            batch_size=8,
            batch_time_s=0.4,
        ),
        BenchFigure(
            label="compile/int8/b16/t2",
            items_per_s=80.0,
            p99_s=0.3,
            device="cpu",
            backend="compile",
            precision="int8",
            batch_size=16,
            batch_time_s=0.2,
        ),
        BenchFigure(label="old figure without its configuration", items_per_s=1e6, p99_s=0.1),
    )
    calibrated = _plan_projection(Evidence(profile=profile, bench=figures))
    assert calibrated["floor"] == "fused" and calibrated["calibration"] == "compile/int8/b16/t2"
    assert calibrated["measured_here_s"] == pytest.approx(0.2)


def test_bench_results_carry_their_configuration(environment: Environment) -> None:
    result = fake_result(environment, batch=4)
    (figure,) = bench_figures([result])
    calibration = figure.calibration()
    assert calibration is not None
    assert (calibration.backend, calibration.precision, calibration.batch_size) == (
        "eager",
        Precision.BF16.value,
        4,
    )
    assert result.measurement is not None
    assert calibration.batch_time_s == pytest.approx(result.measurement.summary.median_s)
    assert figure.items_per_s == pytest.approx(4 / calibration.batch_time_s)


@pytest.mark.parametrize("calibration", [None, COMPILE_INT8], ids=["eager-profile", "bench"])
def test_every_projection_is_labelled_with_its_assumptions(calibration: Calibration | None) -> None:
    profile = _int8_profile()
    # carrying this machine's efficiency over is for CPU and GPU targets (plan projects TPUs
    # and NPUs from published results only)
    for instance in (i for i in load_catalog().instances if i.kind in ("cpu", "gpu")):
        estimate = project_capacity(profile, instance, 1.0, calibration=calibration)
        assert estimate.label == "estimate" and estimate.basis == "projected"
        assert any("efficiency here" in a for a in estimate.assumptions)
        assert any("calibrated by" in a for a in estimate.assumptions)
        crosses = instance.kind == "gpu"
        assert crosses == any("across device types" in a for a in estimate.assumptions)
