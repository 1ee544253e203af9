"""The live verdict from the GPU's own timeline: the instrumented child records a torch.profiler
trace over a few steps after the warm-up (outside the census and the measured steps), the
parent reads it with doctor/kineto.py, and the rules name the bottleneck from kernel time and
the idle causes, with GPM SM activity beside them. Tested without a GPU: the trace is one the
tests build (test_device_timeline.py's builders), injected into the rule context or, end to
end, into a real child through ACCELSCOPE_DOCTOR_DEVICE_TRACE.

Covers: accelscope.doctor.kineto, accelscope.doctor.inprocess.device_trace,
accelscope.doctor.verdict, accelscope.doctor.rules, accelscope.doctor.launcher."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_device_timeline import (
    TraceBuilder,
    covered,
    fp32_matmul,
    host_preprocessing,
    memory_bound,
    pageable,
    steps,
    sync_bound,
    tensor_core_bf16,
)
from test_doctor_gpu import HEALTHY, LAUNCH_BOUND, _by_rule, _run
from test_doctor_gpu_evidence import _gpu, _telemetry

from accelscope.doctor.diagnose import DoctorPlan, run_doctor
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.inprocess.device_trace import INJECT_ENV, PROFILED_STEPS
from accelscope.doctor.inprocess.recorder import Recorder
from accelscope.doctor.kineto import parse_trace
from accelscope.doctor.launcher import Launcher
from accelscope.doctor.profile import DeviceTraceRecord, Profile
from accelscope.doctor.verdict import diagnose
from accelscope.hardware.fingerprint import collect_environment
from accelscope.serialise import dump
from accelscope.testing import fake_environment


def _record(body: Any, n: int = 3) -> DeviceTraceRecord:
    trace = parse_trace(steps(TraceBuilder(), n, body).document())
    return DeviceTraceRecord(
        status="injected",
        steps=n,
        profiled_s=0.03,
        stop_s=0.01,
        timeline=trace.timelines(),
        device_name=trace.device_name,
        step_source=trace.step_source,
    )


def _ctx(base: RuleContext, body: Any, *, sm: float | None = None) -> RuleContext:
    profile = replace(base.profile, device_trace=_record(body))
    ctx = replace(base, profile=profile)
    if sm is not None:
        ctx = replace(ctx, telemetry=_telemetry([(_gpu(sm, 1.0),)] * 6))
    return ctx


def test_sync_trace_names_sync_bound() -> None:
    ctx = _ctx(_run(HEALTHY), sync_bound, sm=1.0)
    assert ctx.timeline is not None and ctx.timeline.bottleneck == "sync"
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "sync-bound", diagnosis.headline
    assert found["sync-bound"].share == pytest.approx(0.85, abs=0.05)
    assert found["device-bound"].status == "clear"
    assert found["missing-mixed-precision"].status != "fired"
    assert "bf16" not in found["sync-bound"].advice
    evidence = found["sync-bound"].evidence
    assert evidence["device_timeline_kernel_share"] == pytest.approx(0.10, abs=0.01)


def test_pageable_copy_trace_names_pageable_copies() -> None:
    ctx = _ctx(_run(LAUNCH_BOUND), pageable, sm=5.0)
    diagnosis = diagnose(ctx)
    assert diagnosis.bottleneck == "pageable-copies", diagnosis.headline
    top = diagnosis.fired[0]
    assert top.share == pytest.approx(0.79, abs=0.02) and "pin_memory=True" in top.advice


def test_host_preprocessing_trace_is_input_bound_with_workers_advice() -> None:
    diagnosis = diagnose(_ctx(_run(HEALTHY), host_preprocessing))
    assert diagnosis.bottleneck == "input-bound", diagnosis.headline
    top = diagnosis.fired[0]
    assert "DataLoader workers" in top.advice and "bf16" not in top.advice
    assert top.evidence["device_timeline_host_compute_share"] == pytest.approx(0.7, abs=0.02)


def test_device_bound_from_kernel_time_and_sm_activity_only() -> None:
    fp32 = _by_rule(diagnose(_ctx(_run(HEALTHY), fp32_matmul, sm=85.0)))
    assert fp32["device-bound"].status == "fired" and "bf16" in fp32["device-bound"].advice
    assert fp32["device-bound"].share == pytest.approx(0.95, abs=0.01)
    assert "bf16" in fp32["device-bound"].what_ifs
    # the same kernels with GPM SM active at 30 %: not device-bound
    low = _by_rule(diagnose(_ctx(_run(HEALTHY), fp32_matmul, sm=30.0)))
    assert low["device-bound"].status == "clear"
    assert "not called device-bound" in low["device-bound"].summary


def test_reduced_precision_kernels_get_no_bf16_advice_live() -> None:
    found = _by_rule(diagnose(_ctx(_run(HEALTHY), tensor_core_bf16, sm=85.0)))
    bound = found["device-bound"]
    assert bound.status == "fired" and "autocast" not in bound.advice
    assert "bf16" not in bound.what_ifs and "fp16" not in bound.what_ifs
    assert "tensor cores" in bound.advice
    assert found["missing-mixed-precision"].status != "fired"


def test_memory_bound_kernels_are_named_with_fusion_advice_live() -> None:
    diagnosis = diagnose(_ctx(_run(HEALTHY), memory_bound, sm=70.0))
    found = _by_rule(diagnosis)
    bound = found["device-bound"]
    assert diagnosis.bottleneck == "device-bound" and bound.title == "memory-bound on the device"
    assert "fus" in bound.advice and "bf16" not in bound.advice
    assert "bf16" not in bound.what_ifs
    assert found["missing-mixed-precision"].status != "fired"


def test_underfilled_gpu_is_named_from_the_timeline_and_sm_activity() -> None:
    diagnosis = diagnose(_ctx(_run(HEALTHY), covered, sm=5.0))
    assert diagnosis.bottleneck == "underfilled", diagnosis.headline
    assert "bf16" not in diagnosis.fired[0].advice and "batch" in diagnosis.fired[0].advice


def test_the_record_round_trips_through_the_profile() -> None:
    ctx = _ctx(_run(HEALTHY), sync_bound)
    data = json.loads(json.dumps(dump(ctx.profile)))
    again = Profile.from_dict(data)
    assert again.device_trace == replace(
        ctx.profile.device_trace,  # type: ignore[arg-type]
        timeline=tuple(replace(s, gaps=()) for s in ctx.profile.device_trace.timeline),  # type: ignore[union-attr]
    )


class _Profiler:
    def __init__(self, *, cuda: bool, steps: int = PROFILED_STEPS) -> None:
        self.cuda = cuda
        self.steps = steps
        self.calls: list[tuple[str, int]] = []
        self.recorder: Recorder | None = None

    def start(self) -> bool:
        self.calls.append(("start", self._committed()))
        return self.cuda

    def step(self) -> None:
        self.calls.append(("step", self._committed()))

    def stop(self) -> None:
        self.calls.append(("stop", self._committed()))

    def _committed(self) -> int:
        return len(self.recorder.steps) if self.recorder is not None else -1


def _loop(profiler: _Profiler, *, warmup: int, measured: int) -> Recorder:
    ticks = iter(range(0, 10**9, 1000))
    rec = Recorder(
        target_steps=warmup + measured,
        warmup=warmup,
        clock_ns=lambda: next(ticks),
        profiler=profiler,
    )
    profiler.recorder = rec
    for _ in range(warmup + measured + PROFILED_STEPS + 5):
        if rec._done:
            break
        rec.optimizer_begin()
        rec.optimizer_end(step=True)
    return rec


def test_profiled_steps_join_the_warm_up_and_the_measured_steps_stay_as_many() -> None:
    profiler = _Profiler(cuda=True)
    rec = _loop(profiler, warmup=2, measured=4)
    assert rec.warmup == 2 + PROFILED_STEPS and rec.target_steps == 2 + PROFILED_STEPS + 4
    assert len(rec.steps) - rec.warmup == 4
    # started at the first step after the warm-up, a mark per further step, stopped before
    # the first measured step's clock started
    assert profiler.calls == [("start", 2), ("step", 3), ("step", 4), ("stop", 5)]


def test_a_cpu_loop_is_not_profiled_and_nothing_changes() -> None:
    profiler = _Profiler(cuda=False)
    rec = _loop(profiler, warmup=2, measured=4)
    assert rec.warmup == 2 and rec.target_steps == 6 and len(rec.steps) == 6
    assert profiler.calls == [("start", 2)]


SCRIPT = """
import torch
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for _ in range(200):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _child(tmp_path: Path, trace: dict[str, Any] | None) -> Any:
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    env = {"OMP_NUM_THREADS": "1"}
    if trace is not None:
        path = tmp_path / "injected.json"
        path.write_text(json.dumps(trace))
        env[INJECT_ENV] = str(path)
    launcher = Launcher(env=env, stall_s=60, timeout_s=120, telemetry_interval_s=None)
    machine = fake_environment("zen3")
    return run_doctor(
        DoctorPlan(script=script, warmup=2, steps=5, what_if="none"),
        launcher,
        support=machine.precision_support(),
        cores=2,
        memory_bytes=collect_environment().memory_bytes,
    )


