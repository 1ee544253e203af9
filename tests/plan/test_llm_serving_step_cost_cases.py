"""A fixed cost per decode step fitted from a user's run at two loads or more (docs/plan.md, "A
fixed cost per step, from two loads or more"), case by case at the library level: the least
squares fit of ``TPOT(B) = c + floor(B) / eta`` (exact on two loads, close on noisy ones, the
same in any order, a repeated concurrency taken at its median), the loads that keep the one
efficiency (one load, a cost that is not positive, a TPOT that barely moves), ``c`` added to
every decode step of the measured family and to no other, the interval around its point and
wider the further the projected load is from the measured ones, and the values refused.

Llama-3.1-8B (``examples/plan/llama-3.1-8b-config.json``) in bf16, measured on an L4.

Covers: accelscope.plan.projection.llm_serving."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from accelscope.plan.accelerators import AcceleratorSpec, load_accelerators
from accelscope.plan.llm_memory import load_model_config, shape_from_config
from accelscope.plan.projection.llm_serving import (
    ServedModel,
    ServingCalibration,
    ServingProjection,
    ServingRun,
    ServingSlo,
    ServingWorkload,
    StepOverhead,
    TpotPoint,
    fit_step_overhead,
    project_serving,
    served_model,
    tightened_serving,
    tpot_floor,
    widened,
)
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "plan" / "llama-3.1-8b-config.json"
MODEL: ServedModel = served_model(
    shape_from_config(load_model_config(CONFIG)), "bf16", name="llama-3.1-8b"
)
ACCELERATORS = load_accelerators()
L4 = ACCELERATORS.get("NVIDIA L4")
H100_SXM = ACCELERATORS.get("NVIDIA H100 SXM 80GB")
H100_PCIE = ACCELERATORS.get("NVIDIA H100 PCIe 80GB")
RUN_WORKLOAD = ServingWorkload(input_tokens=512, output_tokens=128)  # the user's run
RUN_SLO = ServingSlo(ttft_s=2.0, tpot_s=0.2)
PLAN_WORKLOAD = ServingWorkload(input_tokens=1024, output_tokens=256)  # what is planned
PLAN_SLO = ServingSlo(ttft_s=2.0, tpot_s=0.2)
C_S, ETA = 0.0125, 0.5  # the run's true fixed cost per step and efficiency


def _floor(batch: int, spec: AcceleratorSpec = L4, tp: int = 1) -> float:
    return tpot_floor(MODEL, spec, RUN_WORKLOAD, batch, tp=tp)


def _points(
    loads: Sequence[int],
    spec: AcceleratorSpec = L4,
    tp: int = 1,
    c_s: float = C_S,
    eta: float = ETA,
    noise: Sequence[float] = (),
) -> tuple[TpotPoint, ...]:
    """The TPOT a stack with fixed cost ``c_s`` and efficiency ``eta`` measures at each load,
    each times ``1 + noise[i]``."""
    factors = list(noise) + [0.0] * (len(loads) - len(noise))
    return tuple(
        TpotPoint(b, (c_s + _floor(b, spec, tp) / eta) * (1 + n))
        for b, n in zip(loads, factors, strict=True)
    )


def _run(
    points: tuple[TpotPoint, ...],
    spec: AcceleratorSpec = L4,
    devices: int = 1,
    run_id: str = "r1",
    goodput: float | None = None,
) -> ServingRun:
    """A run on ``spec`` whose goodput is its largest load's (``goodput`` to fix it)."""
    if goodput is None:
        top = max(points, key=lambda p: p.concurrency) if points else TpotPoint(16, 0.14)
        goodput = top.concurrency / top.tpot_s / devices
    return ServingRun(
        run_id=run_id, spec=spec, model=MODEL, workload=RUN_WORKLOAD, slo=RUN_SLO,
        tokens_per_s_per_device=goodput, devices=devices, points=points,
    )  # fmt: skip


