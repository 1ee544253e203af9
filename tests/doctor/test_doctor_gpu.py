"""doctor on a GPU, without one: training loops played on a simulated CUDA stream
(:class:`accelscope.testing.cuda_stream.FakeCudaStream`) through the real recorder and CUDA
timeline, then diagnosed. A GPU-bound loop that waits in ``loss.item()`` is compute-bound on the
device (mixed precision suggested, not "keep values on device"); an input-starved loop is
input-bound with the GPU idle; a launch-bound loop is overhead-bound; the figures match what
the simulated GPU really did."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.findings import Finding, RuleContext
from accelscope.doctor.gpu import WORK_BOUND, gpu_pace
from accelscope.doctor.inprocess.device import MAX_PAIRS_PER_STEP, CudaTimeline
from accelscope.doctor.inprocess.recorder import COPY, N_COPY, N_PAGEABLE, N_SYNC, SYNC, Recorder
from accelscope.doctor.profile import LoaderFacts, OpSummary, Profile, RunFacts, Step
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
WARMUP, STEPS = 2, 8


@dataclass(frozen=True)
class Loop:
    """One training step as the host plays it (seconds)."""

    input_wait_s: float  # blocked in the DataLoader
    kernels_s: tuple[float, ...]  # forward + backward kernels, in order
    python_per_kernel_s: float = 20e-6  # host code between launches
    copies: tuple[tuple[float, bool], ...] = ((50e-6, False),)  # (transfer, blocking)
    readbacks: int = 1  # loss.item() per step
    optimizer_kernels: int = 10


def _wait(rec: Recorder, gpu: FakeCudaStream, phase: int, action: object) -> None:
    rec.wait_begin()
    start = gpu.clock_ns()
    action()  # type: ignore[operator]
    rec.wait_end(phase, start, gpu.clock_ns())


def _play(loop: Loop, gpu: FakeCudaStream, rec: Recorder) -> None:
    rec.input_begin()
    gpu.host(loop.input_wait_s)
    rec.input_end()
    for transfer_s, blocking in loop.copies:
        _wait(rec, gpu, COPY, lambda t=transfer_s, b=blocking: gpu.copy_to_device(t, blocking=b))
        rec.count(N_COPY)
        if blocking:
            rec.count(N_PAGEABLE)
    half = len(loop.kernels_s) // 3
    rec.forward_begin(True, 64)
    for seconds in loop.kernels_s[:half]:
        gpu.host(loop.python_per_kernel_s)
        gpu.launch(seconds)
    rec.forward_end(True)
    rec.backward_begin()
    for seconds in loop.kernels_s[half:]:
        gpu.host(loop.python_per_kernel_s)
        gpu.launch(seconds)
    rec.backward_end()
    rec.optimizer_begin()
    for _ in range(loop.optimizer_kernels):
        gpu.launch(20e-6)
    rec.optimizer_end(True)
    for _ in range(loop.readbacks):  # running_loss += loss.item(): lands in the next step
        _wait(rec, gpu, SYNC, gpu.readback)
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


def _census(loop: Loop, fp32_matmul_fraction: float, measured: bool = True) -> OpSummary:
    """The census of one step: host launch times, and the GPU time each operator took."""
    gpu_s = sum(loop.kernels_s) + loop.optimizer_kernels * 20e-6
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
        op_device_s=gpu_s if measured else None,
        matmul_device_s={"float32": gpu_s * fp32_matmul_fraction} if measured else {},
        device_ops=ops if measured else 0,
        device_status="measured: CUDA events around each of the census step's operators"
        if measured
        else "not measured: reading CUDA events failed: boom",
    )


def _run(
    loop: Loop,
    *,
    fp32_matmul_fraction: float = 0.75,
    facts: RunFacts | None = None,
    census: bool = True,
) -> RuleContext:
    gpu = FakeCudaStream()
    timeline = CudaTimeline(gpu.event, gpu.in_use, gpu.synchronize)
    rec = Recorder(
        clock_ns=gpu.clock_ns, device=timeline, target_steps=WARMUP + STEPS, warmup=WARMUP
    )
    for _ in range(WARMUP + STEPS):
        _play(loop, gpu, rec)
    steps = rec.steps_payload()
    for step, device in zip(steps, timeline.collect(len(steps)), strict=True):
        step["device"] = device
    profile = Profile(
        status="done",
        mode=rec.mode,
        warmup=WARMUP,
        target_steps=WARMUP + STEPS,
        steps=tuple(Step.from_dict(s) for s in steps),
        probe=_census(loop, fp32_matmul_fraction) if census else None,
        op_overhead_s=1e-6,
        device_status="measured: CUDA events per step",
        facts=facts or _facts(),
    )
    profile = Profile.from_dict(dump(profile))  # as the parent reads the child's JSON
    ctx = RuleContext(
        profile=profile,
        breakdown=breakdown(profile.measured),
        telemetry=None,
        support=SUPPORT,
        cores=8,
        memory_bytes=64 * 2**30,
    )
    return ctx


def _by_rule(diagnosis: Diagnosis) -> dict[str, Finding]:
    return {f.rule: f for f in diagnosis.findings}


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
    assert "GPU compute, not a synchronisation cost" in diagnosis.headline
    # ... but the readback waited for the GPU, so it is not a sync problem
    sync = found["sync-bound"]
    assert sync.status == "clear" and sync.share is not None and sync.share < 0.01
    assert sync.evidence["sync_waiting_for_gpu_work_share"] == pytest.approx(
        b.shares["sync"], abs=0.01
    )
    # the GPU's own work is the step, and most of it is fp32 matmul: mixed precision fires
    mixed = found["missing-mixed-precision"]
    assert mixed.fired and mixed.share is not None and mixed.share > 0.6
    assert "bf16" in mixed.what_ifs
    assert "measured: GPU time" in str(mixed.evidence["fp32_matmul_share_basis"])
    assert found["overhead-bound"].status == "clear"
    assert "GPU sets the pace" in found["overhead-bound"].summary
    assert found["device-idle"].status == "clear"
    # the advice that leads is cheaper GPU work, not "keep values on device"
    assert "autocast" in diagnosis.fired[0].advice
    assert all("Keep per-step values on the device" not in f.advice for f in diagnosis.fired)
    # the what-ifs follow the verdict: bf16/fp16 and compile, planned and runnable
    pointed = tuple(w for f in diagnosis.fired for w in f.what_ifs)
    planned = {p.name: p for p in plan_what_ifs("auto", (), ctx, pointed)}
    assert planned["bf16"].spec == {"kind": "autocast", "dtype": "bfloat16"}
    assert planned["compile"].spec is not None
    # the attribution agrees with what the simulated GPU did
    pace = ctx.pace
    assert pace is not None and pace.bound
    true_busy_share = (sum(HEALTHY.kernels_s) + 10 * 20e-6) / b.step_mean_s
    assert pace.work_share == pytest.approx(true_busy_share, rel=0.01)
    assert pace.idle_share < 0.01


def test_an_input_starved_loop_is_input_bound_with_the_gpu_idle() -> None:
    ctx = _run(STARVED, facts=_facts(workers=0, pinned=False))
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "input-bound"
    pace = ctx.pace
    assert pace is not None and not pace.bound
    # the GPU had nothing queued during the wait: every second of it is idle
    step_s = ctx.breakdown.step_mean_s
    assert pace.input_idle_share == pytest.approx(400e-3 / step_s, rel=0.01)
    idle = found["device-idle"]
    assert idle.fired and "behind input" in idle.summary and idle.share is None
    assert "workers" in found["input-bound"].what_ifs
    assert found["device-bound"].status == "clear"
    # the GPU works 90 ms of a ~495 ms step: bf16 would not help much here
    assert found["missing-mixed-precision"].status == "clear"
    # the blocking pageable copy waited for the previous readback's drained queue: its own cost
    copies = found["pageable-copies"]
    assert copies.evidence["copy_waiting_for_gpu_work_share"] == pytest.approx(0.0, abs=1e-3)


def test_a_launch_bound_loop_is_overhead_bound_not_device_bound() -> None:
    ctx = _run(LAUNCH_BOUND, fp32_matmul_fraction=0.5)
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    assert diagnosis.bottleneck == "overhead-bound"
    assert found["device-bound"].status == "clear"
    pace = ctx.pace
    assert pace is not None and pace.work_share is not None and pace.work_share < 0.5
    # the GPU idles between kernels: not seen by events, inferred from its measured work
    assert pace.unseen_share is not None and pace.unseen_share > 0.5
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
    assert "blocking host->device copies" in found["device-bound"].summary


def test_without_gpu_operator_times_the_share_is_estimated_from_the_pace() -> None:
    ctx = _run(HEALTHY, census=False)
    ctx = replace(ctx, profile=replace(ctx.profile, probe=_census(HEALTHY, 0.75, measured=False)))
    found = _by_rule(diagnose(ctx))
    mixed = found["missing-mixed-precision"]
    assert str(mixed.evidence["fp32_matmul_share_basis"]).startswith("estimated")
    assert "reading CUDA events failed: boom" in str(mixed.evidence["fp32_matmul_share_basis"])
    pace = ctx.pace
    assert pace is not None and pace.work_share is None and pace.bound  # from the waits alone
    assert found["device-bound"].fired


def test_a_cpu_loop_has_no_device_figures() -> None:
    steps = [
        Step(
            start_s=0.0,
            duration_s=0.01,
            phases_s={
                "input": 0.0,
                "copy": 0.0,
                "forward": 0.005,
                "backward": 0.004,
                "optimizer": 0.0,
                "sync": 0.0,
            },
            counts={"syncs": 0, "items": 8},
        )
    ] * 3
    b = breakdown(steps)
    assert b.device is None and gpu_pace(b, None) is None


def test_the_timeline_brackets_only_outermost_calls_and_caps_them_per_step() -> None:
    gpu = FakeCudaStream()
    timeline = CudaTimeline(gpu.event, gpu.in_use, gpu.synchronize)
    timeline.boundary(0)
    gpu.launch(5e-3)
    timeline.wait_begin()  # .tolist() that calls .item() inside: one bracket
    timeline.wait_begin()
    start = gpu.now_ns
    gpu.readback()
    timeline.wait_end("sync", 0.0)
    timeline.wait_end("sync", (gpu.now_ns - start) / 1e9)
    timeline.wait_begin()
    timeline.wait_cancel()  # a CPU->CPU .to(): forgotten
    for _ in range(MAX_PAIRS_PER_STEP + 5):
        timeline.wait_begin()
        timeline.wait_end("copy", 1e-6)
    timeline.boundary(1)
    (record,) = timeline.collect(1)
    assert record is not None
    # the kernel ran from 10 us to 5010 us; the readback started at 12 us: it waited 4998 us
    # for the kernel, then ~20 us for its own copy and the wake-up (an event record's 2 us more)
    assert record["sync_wait_s"] == pytest.approx(4998e-6, abs=3e-6)
    assert record["sync_idle_s"] == pytest.approx(19e-6, abs=3e-6)
    assert record["copy_wait_s"] + record["copy_idle_s"] == pytest.approx(
        (MAX_PAIRS_PER_STEP - 1) * 1e-6
    )
    assert gpu.synchronized == 1


def test_a_host_paced_loop_is_named_so_when_no_rule_fires() -> None:
    # 60 us of Python per 50 us kernel: the GPU works ~70 % of the step but never sets the pace
    loop = Loop(input_wait_s=0.1e-3, kernels_s=(50e-6,) * 180, python_per_kernel_s=60e-6)
    ctx = _run(loop)
    diagnosis = diagnose(ctx)
    found = _by_rule(diagnosis)
    pace = ctx.pace
    assert pace is not None and not pace.bound and pace.work_share is not None
    assert 0.3 < pace.work_share < WORK_BOUND
    mixed = found["missing-mixed-precision"]
    assert mixed.status == "clear" and "the host sets the pace" in mixed.summary
    assert mixed.share is not None and mixed.share >= 0.3  # at stake only if the GPU led
    assert [f.rule for f in diagnosis.fired] == ["thread-oversubscription"]
    assert "host sets the pace" not in diagnosis.headline  # oversubscription leads here
    quiet = replace(ctx, profile=replace(ctx.profile, facts=replace(_facts(), torch_threads=2)))
    diagnosis = diagnose(quiet)
    assert diagnosis.bottleneck == "host" and diagnosis.title == "host-paced"
    assert "the GPU's operators take" in diagnosis.headline


def test_on_cuda_without_a_timeline_the_rules_say_what_was_not_split() -> None:
    ctx = _run(HEALTHY)
    steps = tuple(replace(s, device=None) for s in ctx.profile.steps)
    status = "not available: reading CUDA events failed: an illegal memory access"
    profile = replace(ctx.profile, steps=steps, device_status=status)
    blind = replace(ctx, profile=profile, breakdown=breakdown(profile.measured))
    assert blind.device == "cuda" and blind.pace is None
    found = _by_rule(diagnose(blind))
    assert (
        found["device-bound"].status == "n/a"
        and "illegal memory access" in found["device-bound"].summary
    )
    assert found["device-idle"].status == "n/a"
    assert found["tensor-cores-idle"].status == "n/a"
    sync = found["sync-bound"]  # host wall time, as without a GPU, and said so
    assert sync.fired and "illegal memory access" in str(sync.evidence["sync_split"])
    assert "copy_split" in found["pageable-copies"].evidence


def test_gpu_rules_are_not_applicable_on_the_cpu() -> None:
    ctx = _run(HEALTHY)
    cpu = replace(
        ctx,
        profile=replace(
            ctx.profile,
            facts=replace(_facts(), cuda_initialized=False),
            probe=replace(_census(HEALTHY, 0.75), devices=("cpu",)),
        ),
    )
    assert cpu.device == "cpu"
    found = _by_rule(diagnose(cpu))
    for rule in ("device-bound", "tensor-cores-idle"):
        assert found[rule].status == "n/a" and found[rule].summary == "the loop ran on the CPU"
