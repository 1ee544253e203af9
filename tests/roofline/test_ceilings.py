"""Ceiling search logic on fake kernels and a fake clock; the ISA peak; the cache; one small
real measurement."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.roofline.cache import cache_path, load_cached, save_cached
from accelscope.roofline.ceilings import Theoretical
from accelscope.roofline.kernel_search import Candidate, best_first_search, measure_rate
from accelscope.roofline.kernels import Kernel, build_kernel, neighbors, seeds
from accelscope.roofline.measure_ceilings import CeilingsPlan, measure_ceilings
from accelscope.roofline.theoretical import parse_topology, theoretical_cpu
from accelscope.serialise import dump
from accelscope.testing import FakeClock, ScriptedWork


def test_measure_rate_takes_the_fastest_call_after_warmup() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [9.0, 2.0, 1.0, 4.0, 3.0])  # first is warm-up
    rate = measure_rate(work, 100.0, clock=clock, min_time_s=0.0, min_reps=4)
    assert rate == 100.0  # 100 FLOPs / fastest 1 s
    assert work.calls == 5


def test_measure_rate_runs_until_min_time() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [0.1], cycle=True)
    measure_rate(work, 1.0, clock=clock, min_time_s=1.0, min_reps=3, warmup=0)
    assert work.calls == 10


def _landscape(peak: Candidate) -> dict[Candidate, float]:
    """A rate surface on a 1-D chain of GEMM shapes, peaked at ``peak``."""
    rates = {}
    for m in (64, 128, 256, 512, 1024, 2048, 4096):
        candidate = Candidate("mm", (m, 1, 1))
        rates[candidate] = 1000.0 - abs(m - peak.shape[0])
    return rates


def _chain(candidate: Candidate) -> list[Candidate]:
    m = candidate.shape[0]
    return [Candidate("mm", (x, 1, 1)) for x in (m // 2, m * 2) if 64 <= x <= 4096]


def test_search_climbs_from_a_seed_to_the_peak() -> None:
    peak = Candidate("mm", (2048, 1, 1))
    rates = _landscape(peak)
    clock = FakeClock()

    def evaluate(candidate: Candidate) -> float | None:
        clock.advance(0.1)
        return rates.get(candidate)

    outcome = best_first_search(
        [Candidate("mm", (64, 1, 1))], _chain, evaluate, budget_s=100, clock=clock
    )
    assert outcome.best is not None and outcome.best.candidate == peak
    assert outcome.stop_reason == "converged"
    assert len({t.candidate for t in outcome.trials}) == len(outcome.trials)  # no repeats


def test_search_stops_at_the_budget_but_measures_one_seed() -> None:
    clock = FakeClock()

    def evaluate(candidate: Candidate) -> float | None:
        clock.advance(5.0)
        return 1.0

    outcome = best_first_search(
        [Candidate("mm", (64, 1, 1)), Candidate("mm", (128, 1, 1))],
        _chain,
        evaluate,
        budget_s=0.0,
        clock=clock,
    )
    assert len(outcome.trials) == 1 and outcome.stop_reason == "budget"


def test_search_skips_candidates_that_cannot_run() -> None:
    outcome = best_first_search(
        [Candidate("x", (1,)), Candidate("y", (1,))],
        lambda c: [],
        lambda c: None if c.family == "x" else 5.0,
        budget_s=1,
    )
    assert outcome.best is not None and outcome.best.candidate.family == "y"


def test_neighbors_switch_layout_and_scale_each_dimension() -> None:
    found = neighbors(Candidate("mm", (1024, 1024, 1024)), "bf16")
    assert Candidate("linear", (1024, 1024, 1024)) in found
    assert Candidate("mm", (2048, 1024, 1024)) in found
    assert Candidate("mm", (1024, 1024, 512)) in found
    assert all(not c.family.startswith("conv") for c in found)
    conv = neighbors(Candidate("conv3x3_nhwc", (8, 256, 14)), "bf16")
    assert Candidate("conv1x1_nhwc", (8, 256, 14)) in conv
    assert all(c.family.startswith("conv") for c in conv)
    assert {c.family for c in seeds("int8")} == {"int_mm", "int_mm_wT", "qlinear_onednn"}


def _fake_builder(table: dict[str, float]) -> object:
    """Kernels whose rate depends on family and size: 'conv3x3_nhwc' is the fastest family."""

    def build(candidate: Candidate, dtype: str, device: str) -> Kernel | None:
        if dtype == "fp16":
            return None  # "not supported here"
        speed = table.get(candidate.family, 1.0) * (1 + candidate.shape[0] / 1e6)
        return Kernel(lambda: None, speed, candidate.family)

    return build


def test_measure_ceilings_on_fake_kernels(environment: Environment) -> None:
    clock = FakeClock()
    plan = CeilingsPlan(budget_s=5.0, dtypes=("fp32", "fp16"), threads=(1,), min_time_s=0.0)
    built = _fake_builder({"conv3x3_nhwc": 3.0, "mm": 1.0})

    def builder(candidate: Candidate, dtype: str, device: str) -> Kernel | None:
        kernel = built(candidate, dtype, device)  # type: ignore[operator]
        if kernel is None:
            return None

        def fn() -> None:
            clock.advance(0.001)

        return Kernel(fn, kernel.flops, kernel.path)

    ideal = Theoretical(flops_per_s={"fp32": 1e6}, derivation="test")
    found = measure_ceilings(
        plan,
        environment,
        builder=builder,
        clock=clock,
        streams=lambda n, d: {"copy": 5.0, "triad": 6.0},
        theoretical=ideal,
    )
    assert found.bandwidth_bytes_per_s == 6.0
    assert found.peaks["fp32"].family == "conv3x3_nhwc"
    assert "fp16" not in found.matmul_flops_per_s
    assert any("fp16: no kernel runs here" in note for note in found.notes)
    assert found.by_threads[1]["fp32"] == found.matmul_flops_per_s["fp32"]
    assert found.fraction_of_theoretical("fp32") == pytest.approx(
        found.matmul_flops_per_s["fp32"] / 1e6
    )
    assert found.naive_flops_per_s["fp32"] > 0


CPUINFO = """processor\t: 0
physical id\t: 0
siblings\t: 2
core id\t: 0
cpu cores\t: 2
cpu MHz\t\t: 2600.000
flags\t\t: fpu avx512f hypervisor amx_bf16