def _ols(floors: Sequence[float], tpots: Sequence[float]) -> tuple[float, float]:
    """``(c, eta)`` of the ordinary least-squares line ``tpot = c + floor / eta``, by hand."""
    n = len(floors)
    mx, my = sum(floors) / n, sum(tpots) / n
    sxx = sum((x - mx) ** 2 for x in floors)
    sxy = sum((x - mx) * (y - my) for x, y in zip(floors, tpots, strict=True))
    slope = sxy / sxx
    return my - slope * mx, 1 / slope


def _project(spec: AcceleratorSpec, calibration: ServingCalibration) -> ServingProjection:
    return project_serving(MODEL, spec, PLAN_WORKLOAD, PLAN_SLO, calibration)


def _assert_same(a: ServingProjection, b: ServingProjection) -> None:
    """The same projection, to the last bits of floating-point arithmetic."""
    assert (a.accelerator, a.family, a.basis, a.rows) == (b.accelerator, b.family, b.basis, b.rows)
    assert (a.point is None) is (b.point is None)
    if a.point is not None and b.point is not None:
        assert (a.point.tp, a.point.concurrency, a.point.limited_by) == (
            b.point.tp, b.point.concurrency, b.point.limited_by,
        )  # fmt: skip
        for key in ("decode_step_s", "prefill_s", "tpot_s", "ttft_s", "tokens_per_s_per_device"):
            assert getattr(a.point, key) == pytest.approx(getattr(b.point, key), rel=1e-9), key
    for key in ("eta", "eta_low", "eta_high"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-9), key
    for key in ("low_tokens_per_s_per_device", "high_tokens_per_s_per_device"):
        assert getattr(a, key) == pytest.approx(getattr(b, key), rel=1e-9), key


def _hi_lo(projection: ServingProjection) -> float:
    return projection.high_tokens_per_s_per_device / projection.low_tokens_per_s_per_device


# -- fit_step_overhead: least squares of TPOT on the floor ----------------------------------


def test_two_loads_without_noise_give_c_and_eta_exactly() -> None:
    floors = [_floor(1), _floor(32)]
    fitted = fit_step_overhead(floors, [C_S + f / ETA for f in floors])
    assert fitted is not None
    assert fitted == pytest.approx((C_S, ETA), rel=1e-9)


NOISY_FLOORS = [0.02, 0.04, 0.08, 0.16, 0.32]
NOISE = [0.03, -0.02, 0.01, -0.03, 0.02]  # a few % either way, as a run's TPOTs move
NOISY_TPOTS = [(0.058 + f / 0.5) * (1 + n) for f, n in zip(NOISY_FLOORS, NOISE, strict=True)]


def test_noisy_loads_are_fitted_by_least_squares_and_recover_c_and_eta() -> None:
    fitted = fit_step_overhead(NOISY_FLOORS, NOISY_TPOTS)
    assert fitted is not None
    c_s, eta = fitted
    assert (c_s, eta) == pytest.approx(_ols(NOISY_FLOORS, NOISY_TPOTS), rel=1e-9)
    assert c_s == pytest.approx(0.058, rel=0.2)
    assert eta == pytest.approx(0.5, rel=0.05)


def test_the_order_of_the_loads_does_not_change_the_fit() -> None:
    reference = fit_step_overhead(NOISY_FLOORS, NOISY_TPOTS)
    assert reference is not None
    pairs = list(zip(NOISY_FLOORS, NOISY_TPOTS, strict=True))
    for order in itertools.permutations(pairs):
        fitted = fit_step_overhead([f for f, _ in order], [t for _, t in order])
        assert fitted == pytest.approx(reference, rel=1e-12)


def test_repeated_floors_count_once_as_a_load() -> None:
    f1, f2 = _floor(1), _floor(32)
    t1, t2 = C_S + f1 / ETA, C_S + f2 / ETA
    assert fit_step_overhead([f1, f1, f1], [t1, t1 * 1.02, t1 * 0.98]) is None  # one load
    fitted = fit_step_overhead([f1, f2, f1], [t1, t2, t1])  # two distinct floors
    assert fitted == pytest.approx((C_S, ETA), rel=1e-9)


