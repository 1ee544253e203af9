"""The GPU evidence doctor reads besides the timeline: NVML/GPM activity over the measured steps
(the tensor-cores-idle rule; refused metrics are "not measured", never 0), GPU memory in the
memory rule, the instrumented readbacks and copies, stored documents (old ones still load),
and the terminal and HTML views.

Covers: accelscope.doctor.verdict, accelscope.doctor.profile, accelscope.doctor.rules,
accelscope.doctor.inprocess.instrument, accelscope.doctor.inprocess.gpu_memory,
accelscope.hardware.telemetry, accelscope.commands.doctor.gpu_lines,
accelscope.commands.doctor.view, accelscope.commands.doctor.html."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from test_doctor_gpu import HEALTHY, STARVED, _by_rule, _facts, _run, on_cpu

from accelscope.commands.doctor.gpu_lines import gpu_lines
from accelscope.commands.doctor.html import render_doctor_report
from accelscope.commands.doctor.view import doctor_view
from accelscope.doctor.breakdown import Breakdown
from accelscope.doctor.diagnose import DoctorResult
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.inprocess.gpu_memory import read_gpu_memory
from accelscope.doctor.inprocess.instrument import Instrumentation, _may_move
from accelscope.doctor.inprocess.recorder import N_COPY, N_PAGEABLE, N_SYNC, Recorder
from accelscope.doctor.profile import GpuMemory, Profile
from accelscope.doctor.verdict import diagnose
from accelscope.hardware.telemetry import GpuSample, NvmlSource, Telemetry, TelemetrySample
from accelscope.serialise import dump, load
from accelscope.testing.cuda_stream import FakeTorchCuda
from accelscope.testing.nvml import FakeNvml

GPM_OK = "measured: NVML GPM SM, tensor, graphics-engine and DRAM activity"


def _gpu(sm: float | None, tensor: float | None, dram: float | None = 30.0) -> GpuSample:
    return GpuSample(
        index=0,
        utilisation_percent=100.0,
        memory_used_bytes=20 * 2**30,
        memory_total_bytes=80 * 2**30,
        power_w=650.0,
        sm_clock_mhz=1980.0,
        memory_clock_mhz=None,
        sm_active_percent=sm,
        tensor_active_percent=tensor,
        dram_active_percent=dram,
    )


def _telemetry(gpus: list[tuple[GpuSample, ...]], status: str = GPM_OK) -> Telemetry:
    samples = tuple(
        TelemetrySample(
            t_s=0.1 * (i + 1),
            cpu_percent=(50.0, 50.0),
            iowait_percent=0.0,
            procs_running=1,
            process_rss_bytes=2**30,
            process_cpu_cores=1.0,
            processes=1,
            available_bytes=32 * 2**30,
            swap_used_bytes=0,
            gpus=sample,
        )
        for i, sample in enumerate(gpus)
    )
    return Telemetry(0.1, samples, "measured: NVML, 1 GPU(s)", status)


def _with(ctx: RuleContext, **changes: Any) -> RuleContext:
    return replace(ctx, **changes)


# -- GPU busy, tensor cores idle ---------------------------------------------------------------


def test_busy_gpu_with_idle_tensor_cores_suggests_bf16_with_the_figures() -> None:
    ctx = _run(HEALTHY)
    ctx = _with(ctx, telemetry=_telemetry([(_gpu(92.0, 1.5),)] * 6))
    found = _by_rule(diagnose(ctx))
    idle = found["tensor-cores-idle"]
    assert idle.fired and idle.severity == "high" and idle.share is None
    assert "SMs are active 92 %" in idle.summary and "tensor cores only 1.5 %" in idle.summary
    assert idle.evidence["gpu_sm_active_percent"] == pytest.approx(92.0)
    assert idle.evidence["gpu_tensor_active_percent"] == pytest.approx(1.5)
    assert idle.evidence["gpu_dram_active_percent"] == pytest.approx(30.0)
    assert idle.what_ifs[:2] == ("bf16", "fp16") and "autocast" in idle.advice
    # the device-bound finding quotes the same telemetry
    assert found["device-bound"].evidence["gpu_tensor_active_percent"] == pytest.approx(1.5)


def test_with_autocast_on_an_idle_tensor_core_points_at_fusion() -> None:
    ctx = _run(HEALTHY, facts=replace(_facts(), autocast="torch.bfloat16"))
    ctx = _with(ctx, telemetry=_telemetry([(_gpu(85.0, 4.0, dram=75.0),)] * 4))
    idle = _by_rule(diagnose(ctx))["tensor-cores-idle"]
    assert idle.fired and "autocast is on" in idle.summary
    assert "torch.compile" in idle.advice and "memory bandwidth" in idle.advice
    assert idle.what_ifs == ("compile",)
    bound = _by_rule(diagnose(ctx))["device-bound"]
    assert bound.fired and bound.evidence["gpu_dram_active_percent"] == pytest.approx(75.0)
    assert bound.what_ifs == ("compile",)  # autocast is already on


def test_tensor_rule_clear_when_tensor_cores_work_or_the_gpu_is_not_busy() -> None:
    ctx = _run(HEALTHY)
    working = _by_rule(diagnose(_with(ctx, telemetry=_telemetry([(_gpu(90.0, 45.0),)] * 3))))
    assert working["tensor-cores-idle"].status == "clear"
    quiet = _by_rule(diagnose(_with(ctx, telemetry=_telemetry([(_gpu(20.0, 0.0),)] * 3))))
    assert quiet["tensor-cores-idle"].status == "clear"


def test_a_refused_gpm_metric_is_not_measured_never_zero() -> None:
    nvml = FakeNvml(
        gpus=("NVIDIA H100 80GB HBM3",), refused_metrics={FakeNvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL}
    )
    source = NvmlSource(nvml)
    samples = [source.sample() for _ in range(4)]
    assert all(s[0].tensor_active_percent is None for s in samples)
    ctx = _run(HEALTHY)
    ctx = _with(ctx, telemetry=_telemetry(samples, source.sm_status))
    found = _by_rule(diagnose(ctx))
    rule = found["tensor-cores-idle"]
    assert rule.status == "n/a" and "not measured" in rule.summary
    assert rule.evidence["gpu_tensor_active_percent"].startswith("not measured")
    assert rule.evidence["gpu_sm_active_percent"] == pytest.approx(61.5)
    assert ctx.gpu_activity is not None and ctx.gpu_activity.tensor_active_percent is None


def test_without_gpm_the_rule_says_why() -> None:
    source = NvmlSource(FakeNvml(gpm=False))
    ctx = _run(HEALTHY)
    ctx = _with(ctx, telemetry=_telemetry([source.sample()] * 3, source.sm_status))
    rule = _by_rule(diagnose(ctx))["tensor-cores-idle"]
    assert rule.status == "n/a" and "Hopper" in rule.summary


def test_telemetry_is_averaged_over_the_measured_steps_only() -> None:
    ctx = _run(HEALTHY)
    steps = ctx.profile.steps
    span = steps[-1].start_s + steps[-1].duration_s
    start = ctx.profile.measured[0].start_s
    # 2 s of start-up (idle GPU), then the steps, then 1 s of writing results
    idle, busy = (_gpu(0.0, 0.0),), (_gpu(95.0, 2.0),)
    count = round((2.0 + span + 1.0) / 0.1)
    gpus = [busy if 2.0 + start <= 0.1 * (i + 1) <= 2.0 + span else idle for i in range(count)]
    telemetry = _telemetry(gpus)
    aligned = _with(ctx, telemetry=telemetry, telemetry_steps_at_s=2.0)
    assert aligned.gpu_activity is not None
    assert aligned.gpu_activity.sm_active_percent == pytest.approx(95.0)
    assert "measured steps" in aligned.gpu_activity.window
    unaligned = _with(ctx, telemetry=telemetry)
    assert unaligned.gpu_activity is not None
    assert unaligned.gpu_activity.sm_active_percent is not None
    assert unaligned.gpu_activity.sm_active_percent < 50.0  # diluted, and labelled so
    assert "whole run" in unaligned.gpu_activity.window
    short = _with(ctx, telemetry=telemetry, telemetry_steps_at_s=2.0 + span + 5.0)
    assert short.gpu_activity is not None and short.gpu_activity.sm_active_percent is None
    assert "under 2 telemetry samples" in short.gpu_activity.missing["sm_active_percent"]


def test_the_busiest_gpu_is_the_loops() -> None:
    other = replace(_gpu(3.0, 0.0), index=1)
    ctx = _run(HEALTHY)
    ctx = _with(ctx, telemetry=_telemetry([(other, _gpu(90.0, 1.0))] * 3))
    assert ctx.gpu_activity is not None
    assert ctx.gpu_activity.gpu.startswith("GPU 0") and "busiest of 2" in ctx.gpu_activity.gpu
    instance = replace(_gpu(70.0, 20.0), gpu_instance_id=1, mig_profile="3g.40gb")
    mig = _with(ctx, telemetry=_telemetry([(instance,)] * 3))
    assert mig.gpu_activity is not None
    assert mig.gpu_activity.gpu == "GPU 0 MIG instance 1 (3g.40gb)"


# -- GPU memory ---------------------------------------------------------------------------------


def _memory(**changes: Any) -> GpuMemory:
    base = GpuMemory(
        device="cuda:0 NVIDIA H100 80GB HBM3",
        allocated_peak_bytes=12 * 2**30,
        reserved_peak_bytes=14 * 2**30,
        total_bytes=80 * 2**30,
        alloc_retries=0,
        ooms=0,
    )
    return replace(base, **changes)


def _memory_finding(memory: GpuMemory | None, status: str = "") -> Any:
    ctx = _run(HEALTHY)
    profile = replace(ctx.profile, gpu_memory=memory, gpu_memory_status=status or "measured")
    return _by_rule(diagnose(_with(ctx, profile=profile)))["memory-pressure"]


def test_gpu_memory_in_the_memory_rule() -> None:
    clear = _memory_finding(_memory())
    assert (
        clear.status == "clear"
        and "12.0 GiB allocated / 14.0 GiB reserved of 80 GiB" in clear.summary
    )
    assert clear.evidence["gpu_reserved_peak_bytes"] == 14 * 2**30
    assert clear.evidence["host_memory"].startswith("not measured")
    full = _memory_finding(_memory(reserved_peak_bytes=76 * 2**30, allocated_peak_bytes=70 * 2**30))
    assert full.fired and full.severity == "medium" and "95% of 80 GiB reserved" in full.summary
    assert "activation checkpointing" in full.advice
    retried = _memory_finding(_memory(reserved_peak_bytes=60 * 2**30, alloc_retries=7))
    assert retried.fired and retried.severity == "high" and "retry 7 time(s)" in retried.summary
    assert "expandable_segments" in retried.advice
    missing = _memory_finding(None, "not measured: reading torch.cuda memory statistics failed: x")
    assert missing.status == "n/a" and "failed: x" in missing.summary


def test_gpu_memory_is_read_in_the_loops_process() -> None:
    record, status = read_gpu_memory(FakeTorchCuda(alloc_retries=2))
    assert status.startswith("measured") and record is not None
    memory = load(GpuMemory, record)
    assert memory.reserved_peak_bytes == 14 * 2**30 and memory.alloc_retries == 2
    assert memory.device == "cuda:0 NVIDIA H100 80GB HBM3"
    assert read_gpu_memory(FakeTorchCuda(initialized=False)) == (
        None,
        "not measured: the loop did not use CUDA",
    )
    record, status = read_gpu_memory(FakeTorchCuda(fail="CUDA error: an illegal memory access"))
    assert record is None and status.endswith("an illegal memory access")


# -- the instrumented calls ----------------------------------------------------------------------


class _DeviceTensor:
    is_cuda, is_cpu = True, False
    device = SimpleNamespace(type="cuda")

    def item(self) -> float:
        return 1.0

    def to(self, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("device", "cuda")
        return self if target == "cuda" else SimpleNamespace(device=SimpleNamespace(type=target))


class _HostTensor:
    is_cuda, is_cpu, nbytes = False, True, 64

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def is_pinned(self) -> bool:
        return False

    def item(self) -> float:
        return 2.0

    def to(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        target = args[0] if args else kwargs.get("device", "cpu")
        return SimpleNamespace(device=SimpleNamespace(type="cuda")) if target == "cuda" else self


def test_readbacks_and_copies_are_host_spans_and_counts_only() -> None:
    import torch

    ticks = iter(range(0, 10**9, 1000))
    rec = Recorder(clock_ns=lambda: next(ticks))
    inst = Instrumentation(rec)
    inst._wrap_sync(_DeviceTensor, "item")
    inst._wrap_sync(_HostTensor, "item")
    inst._wrap_copy(_HostTensor, "to")
    inst._wrap_copy(_DeviceTensor, "to")
    try:
        _DeviceTensor().to("cpu")  # a readback
        _DeviceTensor().to("cpu", non_blocking=True)  # the host does not wait: not one
        _DeviceTensor().to("cuda")  # stays on the device: dropped
        assert _DeviceTensor().item() == 1.0
        assert _HostTensor().item() == 2.0
        _HostTensor().to("cuda")
        _HostTensor().to("cpu")  # not a copy to the device
        _HostTensor().to(torch.float16)  # a dtype conversion
        with pytest.raises(RuntimeError):
            _HostTensor(fail=True).to("cuda")
    finally:
        inst.uninstall()
    # readbacks counted as syncs, copies to the device as copies (pageable), nothing else
    assert rec._cnt[N_SYNC] == 3 and rec._cnt[N_COPY] == 1 and rec._cnt[N_PAGEABLE] == 1
    assert _may_move(("cuda",), {}) and _may_move((), {"device": "cuda"})
    assert not _may_move((torch.float16,), {}) and not _may_move((), {"dtype": torch.float16})


# -- documents and views ---------------------------------------------------------------------


def test_gpu_figures_survive_the_documents_and_old_documents_still_load() -> None:
    ctx = _run(HEALTHY)
    profile = replace(ctx.profile, gpu_memory=_memory(), first_step_monotonic_s=12.5)
    assert Profile.from_dict(dump(profile)) == profile
    b = ctx.breakdown
    assert Breakdown.from_dict(dump(b)) == b
    # documents stored before 2026-11-29 held a second model of GPU time (CUDA events per
    # step and per census operator): they still load, and it is not read
    old = dump(b) | {"device_idle_share": 0.25, "device_step_mean_s": 0.08, "device": None}
    assert Breakdown.from_dict(old) == b
    data = dump(profile)
    data["steps"] = [s | {"device": {"device_s": 0.1, "idle_s": 0.0}} for s in data["steps"]]
    data["probe"] |= {"op_device_s": 0.09, "matmul_device_s": {"float32": 0.07}}
    data["device_status"] = "measured: CUDA events per step"
    assert Profile.from_dict(data) == profile
    # a device trace stored before its gate was kept: the steps it held were the steady ones
    trace = dict(data["device_trace"])
    del trace["gate"]
    record = Profile.from_dict({**data, "device_trace": trace}).device_trace
    assert record is not None and record.timeline == profile.device_trace.timeline  # type: ignore[union-attr]
    assert record.quality_gate.steady == tuple(s.index for s in record.timeline)


def _result(ctx: RuleContext) -> DoctorResult:
    return DoctorResult(
        script="train.py",
        args=(),
        profile=ctx.profile,
        telemetry=ctx.telemetry,
        diagnosis=diagnose(ctx),
        telemetry_steps_at_s=ctx.telemetry_steps_at_s,
    )


def test_views_show_the_gpu_side() -> None:
    from rich.console import Console

    ctx = _run(HEALTHY)
    profile = replace(ctx.profile, gpu_memory=_memory())
    ctx = _with(ctx, profile=profile, telemetry=_telemetry([(_gpu(92.0, 1.5),)] * 5))
    result = _result(ctx)
    again = DoctorResult.from_documents(*result.documents().values())  # type: ignore[arg-type]
    assert again.diagnosis.timeline == result.diagnosis.timeline  # stored, not drawn again
    lines = gpu_lines(again)
    assert "tensor cores 2 %" in lines[0] and "SM active 92 %" in lines[0]
    assert lines[1].startswith("GPU's own timeline (torch.profiler, 3 steps after the warm-up")
    assert "names compute" in lines[1]
    assert lines[2].startswith("GPU memory (cuda:0 NVIDIA H100 80GB HBM3)")
    console = Console(width=200, record=True)
    console.print(doctor_view(again, title="train.py"))
    text = console.export_text()
    assert "compute-bound on the device" in text and "GPU memory" in text
    assert "CUDA events" not in text
    html = render_doctor_report(again, None)
    assert "GPU&#39;s own timeline" in html or "GPU's own timeline" in html
    assert "tensor-cores-idle" in html and "CUDA events" not in html
    assert "GPU0 SM active %" in html and "GPU0 tensor active %" in html
    starved = _run(STARVED, facts=_facts(workers=0, pinned=False))
    assert "names dataloader" in gpu_lines(_result(starved))[0]


def test_the_session_payload_carries_no_second_model_of_gpu_time() -> None:
    from accelscope.doctor.inprocess.session import Session

    session = Session(warmup=0, steps=0, full=False, probe=False, manual=True)
    for _ in range(3):
        session.recorder.manual_step()
    payload = session.payload("ended", 0)
    assert "device_status" not in payload
    assert all("device" not in step for step in payload["steps"])
    profile = Profile.from_dict(payload)
    assert profile.first_step_monotonic_s is not None and profile.device_trace is None
    assert profile.gpu_memory is None and profile.gpu_memory_status.startswith("not measured")


def test_a_cpu_runs_report_says_no_gpu_timeline_was_recorded() -> None:
    cpu = on_cpu(_run(HEALTHY))
    result = _result(cpu)
    assert gpu_lines(result) == []
    html = render_doctor_report(result, None)
    assert "GPU timeline: not recorded: the loop did not use CUDA" in html
    bare = _result(on_cpu(_run(HEALTHY), None))
    assert "GPU timeline: not recorded" in render_doctor_report(bare, None)
