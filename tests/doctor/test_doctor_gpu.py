"""doctor on a GPU, without one: training loops played on a simulated CUDA stream
(:class:`accelscope.testing.cuda_stream.FakeCudaStream`) through the real recorder, which also
records them as torch.profiler would; the parent reads that trace with the code ``doctor
--trace`` uses, and the GPU's own timeline is the one model of GPU time. A GPU-bound loop that
waits in ``loss.item()`` is compute-bound on the device (mixed precision suggested, not "keep
values on device"); an input-starved loop is input-bound with the GPU idle; a launch-bound loop
is overhead-bound; without the timeline nothing stands in for it; the figures match what the
simulated GPU really did.

Covers: accelscope.doctor.verdict, accelscope.doctor.rules, accelscope.doctor.findings,
accelscope.doctor.kineto, accelscope.testing.cuda_stream."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.findings import Finding, RuleContext
from accelscope.doctor.inprocess.recorder import COPY, N_COPY, N_PAGEABLE, N_SYNC, SYNC, Recorder
from accelscope.doctor.kineto import read_live_trace
from accelscope.doctor.profile import (
    DeviceTraceRecord,
    LoaderFacts,
    OpSummary,
    Profile,
    RunFacts,
    Step,
)
from accelscope.doctor.verdict import Diagnosis, diagnose
from accelscope.doctor.whatif import plan_what_ifs
from accelscope.hardware.fastpaths import cpu_support, gpu_support
from accelscope.hardware.gpu import GpuInfo
from accelscope.serialise import dump
from accelscope.testing import fake_cpu
from accelscope.testing.cuda_stream import FakeCudaStream

H100 = GpuInfo(
    index=0, name="NVIDIA H100 80GB HBM3", memory_bytes=80 * 2**30, compute_capability="9.0"
)
SUPPORT = cpu_support(fake_cpu("zen3")) + gpu_support(H100)
WARMUP, STEPS, PROFILED = 2, 8, 3


@dataclass(frozen=True)
class Loop:
    """One training step as the host plays it (seconds)."""

    input_wait_s: float  # blocked in the DataLoader
    kernels_s: tuple[float, ...]  # forward + backward kernels, in order
    python_per_kernel_s: float = 20e-6  # host code between launches
    copies: tuple[tuple[float, bool], ...] = ((50e-6, False),)  # (transfer, blocking)
    readbacks: int = 1  # loss.item() per step
    optimizer_kernels: int = 10
    kernel: str = "volta_sgemm_128x64_nn"  # an fp32 matrix kernel


def _leaf(rec: Recorder, gpu: FakeCudaStream, phase: int, action: object) -> None:
    start = gpu.clock_ns()
    action()  # type: ignore[operator]
    rec.leaf(phase, start, gpu.clock_ns())


def _play(loop: Loop, gpu: FakeCudaStream, rec: Recorder) -> None:
    rec.input_begin()
    gpu.host(loop.input_wait_s, dataloader=True)
    rec.input_end()
    for transfer_s, blocking in loop.copies:
        _leaf(rec, gpu, COPY, lambda t=transfer_s, b=blocking: gpu.copy_to_device(t, blocking=b))
        rec.count(N_COPY)
        if blocking:
            rec.count(N_PAGEABLE)
    half = len(loop.kernels_s) // 3
    rec.forward_begin(True, 64)
    for seconds in loop.kernels_s[:half]:
        gpu.host(loop.python_per_kernel_s)
        gpu.launch(seconds, loop.kernel)
    rec.forward_end(True)
    rec.backward_begin()
    for seconds in loop.kernels_s[half:]:
        gpu.host(loop.python_per_kernel_s)
        gpu.launch(seconds, loop.kernel)
    rec.backward_end()
    rec.optimizer_begin()
    for _ in range(loop.optimizer_kernels):
        gpu.launch(20e-6, "void at::native::multi_tensor_apply_kernel")
    rec.optimizer_end(True)
    for _ in range(loop.readbacks):  # running_loss += loss.item(): lands in the next step
        _leaf(rec, gpu, SYNC, gpu.readback)
        rec.count(N_SYNC)


def _facts(workers: int = 4, pinned: bool = True) -> RunFacts:
    loader = LoaderFacts(
        num_workers=workers,
        pin_memory=pinned,
        batch_size=64,
        persistent_workers=False,
        prefetch_factor=2 if workers else None,
        dataset="Images",
        dataset_len=10_000,
        iterable=False,
    )
    return RunFacts(
        torch="2.x",
        torch_threads=8,
        interop_threads=8,
        loaders=(loader,),
        main_model={"class": "ResNet", "parameter_dtypes": {"float32": 25_000_000}},
        autocast=None,
        cuda_initialized=True,
        optimizer_seen=True,
        backward_seen=True,
    )


def _census(loop: Loop) -> OpSummary:
    """The census of one step: host launch times (the GPU's time comes from its timeline)."""
    ops = len(loop.kernels_s) + loop.optimizer_kernels
    return OpSummary(
        ops=ops,
        forward_ops=len(loop.kernels_s) // 3,
        op_time_s=ops * 30e-6,
        matmul_calls=len(loop.kernels_s) // 2,
        matmul_time_s={"float32": ops * 30e-6 * 0.3},
        matmul_flops={"float32": 4e12},
        devices=("cuda",),
        autocast={"cuda": "off"},
        top_ops=(),
    )


def _device_trace(gpu: FakeCudaStream) -> DeviceTraceRecord:
    """The simulated profiler's trace read as the parent reads the child's
    (:func:`~accelscope.doctor.kineto.read_live_trace`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        path.write_text(json.dumps(gpu.document()))
        raw = read_live_trace(
            {"status": "injected", "path": str(path), "steps": PROFILED, "profiled_s": 0.0}
        )
    return DeviceTraceRecord.from_dict(raw)


def _run(loop: Loop, *, facts: RunFacts | None = None, census: bool = True) -> RuleContext:
    gpu = FakeCudaStream()
    rec = Recorder(clock_ns=gpu.clock_ns, target_steps=WARMUP + STEPS, warmup=WARMUP)
    for index in range(WARMUP + STEPS):
        profiled = WARMUP <= index < WARMUP + PROFILED
        if profiled:
            gpu.step_begin(index - WARMUP)
        _play(loop, gpu, rec)
        if profiled:
            gpu.step_end()
    steps = rec.steps_payload()
    profile = Profile(
        status="done",
        mode=rec.mode,
        warmup=WARMUP,
        target_steps=WARMUP + STEPS,
        steps=tuple(Step.from_dict(s) for s in steps),
        probe=_census(loop) if census else None,
        op_overhead_s=1e-6,
        facts=facts or _facts(),
        device_trace=_device_trace(gpu),
    )
    profile = Profile.from_dict(dump(profile))  # as the parent reads the child's JSON
    return RuleContext(
        profile=profile,
        breakdown=breakdown(profile.measured),
        telemetry=None,
        support=SUPPORT,
        cores=8,
        memory_bytes=64 * 2**30,
    )


def _by_rule(diagnosis: Diagnosis) -> dict[str, Finding]:
    return {f.rule: f for f in diagnosis.findings}


def _true_busy_share(loop: Loop) -> float:
    """What the simulated GPU really did per step, over the step the host saw."""
    gpu = FakeCudaStream()
    rec = Recorder(clock_ns=gpu.clock_ns, target_steps=4, warmup=0)
    for _ in range(4):
        _play(loop, gpu, rec)
    return gpu.busy_ns / gpu.now_ns


# A ResNet-ish step on one GPU: 180 kernels of 0.5 ms (90 ms of GPU work), 5 ms of launches.
HEALTHY = Loop(input_wait_s=0.2e-3, kernels_s=(0.5e-3,) * 180)
# The same model behind a DataLoader with no workers and a slow per-sample transform.
STARVED = Loop(
    input_wait_s=400e-3,
    kernels_s=(0.5e-3,) * 180,
    copies=((2e-3, True),),
)
# A small model at batch 1: 400 kernels of 3 us behind 6 us of Python each.
LAUNCH_BOUND = Loop(input_wait_s=0.0, kernels_s=(3e-6,) * 400, python_per_kernel_s=6e-6)


def test_a_gpu_bound_loop_waiting_in_item_is_compute_bound_on_the_device() -> None:
    ctx = _run(HEALTHY)
    b = ctx.breakdown
    # host wall time alone would call this a synchronisation problem:
    assert b.shares["sync"] > 0.8
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "device-bound"
    assert diagnosis.title == "compute-bound on the device"
    assert diagnosis.timeline is not None and diagnosis.timeline.bottleneck == "compute"
    assert diagnosis.headline == diagnosis.timeline.headline
    # ... but the readback waited for the GPU, so it is not a sync problem
    sync = found["sync-bound"]
    assert sync.status == "clear" and sync.share is not None and sync.share < 0.01
    # the GPU's own work is the step, and it is fp32 matmul: mixed precision fires
    mixed = found["missing-mixed-precision"]
    assert mixed.fired and mixed.share is not None and mixed.share > 0.6
    assert "bf16" in mixed.what_ifs
    assert "GPU's own timeline" in str(mixed.evidence["fp32_matmul_share_basis"])
    assert found["overhead-bound"].status == "clear"
    assert found["device-idle"].status == "clear"
    # the advice that leads is cheaper GPU work, not "keep values on device"
    assert "autocast" in diagnosis.fired[0].advice
    assert all("keep values as tensors" not in f.advice for f in diagnosis.fired)
    # the what-ifs follow the verdict: bf16/fp16 and compile, planned and runnable
    pointed = tuple(w for f in diagnosis.fired for w in f.what_ifs)
    planned = {p.name: p for p in plan_what_ifs("auto", (), ctx, pointed)}
    assert planned["bf16"].spec == {"kind": "autocast", "dtype": "bfloat16"}
    assert planned["compile"].spec is not None
    # the attribution agrees with what the simulated GPU did
    assert diagnosis.timeline.busy_share == pytest.approx(_true_busy_share(HEALTHY), abs=0.01)
    assert diagnosis.timeline.idle_share < 0.01


def test_an_input_starved_loop_is_input_bound_with_the_gpu_idle() -> None:
    ctx = _run(STARVED, facts=_facts(workers=0, pinned=False))
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "input-bound", diagnosis.headline
    timeline = diagnosis.timeline
    assert timeline is not None and timeline.bottleneck == "dataloader"
    # the GPU had nothing queued during the wait: every second of it is idle
    shares = dict(timeline.ranked)
    assert shares["dataloader"] == pytest.approx(400e-3 / timeline.step_s, rel=0.01)
    idle = found["device-idle"]
    assert idle.fired and "behind waiting for the DataLoader" in idle.summary
    assert idle.share is None
    assert "workers" in found["input-bound"].what_ifs
    assert found["device-bound"].status == "clear"
    # the GPU works 90 ms of a ~495 ms step: bf16 would not help
    assert found["missing-mixed-precision"].status == "clear"
    # the blocking pageable copy waited for nothing queued: its own 2 ms
    copies = found["pageable-copies"]
    assert copies.share == pytest.approx(2e-3 / timeline.step_s, rel=0.05)


def test_a_launch_bound_loop_is_overhead_bound_not_device_bound() -> None:
    ctx = _run(LAUNCH_BOUND)
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "overhead-bound", diagnosis.headline
    assert found["device-bound"].status == "clear"
    assert found["overhead-bound"].share is not None and found["overhead-bound"].share > 0.5
    assert found["overhead-bound"].what_ifs == ("batch", "compile")
    assert "CUDA graphs" in found["overhead-bound"].advice
    assert found["missing-mixed-precision"].status == "clear"


def test_a_blocking_copy_that_drains_the_queue_is_device_compute_not_a_copy_problem() -> None:
    # no readback: the next step's pageable .to('cuda') waits for the whole queued step
    loop = replace(HEALTHY, copies=((1e-3, True),), readbacks=0)
    ctx = _run(loop, facts=_facts(pinned=False))
    found = _by_rule(diagnose(ctx))
    assert ctx.breakdown.shares["copy"] > 0.8  # host wall time alone: "pageable copies"
    copies = found["pageable-copies"]
    assert copies.share is not None and copies.share < 0.05
    assert found["device-bound"].fired


def test_on_cuda_the_verdict_is_the_timelines_even_where_host_rules_fire() -> None:
    # 60 us of Python per 50 us kernel: kernels ~71 % of the step (under the 80 % of
    # device-bound), launch gaps ~26 % (reported: over their 25 %; not named: under 40 %)
    loop = Loop(input_wait_s=0.1e-3, kernels_s=(50e-6,) * 180, python_per_kernel_s=60e-6)
    diagnosis = diagnose(_run(loop))
    found = _by_rule(diagnosis)
    timeline = diagnosis.timeline
    assert timeline is not None
    assert diagnosis.bottleneck == "mixed" and timeline.bottleneck == "mixed"
    assert diagnosis.headline.startswith("mixed: no cause holds 40% of the step")
    assert [cause for cause, _ in timeline.reported] == ["launch"]
    assert found["overhead-bound"].fired  # the same cause, at the same threshold
    assert "thread-oversubscription" in [f.rule for f in diagnosis.fired]  # a host finding
    mixed = found["missing-mixed-precision"]
    assert mixed.status == "clear" and "names mixed" in mixed.summary
    # Python 150 us per kernel: the launch gaps hold the step, and are named
    slow = diagnose(_run(replace(loop, python_per_kernel_s=150e-6)))
    assert slow.bottleneck == "overhead-bound" and slow.timeline is not None
    assert slow.timeline.bottleneck == "launch" and slow.title == "overhead-bound"


def test_on_cuda_without_a_timeline_nothing_stands_in_for_it() -> None:
    ctx = _run(HEALTHY)
    status = "not recorded: torch.profiler did not start (CUPTI_ERROR_NOT_INITIALIZED)"
    profile = replace(ctx.profile, device_trace=DeviceTraceRecord(status=status))
    blind = replace(ctx, profile=profile)
    assert blind.device == "cuda" and blind.timeline is None
    diagnosis = diagnose(blind)
    assert diagnosis.bottleneck == "not_diagnosed" and diagnosis.timeline is None
    assert "CUPTI_ERROR_NOT_INITIALIZED" in diagnosis.headline
    found = _by_rule(diagnosis)
    for rule in ("device-bound", "device-idle", "sync-bound", "pageable-copies", "input-bound"):
        assert found[rule].status == "n/a", rule
        assert "CUPTI_ERROR_NOT_INITIALIZED" in found[rule].summary, rule
    # host wall time (the sync phase is 80 % of it) is never read as GPU time
    assert not found["sync-bound"].fired and found["overhead-bound"].status == "n/a"


def on_cpu(
    ctx: RuleContext, status: str | None = "not recorded: the loop did not use CUDA"
) -> RuleContext:
    """``ctx`` as the same loop run on the CPU: CUDA never initialised, the census's operators
    on the CPU, the device trace not recorded (``status``; ``None``: no record at all)."""
    return replace(
        ctx,
        profile=replace(
            ctx.profile,
            facts=replace(_facts(), cuda_initialized=False),
            probe=replace(_census(HEALTHY), devices=("cpu",)),
            device_trace=None if status is None else DeviceTraceRecord(status=status),
        ),
    )


@pytest.mark.parametrize("status", ["not recorded: the loop did not use CUDA", None])
def test_a_cpu_loop_has_no_gpu_verdict(status: str | None) -> None:
    cpu = on_cpu(_run(HEALTHY), status)
    assert cpu.device == "cpu" and cpu.timeline is None
    diagnosis = diagnose(cpu)
    assert diagnosis.timeline is None
    found = _by_rule(diagnosis)
    for rule in ("device-bound", "tensor-cores-idle", "device-idle", "underfilled"):
        assert found[rule].status == "n/a" and found[rule].summary == "the loop ran on the CPU"
    # the host's readbacks are the CPU's own cost there, at the cause table's threshold
    assert found["sync-bound"].fired


def test_a_cpu_loop_in_a_process_that_initialised_cuda_is_diagnosed_on_the_cpu() -> None:
    from accelscope.doctor.kineto import NO_GPU_ACTIVITY

    ctx = _run(HEALTHY)  # CUDA initialised (the facts say so) ...
    cpu = replace(
        ctx,
        profile=replace(
            ctx.profile,
            probe=replace(_census(HEALTHY), devices=("cpu",)),
            device_trace=DeviceTraceRecord(status=NO_GPU_ACTIVITY),  # ... the steps ran on CPU
        ),
    )
    assert cpu.profile.facts is not None and cpu.profile.facts.cuda_initialized
    assert cpu.device == "cpu"
    diagnosis = diagnose(cpu)
    assert diagnosis.bottleneck != "not_diagnosed" and diagnosis.timeline is None
    assert _by_rule(diagnosis)["sync-bound"].fired  # the host's own readbacks, as on a CPU


def test_a_trace_without_gpu_events_is_read_as_no_gpu_activity(tmp_path: Path) -> None:
    from accelscope.doctor.kineto import NO_GPU_ACTIVITY

    gpu = FakeCudaStream()
    gpu.step_begin(0)
    gpu.host(1e-3)
    gpu.step_end()
    path = tmp_path / "cpu-only.json"
    path.write_text(json.dumps(gpu.document()))
    raw = read_live_trace({"status": "recorded", "path": str(path)})
    assert raw["status"] == NO_GPU_ACTIVITY and "timeline" not in raw


def test_a_gzipped_trace_is_read_whatever_its_name(tmp_path: Path) -> None:
    import gzip

    gpu = FakeCudaStream()
    for i in range(3):
        gpu.step_begin(i)
        gpu.launch(1e-3)
        gpu.step_end()
    named_json = tmp_path / "trace.json"  # gzipped, named .json (a copied or renamed trace)
    named_json.write_bytes(gzip.compress(json.dumps(gpu.document()).encode()))
    raw = read_live_trace({"status": "recorded", "path": str(named_json)})
    assert raw["status"] == "recorded" and len(raw["timeline"]) == 3