def test_a_cost_that_is_not_positive_or_a_tpot_that_barely_moves_is_no_fit() -> None:
    floors = [_floor(b) for b in (1, 8, 32)]
    assert fit_step_overhead(floors, [-0.01 + f / ETA for f in floors]) is None  # c < 0
    # a TPOT that barely moves with the load: an efficiency no published row may take
    assert fit_step_overhead(floors, [0.100 + 0.001 * f for f in floors]) is None
    assert fit_step_overhead([], []) is None
    assert fit_step_overhead([floors[0]], [C_S + floors[0] / ETA]) is None


# -- tightened_serving: the fit on the user's run ---------------------------------------------


def test_three_loads_add_their_cost_to_every_decode_step_of_the_family() -> None:
    calibration = tightened_serving([_run(_points((1, 8, 32)))])
    assert calibration.overhead_s("nvidia-l4") == pytest.approx(C_S, rel=1e-9)
    overhead = calibration.overheads["nvidia-l4"]
    label = "your run r1 on NVIDIA L4 (3 loads: a fixed 12.5 ms a step, fitted)"
    assert overhead.label == label
    projection = _project(L4, calibration)
    assert "narrowed by " + label in projection.basis
    point = projection.point
    assert point is not None
    # the projected TPOT is the floor at the projection's efficiency plus the fixed cost
    assert point.tpot_s == pytest.approx(
        tpot_floor(
            MODEL, L4, PLAN_WORKLOAD, point.concurrency, tp=point.tp, eta=projection.eta,
            overhead_s=C_S,
        ),
        rel=1e-9,
    )  # fmt: skip
    assert point.tpot_s <= PLAN_SLO.tpot_s
    shipped = _project(L4, tightened_serving([]))
    assert _hi_lo(projection) < _hi_lo(shipped)  # the measured family narrows


def test_the_cost_reaches_the_other_parts_of_the_measured_family() -> None:
    """Measured on an H100 PCIe: the H100 SXM's decode steps pay the same fixed cost."""
    calibration = tightened_serving([_run(_points((1, 8, 32), spec=H100_PCIE), spec=H100_PCIE)])
    assert calibration.overhead_s("nvidia-h100") == pytest.approx(C_S, rel=1e-9)
    sxm = _project(H100_SXM, calibration)
    assert sxm.point is not None
    assert sxm.point.tpot_s == pytest.approx(
        tpot_floor(
            MODEL, H100_SXM, PLAN_WORKLOAD, sxm.point.concurrency, tp=sxm.point.tp, eta=sxm.eta,
            overhead_s=C_S,
        ),
        rel=1e-9,
    )  # fmt: skip
    assert "narrowed by your run r1 on NVIDIA H100 PCIe 80GB (3 loads:" in sxm.basis


def test_the_fit_is_at_the_degree_the_runs_server_used() -> None:
    points = _points((1, 8, 32), tp=2)  # a TP-2 server: its floors are those at degree 2
    calibration = tightened_serving([_run(points, devices=2)])
    overhead = calibration.overheads["nvidia-l4"]
    assert overhead.seconds == pytest.approx(C_S, rel=1e-9)
    assert sorted(overhead.floors_s) == pytest.approx(sorted(_floor(b, tp=2) for b in (1, 8, 32)))
    assert sorted(overhead.tpots_s) == pytest.approx(sorted(p.tpot_s for p in points))