processor\t: 1
physical id\t: 0
siblings\t: 2
core id\t: 1
cpu cores\t: 2
cpu MHz\t\t: 2600.000
flags\t\t: fpu avx512f hypervisor amx_bf16
"""


def test_theoretical_peak_from_the_isa(environment: Environment) -> None:
    topology = parse_topology(CPUINFO)
    assert (topology.logical, topology.distinct_cores, topology.mhz) == (2, 2, 2600.0)
    assert topology.hypervisor
    cpu = environment.cpu.__class__(
        **{
            **dump(environment.cpu),
            "physical_cores": 2,
            "isa": ("amx_bf16", "amx_int8", "avx512f"),
        }
    )
    ideal = theoretical_cpu(cpu, topology, threads=2)
    assert ideal.flops_per_s["fp32"] == 2 * 2.6e9 * 64  # 332.8 GFLOP/s
    assert ideal.flops_per_s["bf16"] == 2 * 2.6e9 * 1024  # 5.3248 TFLOP/s
    assert ideal.flops_per_s["int8"] == 2 * 2.6e9 * 2048
    assert "cpu MHz" in ideal.derivation and "hypervisor" in ideal.derivation


def test_cache_round_trip_and_corrupt_file(tmp_path: Path, environment: Environment) -> None:
    clock = FakeClock()

    def builder(candidate: Candidate, dtype: str, device: str) -> Kernel | None:
        return Kernel(lambda: clock.advance(0.01), 1e6, "fake")

    found = measure_ceilings(
        CeilingsPlan(budget_s=0.1, dtypes=("fp32",), threads=(1,), min_time_s=0.0),
        environment,
        builder=builder,
        clock=clock,
        streams=lambda n, d: {"copy": 1.0, "triad": 2.0},
        theoretical=Theoretical(derivation="x"),
    )
    path = cache_path(tmp_path / "ceilings", "abc", "cpu", 2)
    assert path.name == "abc-cpu-t2.json"
    save_cached(found, path)
    assert load_cached(path) == found
    assert load_cached(tmp_path / "missing.json") is None
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(BadInputError, match="--refresh"):
        load_cached(path)
    path.write_text(json.dumps({"device": "cpu"}), encoding="utf-8")
    with pytest.raises(BadInputError, match="corrupt ceilings cache"):
        load_cached(path)


def test_one_small_real_measurement() -> None:
    kernel = build_kernel(Candidate("linear", (128, 128, 128)), "bf16")
    assert kernel is not None and kernel.flops == 2 * 128**3
    rate = measure_rate(kernel.fn, kernel.flops, min_time_s=0.01, min_reps=3)
    assert 1e6 < rate < 1e15
    int8 = build_kernel(Candidate("int_mm", (64, 64, 64)), "int8")
    assert int8 is not None
