"""The ceilings budget on fake kernels and a fake clock: a slow dtype is stopped after its probe
(with the reason, its probe figure as the ceiling), the budget is overrun by at most one call,
a fp32 roofline measures only fp32 and the bandwidth, and cached ceilings are extended.

Nothing here depends on the machine running the tests: every rate is a fake one.

Covers: accelscope.roofline.ceilings, accelscope.roofline.kernel_search,
accelscope.roofline.measure_ceilings, accelscope.commands.roofline.workflow."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from accelscope.commands.roofline.workflow import (
    CeilingsRequest,
    RooflineRequest,
    ceiling_dtypes,
    ceilings,
    roofline,
)
from accelscope.hardware.fingerprint import Environment
from accelscope.roofline.analysis import build_profile
from accelscope.roofline.cache import load_cached
from accelscope.roofline.ceilings import CPU_DTYPES as DTYPES
from accelscope.roofline.ceilings import Ceilings, Theoretical
from accelscope.roofline.kernel_search import Candidate, Deadline, best_first_search, fastest_call_s
from accelscope.roofline.kernels import Kernel, kernel_flops, probe_ladder
from accelscope.roofline.measure_ceilings import (
    HOPELESS_FRACTION,
    PROBE_CALL_S,
    CeilingsPlan,
    measure_ceilings,
)
from accelscope.spec import Precision, parse_tensor_spec
from accelscope.testing import FakeClock, ScriptedWork

GFLOP = 1e9


@dataclass
class Call:
    """One fake kernel call: what ran and when (fake-clock seconds)."""

    dtype: str
    candidate: Candidate
    start_s: float
    end_s: float


@dataclass
class FakeDevice:
    """Kernels whose call takes ``kernel_flops / rate`` on ``clock``; rates in FLOP/s per dtype,
    optionally per family, and ``cliff``: beyond that many FLOPs a call runs ``cliff_factor``
    times slower than any probe predicts (a cache cliff, to provoke wrong predictions). The
    builder makes one call, as :func:`~accelscope.roofline.kernels.build_kernel` does."""

    clock: FakeClock
    rates: dict[str, float]
    family_rates: dict[tuple[str, str], float] = field(default_factory=dict)
    cliff_flops: float = float("inf")
    cliff_factor: float = 1.0
    overhead_s: dict[str, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    streams_calls: int = 0

    def rate(self, dtype: str, candidate: Candidate) -> float | None:
        rate = self.family_rates.get((dtype, candidate.family), self.rates.get(dtype))
        if rate is not None and kernel_flops(candidate) > self.cliff_flops:
            rate /= self.cliff_factor
        return rate

    def build(self, candidate: Candidate, dtype: str, device: str) -> Kernel | None:
        rate = self.rate(dtype, candidate)
        if rate is None:
            return None
        flops = kernel_flops(candidate)
        overhead_s = self.overhead_s.get(dtype, 0.0)

        def call() -> None:
            start = self.clock.now_s
            self.clock.advance(overhead_s + flops / rate)
            self.calls.append(Call(dtype, candidate, start, self.clock.now_s))

        call()  # the builder proves the kernel runs
        return Kernel(call, flops, f"fake {candidate.family}")

    def streams(self, elements: int, device: str) -> dict[str, float]:
        self.streams_calls += 1
        self.clock.advance(0.5)
        return {"copy": 10e9, "triad": 12e9}


def _measure(
    device: FakeDevice,
    environment: Environment,
    budget_s: float,
    dtypes: tuple[str, ...] = DTYPES,
    threads: tuple[int, ...] = (1, 2),
    ideal: Theoretical | None = None,
) -> Ceilings:
    plan = CeilingsPlan(budget_s=budget_s, dtypes=dtypes, threads=threads)
    return measure_ceilings(
        plan,
        environment,
        builder=device.build,
        clock=device.clock,
        streams=device.streams,
        theoretical=ideal or Theoretical(flops_per_s={"fp32": 200 * GFLOP}, derivation="fake"),
    )


def _ladder_flops(dtype_families: tuple[str, ...]) -> float:
    return max(kernel_flops(c) for f in dtype_families for c in probe_ladder(f))


def test_a_slow_dtype_is_stopped_after_its_probe_with_the_reason(
    environment: Environment,
) -> None:
    clock = FakeClock()
    device = FakeDevice(clock, {"fp32": 100 * GFLOP, "bf16": 1 * GFLOP})
    began = clock.now_s
    found = _measure(device, environment, 60.0, dtypes=("fp32", "bf16"))

    reason = found.not_searched["bf16"]
    assert reason.startswith("bf16 not searched: probe 1.0 GFLOP/s = 0.01x fp32 (100.0 GFLOP/s)")
    assert "no native bf16 unit" in reason  # the fake ISA peak has fp32 only
    assert reason in found.notes
    peak = found.peaks["bf16"]
    assert peak.probe and found.matmul_flops_per_s["bf16"] == pytest.approx(1 * GFLOP)
    assert found.probe_flops_per_s["bf16"] == pytest.approx(1 * GFLOP)
    assert not found.peaks["fp32"].probe and "fp32" not in found.not_searched
    # bf16 ran only probe shapes, each call short (a 256³ product is already 34 ms here, so its
    # ladder stopped there; one step is at most 8x one under PROBE_CALL_S) ...
    bf16 = [c for c in device.calls if c.dtype == "bf16"]
    assert bf16 and all(c.candidate in probe_ladder(c.candidate.family) for c in bf16)
    assert Candidate("mm", (512, 512, 512)) not in {c.candidate for c in bf16}
    assert max(c.end_s - c.start_s for c in bf16) <= 8 * PROBE_CALL_S
    # ... and cost well under a second of the budget, while fp32 got the rest
    assert sum(c.end_s - c.start_s for c in bf16) < 1.0
    assert clock.now_s - began <= 60.0
    assert set(found.measured_dtypes) == {"fp32", "bf16"}


def test_an_ample_dtype_is_searched_and_a_native_unit_gets_no_emulation_hint(
    environment: Environment,
) -> None:
    device = FakeDevice(FakeClock(), {"fp32": 100 * GFLOP, "bf16": 20 * GFLOP, "int8": 400 * GFLOP})
    ideal = Theoretical(flops_per_s={"fp32": 200 * GFLOP, "bf16": 200 * GFLOP}, derivation="fake")
    found = _measure(device, environment, 60.0, dtypes=("fp32", "bf16", "int8"), ideal=ideal)
    assert HOPELESS_FRACTION > 20 / 100  # bf16 at 0.2x fp32 is below the line
    assert "bf16" in found.not_searched and "emulated" not in found.not_searched["bf16"]
    assert "int8" not in found.not_searched and not found.peaks["int8"].probe
    assert found.matmul_flops_per_s["int8"] == pytest.approx(400 * GFLOP)


def test_fp32_search_corrects_a_reference_probe_that_call_overhead_made_low(
    environment: Environment,
) -> None:
    # every fp32 call waits 20 ms (a busy machine's scheduler slice): its small probes read
    # ~1.6 GFLOP/s, so bf16's 1 GFLOP/s passes the probe test; fp32's search then finds
    # ~100 GFLOP/s in large kernels, and bf16 is stopped against that
    device = FakeDevice(
        FakeClock(), {"fp32": 100 * GFLOP, "bf16": 1 * GFLOP}, overhead_s={"fp32": 0.02}
    )
    found = _measure(device, environment, 60.0, dtypes=("bf16", "fp32"))
    assert found.probe_flops_per_s["fp32"] < 4 * GFLOP
    assert found.matmul_flops_per_s["fp32"] > 50 * GFLOP
    assert "bf16" in found.not_searched and "x fp32 (" in found.not_searched["bf16"]
    assert not any(
        c.dtype == "bf16" and c.candidate not in probe_ladder(c.candidate.family)
        for c in device.calls
    )


def test_a_dtype_whose_cheapest_kernel_does_not_fit_is_stopped(
    environment: Environment,
) -> None:
    # fp16 at 0.4x fp32 passes the ratio test, but at these rates the probes (about 4 s) leave
    # too little of the 5 s for even the cheapest search kernel (a 0.2 GFLOP convolution)
    device = FakeDevice(FakeClock(), {"fp32": 0.5 * GFLOP, "fp16": 0.2 * GFLOP})
    found = _measure(device, environment, 5.0, dtypes=("fp32", "fp16"), threads=(1,))
    for dtype in ("fp32", "fp16"):
        assert "cheapest search kernel" in found.not_searched[dtype]
        assert found.peaks[dtype].probe and found.matmul_flops_per_s[dtype] > 0


def test_a_family_far_slower_than_its_dtype_is_left_out(environment: Environment) -> None:
    device = FakeDevice(
        FakeClock(), {"fp32": 100 * GFLOP}, family_rates={("fp32", "mm"): 1 * GFLOP}
    )
    found = _measure(device, environment, 30.0, dtypes=("fp32",))
    assert any(n.startswith("fp32: mm (fake mm) left out of the search") for n in found.notes)
    mm = [c for c in device.calls if c.candidate.family == "mm"]
    assert {c.candidate for c in mm} == {probe_ladder("mm")[0]}
    assert "fp32" not in found.naive_flops_per_s  # the naive 4096³ is an mm: not launched


@pytest.mark.parametrize("budget_s", [0.5, 3.0, 10.0, 45.0, 180.0])
@pytest.mark.parametrize(
    ("rates", "family_rates", "cliff_factor"),
    [
        ({"fp32": 100 * GFLOP, "bf16": 1 * GFLOP, "fp16": 2 * GFLOP, "int8": 150 * GFLOP}, {}, 1.0),
        ({"fp32": 5 * GFLOP, "bf16": 4 * GFLOP, "int8": 0.5 * GFLOP}, {}, 1.0),
        ({d: 50 * GFLOP for d in DTYPES}, {("fp32", "conv3x3_nhwc"): 0.1 * GFLOP}, 1.0),
        ({d: 80 * GFLOP for d in DTYPES}, {}, 30.0),  # big kernels 30x slower than predicted
        ({d: 80 * GFLOP for d in DTYPES}, {}, 1000.0),  # ... or 1000x: one call overruns
    ],
)
def test_the_budget_is_overrun_by_at_most_one_call(
    environment: Environment,
    budget_s: float,
    rates: dict[str, float],
    family_rates: dict[tuple[str, str], float],
    cliff_factor: float,
) -> None:
    clock = FakeClock()
    device = FakeDevice(clock, rates, family_rates, cliff_flops=4e9, cliff_factor=cliff_factor)
    began = clock.now_s
    deadline = began + budget_s
    found = _measure(device, environment, budget_s)

    calls = device.calls
    assert calls and found.matmul_flops_per_s  # a figure, whatever the budget
    late = [c for c in calls if c.end_s > deadline]
    assert len(late) <= 1, late  # at most one call runs past the deadline ...
    started_late = [c for c in calls if c.start_s >= deadline]
    assert started_late in ([], [calls[0]])  # ... none starts after it but the very first
    longest = max(c.end_s - c.start_s for c in calls)
    assert clock.now_s - began <= budget_s + longest
    assert found.search_s == pytest.approx(clock.now_s - began)
    assert all(rate > 0 for rate in found.matmul_flops_per_s.values())  # never 0


def test_fastest_call_launches_only_what_fits_before_the_deadline() -> None:
    clock = FakeClock()
    work = ScriptedWork(clock, [1.0], cycle=True)
    deadline = Deadline.after(3.5, clock)
    fastest = fastest_call_s(
        work,
        clock=clock,
        min_time_s=100.0,
        min_reps=50,
        warmup=0,
        deadline=deadline,
        predicted_call_s=1.0,
    )
    assert fastest == 1.0 and work.calls == 3  # a 4th 1 s call would end at 4 s
    assert fastest_call_s(work, clock=clock, deadline=deadline, predicted_call_s=1.0) is None
    assert work.calls == 3


def test_search_skips_candidates_predicted_not_to_fit() -> None:
    evaluated: list[Candidate] = []
    big, small = Candidate("mm", (4096, 1, 1)), Candidate("mm", (64, 1, 1))

    def evaluate(candidate: Candidate) -> float | None:
        evaluated.append(candidate)
        return 1.0

    outcome = best_first_search(
        [big, small],
        lambda c: [],
        evaluate,
        budget_s=10.0,
        affordable=lambda c: c != big,
        known={Candidate("mm", (32, 1, 1)): 0.5},
    )
    assert evaluated == [small]
    assert outcome.skipped == (big,) and outcome.stop_reason == "budget"
    assert outcome.best is not None and outcome.best.candidate == small
    assert len(outcome.trials) == 2  # the known probe and the small seed


# --- which ceilings a command measures, and extending the cache --------------------------------

FACTORY = """\
import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(16, 8))
"""


@dataclass
class Recorder:
    """``measure_ceilings`` on a fake device, recording each plan and whether it extended."""

    device: FakeDevice
    plans: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)

    def __call__(self, plan: CeilingsPlan, env: Environment, **kwargs: object) -> Ceilings:
        self.plans.append((plan.dtypes, kwargs.get("extend") is not None))
        measure = functools.partial(
            measure_ceilings,
            builder=self.device.build,
            clock=self.device.clock,
            streams=self.device.streams,
            theoretical=Theoretical(flops_per_s={"fp32": 200 * GFLOP}, derivation="fake"),
        )
        return measure(replace(plan, threads=(1,)), env, **kwargs)


def _profile(model: object, found: Ceilings, env: Environment, **kwargs: object) -> object:
    precision = getattr(kwargs["precision"], "value", "fp32")
    return build_profile(
        model="tiny",
        backend="eager",
        precision=precision,
        batch_size=1,
        device="cpu",
        threads=1,
        ceilings=found,
        records=[],
        times_s=[],
        measured_time_s=1e-3,
    )


def test_ceiling_dtypes_per_precision() -> None:
    assert ceiling_dtypes(Precision.FP32) == ("fp32",)
    assert ceiling_dtypes(Precision.BF16) == ("fp32", "bf16")
    assert ceiling_dtypes(Precision.FP16) == ("fp32", "fp16")


def test_fp32_roofline_measures_only_fp32_and_bandwidth_then_the_cache_extends(
    tmp_path: Path, environment: Environment
) -> None:
    (tmp_path / "tiny.py").write_text(FACTORY, encoding="utf-8")
    device = FakeDevice(FakeClock(), {"fp32": 100 * GFLOP, "bf16": 1 * GFLOP, "int8": 1e11})
    record = Recorder(device)
    cache = tmp_path / "ceilings"
    request = RooflineRequest(
        model=f"{tmp_path / 'tiny.py'}:make",
        inputs=(parse_tensor_spec("x:N,16:float32"),),
        report_path=tmp_path / "r.html",
        ceilings_budget_s=20.0,
    )
    roofline(
        request,
        store_path=None,
        cache_dir=cache,
        environment=environment,
        measure=record,
        profiler=_profile,
    )
    assert record.plans == [(("fp32",), False)]
    assert {c.dtype for c in device.calls} == {"fp32"} and device.streams_calls == 1
    first = ceilings(
        CeilingsRequest(dtypes=("fp32",)),
        store_path=None,
        cache_dir=cache,
        environment=environment,
        measure=record,
    )
    assert first.cached and first.ceilings.measured_dtypes == ("fp32",)
    assert len(record.plans) == 1  # nothing measured again

    # a bf16 roofline later: bf16 is measured and added, fp32 and the bandwidth are kept
    device.calls.clear()
    extended = ceilings(
        CeilingsRequest(dtypes=ceiling_dtypes(Precision.BF16)),
        store_path=None,
        cache_dir=cache,
        environment=environment,
        measure=record,
    )
    assert record.plans[-1] == (("bf16",), True)
    assert not extended.cached and extended.extended and extended.measured_dtypes == ("bf16",)
    # no bandwidth and no fp32 call: the cached fp32 peak is the reference bf16 is judged by
    assert device.streams_calls == 1 and {c.dtype for c in device.calls} == {"bf16"}
    merged = extended.ceilings
    assert merged.measured_dtypes == ("fp32", "bf16")
    assert merged.matmul_flops_per_s["fp32"] == first.ceilings.matmul_flops_per_s["fp32"]
    assert merged.bandwidth_bytes_per_s == first.ceilings.bandwidth_bytes_per_s
    assert "bf16" in merged.not_searched and merged.peaks["bf16"].probe
    assert merged.trials > first.ceilings.trials
    assert load_cached(extended.cache_path) == merged

    # the full `ceilings` command then adds only what is still missing
    full = ceilings(
        CeilingsRequest(), store_path=None, cache_dir=cache, environment=environment, measure=record
    )
    assert record.plans[-1] == (("fp16", "int8"), True)
    assert full.ceilings.measured_dtypes == DTYPES
    assert "fp16: no kernel runs here; no peak measured" in full.ceilings.notes
    assert ceilings(
        CeilingsRequest(), store_path=None, cache_dir=cache, environment=environment, measure=record
    ).cached

    # --refresh measures the asked dtypes from scratch, bandwidth included
    ceilings(
        CeilingsRequest(refresh=True, dtypes=("fp32",)),
        store_path=None,
        cache_dir=cache,
        environment=environment,
        measure=record,
    )
    assert record.plans[-1] == (("fp32",), False) and device.streams_calls == 2


def test_older_documents_cover_every_dtype_and_new_keys_are_optional() -> None:
    from roofline_helpers import make_ceilings

    new = make_ceilings(
        measured_dtypes=("fp32",),
        probe_flops_per_s={"bf16": 1e9},
        not_searched={"bf16": "bf16 not searched: probe"},
    )
    document = new.model_dump(mode="json")
    assert Ceilings.from_payload(document) == new
    old = {
        k: v
        for k, v in document.items()
        if k not in ("measured_dtypes", "probe_flops_per_s", "not_searched")
    }
    for peak in old["peaks"].values():
        peak.pop("probe")
    loaded = Ceilings.from_payload(old)
    assert loaded.measured_dtypes == DTYPES and loaded.missing(DTYPES) == ()
    assert loaded.not_searched == {} and not loaded.peaks["fp32"].probe
    assert new.missing(("fp32", "bf16")) == ("bf16",)