def test_noisy_loads_of_a_run_recover_its_cost_in_any_order() -> None:
    loads = (1, 2, 4, 8, 16, 32)
    noise = (0.02, -0.01, 0.015, -0.02, 0.01, -0.005)
    points = _points(loads, c_s=0.03, eta=0.4, noise=noise)
    floors = [_floor(b) for b in loads]
    c_ls, _ = _ols(floors, [p.tpot_s for p in points])
    results = []
    for order in (points, points[::-1], points[1::2] + points[::2]):
        calibration = tightened_serving([_run(order, goodput=200.0)])
        results.append(calibration.overheads["nvidia-l4"])
    for overhead in results:
        assert overhead.seconds == pytest.approx(c_ls, rel=1e-9)
        assert overhead.seconds == pytest.approx(0.03, rel=0.35)
        assert "(6 loads: a fixed" in overhead.label
        for floor in (0.04, 0.06, 0.1):
            assert overhead.relative_sd(floor) == pytest.approx(
                results[0].relative_sd(floor), rel=1e-9
            )
    projections = [
        _project(L4, tightened_serving([_run(order, goodput=200.0)]))
        for order in (points, points[::-1])
    ]
    _assert_same(*projections)


def _trials() -> tuple[TpotPoint, ...]:
    """Three trials at concurrency 1 (median the true TPOT, mean 6.7 % above it) and one at 32."""
    t1, t32 = C_S + _floor(1) / ETA, C_S + _floor(32) / ETA
    return TpotPoint(1, t1 * 0.9), TpotPoint(32, t32), TpotPoint(1, t1), TpotPoint(1, t1 * 1.3)


def test_repeated_trials_of_a_concurrency_count_as_one_load() -> None:
    overhead = tightened_serving([_run(_trials(), goodput=200.0)]).overheads["nvidia-l4"]
    assert overhead.label.startswith("your run r1 on NVIDIA L4 (2 loads: a fixed ")


def test_a_repeated_concurrency_is_fitted_at_its_median_tpot() -> None:
    t1, t32 = C_S + _floor(1) / ETA, C_S + _floor(32) / ETA
    pair = (TpotPoint(1, t1 * 0.9), TpotPoint(1, t1 * 1.1), TpotPoint(32, t32))
    overhead = tightened_serving([_run(pair, goodput=200.0)]).overheads["nvidia-l4"]
    assert overhead.seconds == pytest.approx(C_S, rel=1e-9)  # two trials: median = mean = t1
    overhead = tightened_serving([_run(_trials(), goodput=200.0)]).overheads["nvidia-l4"]
    assert overhead.seconds == pytest.approx(C_S, rel=1e-9)  # the median at 1 is t1


def _same_as_one_efficiency(points: tuple[TpotPoint, ...]) -> None:
    """``points`` give no fixed cost: the run counts by its goodput alone."""
    with_points = tightened_serving([_run(points, goodput=200.0)])
    without = tightened_serving([_run((), goodput=200.0)])
    assert with_points.overhead_s("nvidia-l4") == 0.0
    assert "nvidia-l4" not in with_points.overheads
    projection = _project(L4, with_points)
    _assert_same(projection, _project(L4, without))
    assert "loads:" not in projection.basis
    assert "narrowed by your run r1 on NVIDIA L4" in projection.basis


def test_one_load_keeps_the_one_efficiency() -> None:
    _same_as_one_efficiency(_points((16,)))
    _same_as_one_efficiency(_points((16, 16, 16), noise=(0.0, 0.03, -0.03)))


def test_a_fit_that_is_not_positive_or_barely_moves_keeps_the_one_efficiency() -> None:
    _same_as_one_efficiency(_points((1, 8, 32), c_s=-0.02))
    # a TPOT that barely moves: an efficiency of 1,000x the datasheet's, beyond any row's
    flat = tuple(TpotPoint(b, 0.14 + _floor(b) / 1000) for b in (1, 8, 32))
    _same_as_one_efficiency(flat)


def test_a_family_not_measured_keeps_no_overhead() -> None:
    calibration = tightened_serving([_run(_points((1, 8, 32)))])
    shipped = tightened_serving([])
    for name in ("NVIDIA H100 SXM 80GB", "AMD Instinct MI300X", "NVIDIA L40S", "Google TPU v5e"):
        spec = ACCELERATORS.get(name)
        assert calibration.overhead_s(spec.family) == 0.0
        projection = _project(spec, calibration)
        _assert_same(projection, _project(spec, shipped))
        assert "narrowed" not in projection.basis
    assert set(calibration.overheads) == {"nvidia-l4"}


