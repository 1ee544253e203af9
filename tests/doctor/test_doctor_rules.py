"""Each rule fires on the pattern it names and stays clear (or n/a) otherwise; the verdict
ranks by share of step time; the registry finds every rule module."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.profile import PHASES, LoaderFacts, OpSummary, Profile, RunFacts, Step
from accelscope.doctor.rules import all_rules
from accelscope.doctor.verdict import diagnose
from accelscope.hardware.cpu import CpuInfo
from accelscope.hardware.fastpaths import cpu_support
from accelscope.hardware.telemetry import Telemetry, TelemetrySample

SPR = CpuInfo(
    model_name="Xeon",
    vendor="GenuineIntel",
    arch="x86_64",
    logical_cores=2,
    physical_cores=1,
    usable_cores=2,
    sockets=1,
    max_freq_mhz=None,
    l2_cache_bytes=None,
    l3_cache_bytes=None,
    isa=("amx_bf16", "avx512_bf16", "avx512f", "avx2", "fma"),
)
OLD = replace(SPR, isa=("avx2", "fma"))


def _step(duration_s: float, items: int = 16, **phases: float) -> Step:
    counts = {
        "syncs": int(phases.pop("syncs", 0)),
        "copies": 0,
        "pageable_copies": 0,
        "copy_bytes": 0,
        "forwards": 1,
        "items": items,
    }
    return Step(
        start_s=0.0,
        duration_s=duration_s,
        phases_s={p: phases.get(p, 0.0) for p in PHASES},
        counts=counts,
    )


def _facts(workers: int = 0, threads: int = 1) -> RunFacts:
    loader = LoaderFacts(
        num_workers=workers,
        pin_memory=False,
        batch_size=16,
        persistent_workers=False,
        prefetch_factor=None,
        dataset="Images",
        dataset_len=1000,
        iterable=False,
    )
    return RunFacts(
        torch="2.x",
        torch_threads=threads,
        interop_threads=1,
        loaders=(loader,),
        main_model={"parameter_dtypes": {"float32": 10}},
        autocast=None,
        cuda_initialized=False,
        optimizer_seen=True,
        backward_seen=True,
    )


def _probe(ops: int, op_time_s: float, fp32_s: float) -> OpSummary:
    return OpSummary(
        ops=ops,
        forward_ops=ops // 3,
        op_time_s=op_time_s,
        matmul_calls=4,
        matmul_time_s={"float32": fp32_s},
        matmul_flops={"float32": 1e9},
        devices=("cpu",),
        autocast={"cpu": "off"},
        top_ops=(),
    )


def _ctx(
    steps: list[Step],
    probe: OpSummary | None = None,
    cpu: CpuInfo = SPR,
    facts: RunFacts | None = None,
    telemetry: Telemetry | None = None,
    op_overhead_s: float = 1e-6,
) -> RuleContext:
    profile = Profile(
        status="done",
        mode="optimizer",
        warmup=0,
        target_steps=len(steps),
        steps=tuple(steps),
        probe=probe,
        op_overhead_s=op_overhead_s,
        facts=facts or _facts(),
    )
    return RuleContext(
        profile=profile,
        breakdown=breakdown(steps),
        telemetry=telemetry,
        support=cpu_support(cpu),
        cores=2,
        memory_bytes=24 * 2**30,
    )


def _fired(ctx: RuleContext) -> list[str]:
    return [f.rule for f in diagnose(ctx).fired]


def test_registry_finds_one_rule_per_module() -> None:
    names = {rule.name for rule in all_rules()}
    assert names == {
        "input-bound",
        "pageable-copies",
        "sync-bound",
        "overhead-bound",
        "missing-mixed-precision",
        "thread-oversubscription",
        "memory-pressure",
        "underfilled",
        "device-idle",
        "device-bound",
        "tensor-cores-idle",
    }


def test_input_bound() -> None:
    steps = [_step(0.020, input=0.015, forward=0.002, backward=0.002)] * 5
    diagnosis = diagnose(_ctx(steps, _probe(30, 0.004, 0.001)))
    assert diagnosis.bottleneck == "input-bound"
    top = diagnosis.fired[0]
    assert top.share is not None and abs(top.share - 0.75) < 1e-9
    assert "workers" in top.what_ifs and "cache" in top.what_ifs
    assert top.evidence["num_workers"] == 0 and "20%" in top.threshold


def test_sync_bound() -> None:
    steps = [_step(0.010, forward=0.003, backward=0.002, sync=0.005, syncs=4)] * 5
    assert _fired(_ctx(steps, _probe(30, 0.004, 0.0)))[0] == "sync-bound"


def test_overhead_bound_small_ops_and_batch() -> None:
    steps = [_step(150e-6, items=1, forward=100e-6, sync=2e-6)] * 5
    diagnosis = diagnose(_ctx(steps, _probe(11, 60e-6, 20e-6)))
    assert diagnosis.bottleneck == "overhead-bound"
    assert diagnosis.fired[0].what_ifs == ("batch", "compile")


def test_overhead_bound_scales_with_the_trivial_op_cost_measured_in_the_run() -> None:
    # 11 ops in 330 us: 30 us each. On a quiet machine (a trivial op costs 1 us) that is real
    # work; on a busy one where a trivial op takes 2 us, 30 us is still under 25x of it.
    steps = [_step(330e-6, items=1, forward=300e-6)] * 5
    quiet = diagnose(_ctx(steps, _probe(11, 300e-6, 100e-6), op_overhead_s=1e-6))
    busy = diagnose(_ctx(steps, _probe(11, 300e-6, 100e-6), op_overhead_s=2e-6))
    assert "overhead-bound" not in [f.rule for f in quiet.fired]
    assert busy.bottleneck == "overhead-bound"
    assert "50 us" in busy.fired[0].threshold


def test_missing_mixed_precision_needs_a_fast_path() -> None:
    steps = [_step(0.060, forward=0.020, backward=0.035, optimizer=0.004)] * 5
    probe = _probe(30, 0.058, 0.050)
    assert _fired(_ctx(steps, probe))[0] == "missing-mixed-precision"
    old = diagnose(_ctx(steps, probe, cpu=OLD))
    finding = next(f for f in old.findings if f.rule == "missing-mixed-precision")
    assert finding.status == "n/a" and "AVX512-BF16" in finding.summary
    assert old.bottleneck == "compute"  # nothing fixable: say where the time is


def test_oversubscription_and_memory_pressure_from_telemetry() -> None:
    steps = [_step(0.010, forward=0.008)] * 5
    sample = TelemetrySample(
        t_s=0.1,
        cpu_percent=(100.0, 100.0),
        iowait_percent=0.0,
        procs_running=5,
        process_rss_bytes=23 * 2**30,
        process_cpu_cores=1.0,
        processes=3,
        available_bytes=2**28,
        swap_used_bytes=2**30,
    )
    swapped = replace(sample, swap_used_bytes=2**31)
    telemetry = Telemetry(0.1, (sample, swapped), "n/a", "n/a")
    fired = _fired(
        _ctx(steps, _probe(3, 0.008, 0.0), facts=_facts(workers=2, threads=2), telemetry=telemetry)
    )
    assert "thread-oversubscription" in fired and "memory-pressure" in fired


def test_device_rules_are_not_applicable_on_cpu() -> None:
    steps = [_step(0.010, forward=0.008)] * 3
    by_rule: dict[str, Any] = {f.rule: f for f in diagnose(_ctx(steps)).findings}
    assert by_rule["device-idle"].status == "n/a"
    assert by_rule["pageable-copies"].status == "n/a"