def test_end_to_end_the_child_profiles_and_the_parent_names_sync_bound(tmp_path: Path) -> None:
    result = _child(tmp_path, steps(TraceBuilder(), 3, sync_bound).document())
    record = result.profile.device_trace
    assert record is not None and record.status == "injected" and record.usable
    assert record.steps == PROFILED_STEPS and len(record.timeline) == 3
    assert result.profile.warmup == 2 + PROFILED_STEPS and len(result.profile.measured) == 5
    assert result.diagnosis.bottleneck == "sync-bound", result.diagnosis.headline


def test_end_to_end_a_cpu_run_records_no_timeline(tmp_path: Path) -> None:
    result = _child(tmp_path, None)
    record = result.profile.device_trace
    assert record is not None and not record.usable
    assert record.status.startswith("not recorded")
    assert result.profile.warmup == 2 and len(result.profile.measured) == 5
    facts = result.profile.facts
    assert facts is not None and facts.worker_busy_cores is not None  # psutil, no workers
    assert facts.worker_busy_cores < 0.5


def test_a_real_h200_live_run_stored_before_the_change_is_diagnosed_by_the_one_path() -> None:
    """The live doctor run of examples/doctor/gpu/launch_bound.py recorded on an H200
    (tests/data/doctor-h200-runs/README.md), stored with the CUDA-event figures of the old
    second model: read back, diagnosed again from its GPU timeline alone, it is launch-bound,
    as when it was recorded and as the H200 trace of the same loop (archetypes/)."""
    import gzip

    from accelscope.doctor.breakdown import breakdown
    from accelscope.doctor.trace_diagnosis import diagnose_ranks
    from accelscope.hardware.telemetry import Telemetry

    data = Path(__file__).resolve().parents[1] / "data"
    with gzip.open(data / "doctor-h200-runs" / "launch_bound.live.json.gz") as f:
        documents = json.loads(f.read())
    stored = documents["diagnosis"]
    assert "device" in stored["profile"]["steps"][0]  # the old model's figures are there ...
    profile = Profile.from_dict(stored["profile"])  # ... and not read
    ctx = RuleContext(
        profile=profile,
        breakdown=breakdown(profile.measured),
        telemetry=Telemetry.from_dict(documents["telemetry"]),
        support=(),
        cores=16,
        memory_bytes=2**37,
        telemetry_steps_at_s=stored["telemetry_steps_at_s"],
    )
    diagnosis = diagnose(ctx)
    assert diagnosis.timeline is not None and diagnosis.timeline.bottleneck == "launch"
    assert diagnosis.bottleneck == stored["diagnosis"]["bottleneck"] == "overhead-bound"
    (trace,) = diagnose_ranks(
        data / "doctor-h200-traces" / "archetypes" / "launch_bound.json.gz"
    ).ranks
    assert trace.verdict.bottleneck == diagnosis.timeline.bottleneck