# -- the interval ---------------------------------------------------------------------------


def test_the_interval_holds_its_point() -> None:
    calibration = tightened_serving([_run(_points((1, 8, 32)))])
    for name in ("NVIDIA L4", "NVIDIA H100 SXM 80GB", "NVIDIA L40S", "AMD Instinct MI300X"):
        projection = _project(ACCELERATORS.get(name), calibration)
        assert projection.point is not None
        tokens = projection.point.tokens_per_s_per_device
        low = projection.low_tokens_per_s_per_device
        high = projection.high_tokens_per_s_per_device
        assert 0 < low <= tokens <= high, (name, low, tokens, high)


def test_the_line_spread_is_the_run_spread_at_two_loads_and_grows_beyond_them() -> None:
    f1, f2 = _floor(1), _floor(32)
    overhead = StepOverhead(
        seconds=C_S, label="x", floors_s=(f1, f2), tpots_s=(C_S + f1 / ETA, C_S + f2 / ETA)
    )
    # a line through two points is each point: there, the point's own spread
    assert overhead.relative_sd(f1) == pytest.approx(RUN_TO_RUN_LOG_SD, rel=1e-6)
    assert overhead.relative_sd(f2) == pytest.approx(RUN_TO_RUN_LOG_SD, rel=1e-6)
    middle = overhead.relative_sd((f1 + f2) / 2)
    assert middle < RUN_TO_RUN_LOG_SD
    beyond = [overhead.relative_sd(f2 * k) for k in (1.0, 1.5, 2, 4, 8)]
    assert beyond == sorted(beyond) and beyond[-1] > 2 * RUN_TO_RUN_LOG_SD
    below = [overhead.relative_sd(f1 * k) for k in (1.0, 0.8, 0.5)]
    assert below == sorted(below)


def test_the_interval_is_wider_the_further_the_projection_is_from_the_loads() -> None:
    """The same fixed cost and efficiency, measured at loads 1 and 32 or at 1 and 2: the same
    point, and a wider interval from the loads the projection extrapolates further."""
    spread = tightened_serving([_run(_points((1, 32)), goodput=200.0)])
    close = tightened_serving([_run(_points((1, 2)), goodput=200.0)])
    wide, narrow_loads = _project(L4, spread), _project(L4, close)
    assert spread.overhead_s("nvidia-l4") == pytest.approx(close.overhead_s("nvidia-l4"))
    assert wide.eta == pytest.approx(narrow_loads.eta, rel=1e-9)
    assert wide.point is not None and narrow_loads.point is not None
    assert wide.point.tokens_per_s_per_device == pytest.approx(
        narrow_loads.point.tokens_per_s_per_device, rel=1e-9
    )
    assert _hi_lo(narrow_loads) > _hi_lo(wide)
    for projection in (wide, narrow_loads):
        assert projection.point is not None
        tokens = projection.point.tokens_per_s_per_device
        assert projection.low_tokens_per_s_per_device <= tokens
        assert tokens <= projection.high_tokens_per_s_per_device


def test_widened_adds_a_spread_in_quadrature_on_the_log_scale() -> None:
    point, low, high = 100.0, 60.0, 150.0
    assert widened(point, low, high, 0.0) == pytest.approx((low, high))
    previous = (low, high)
    for sd in (0.01, 0.05, 0.1, 0.3):
        lo, hi = widened(point, low, high, sd)
        assert lo < previous[0] and hi > previous[1]  # wider with the spread, each side
        previous = (lo, hi)
    # two spreads one after the other: one of their quadrature sum
    twice = widened(point, *widened(point, low, high, 0.05), 0.12)
    assert twice == pytest.approx(widened(point, low, high, math.hypot(0.05, 0.12)), rel=1e-9)
    # a zero-width interval gets the spread's own width, symmetric on the log scale
    lo, hi = widened(point, point, point, 0.1)
    assert math.log(point / lo) == pytest.approx(math.log(hi / point), rel=1e-9)
    assert lo < point < hi
    assert widened(point, 0.0, high, 0.1)[0] == 0.0  # nothing meets the SLO there: stays 0


# -- values refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: TpotPoint(0, 0.1), id="concurrency-0"),  # no sequence in flight
        pytest.param(lambda: TpotPoint(-1, 0.1), id="concurrency-negative"),
        pytest.param(lambda: TpotPoint(1, 0.0), id="tpot-0"),  # a TPOT of nothing
        pytest.param(lambda: TpotPoint(1, -0.1), id="tpot-negative"),
        pytest.param(lambda: TpotPoint(1, math.nan), id="tpot-nan"),
        pytest.param(lambda: ServingWorkload(0, 128), id="input-0"),
        pytest.param(lambda: ServingWorkload(512, 0), id="output-0"),
        pytest.param(lambda: ServingSlo(0.0, 0.1), id="ttft-0"),
        pytest.param(lambda: ServingSlo(1.0, -0.1), id="tpot-bound-negative"),
        pytest.param(
            lambda: fit_step_overhead([0.05, 0.06], [0.1]), id="fit-lengths-differ"
        ),  # one TPOT per floor
        pytest.param(
            lambda: StepOverhead(0.01, "x", (0.05,), (0.1,)), id="overhead-one-load"
        ),  # fitted on one load
        pytest.param(
            lambda: StepOverhead(0.01, "x", (0.05, 0.05), (0.1, 0.1)), id="overhead-one-load-twice"
        ),  # one load, twice
        pytest.param(
            lambda: StepOverhead(0.01, "x", (0.05, 0.06), (0.1,)), id="overhead-lengths-differ"
        ),
        pytest.param(
            lambda: StepOverhead(0.0, "x", (0.05, 0.06), (0.1, 0.12)), id="overhead-cost-0"
        ),  # a cost not positive
        pytest.param(
            lambda: StepOverhead(-0.01, "x", (0.05, 0.06), (0.1, 0.12)), id="overhead-cost-negative"
        ),
        pytest.param(
            lambda: widened(100.0, 120.0, 150.0, 0.1), id="widened-low-above-point"
        ),  # low above the point
        pytest.param(
            lambda: widened(100.0, 60.0, 90.0, 0.1), id="widened-high-below-point"
        ),  # high below it
        pytest.param(
            lambda: widened(100.0, 60.0, 150.0, -0.1), id="widened-spread-negative"
        ),  # a negative spread
    ],
)
def test_invalid_values_raise_value_error(make: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        make()


def test_a_step_overhead_refuses_a_measured_tpot_that_is_not_positive() -> None:
    """A ``StepOverhead`` holds measured TPOTs (what a ``TpotPoint`` checks is positive)."""
    with pytest.raises(ValueError):
        StepOverhead(0.01, "x", (0.05, 0.06), (-0.1, 0.12))
    with pytest.raises(ValueError):
        StepOverhead(0.01, "x", (0.05, 0.06), (0.0, 0.12))


def test_a_relative_sd_is_never_negative_and_a_negative_floor_is_refused() -> None:
    overhead = StepOverhead(0.01, "x", (0.05, 0.06), (0.11, 0.13))
    for floor in (0.01, 0.05, 0.055, 0.06, 1.0):
        assert overhead.relative_sd(floor) >= 0
    for nonsense in (0.0, -0.05, math.nan):  # a load's floor is a positive time
        with pytest.raises(ValueError):
            overhead.relative_sd(nonsense)


@pytest.mark.parametrize("loads", [(), (16,), (1, 8, 32)])
def test_a_run_the_floor_cannot_reach_is_refused_in_one_line(loads: tuple[int, ...]) -> None:
    """A goodput of 1e9 tokens/s per device on one L4: refused whether or not the run also
    measured the TPOT of several loads."""
    unreachable = _run(_points(loads), goodput=1e9)
    with pytest.raises(ValueError) as refused:
        tightened_serving([unreachable])
    assert len(str(refused.value).splitlines()) == 1
