"""The device timeline (doctor/device_timeline.py) and the Kineto reader (doctor/kineto.py) on
hand-made torch.profiler traces of loop archetypes, written by code here: the same event shapes
a real ``export_chrome_trace`` has (``ph`` X, µs, ``cat`` kernel / gpu_memcpy / cuda_runtime /
cpu_op / user_annotation, ``args.correlation``), so the format, the attribution and the verdict
are tested without a GPU. test_trace_mode.py imports the builders for the CLI tests."""

from __future__ import annotations

import math
from typing import Any

import pytest

from accelscope.doctor.device_timeline import (
    CONSISTENCY_TOLERANCE,
    DeviceInterval,
    HostSpan,
    StepTimeline,
    StepWindow,
    SuppliedFigure,
    check_figure,
    kernel_class,
    kernel_precision,
    step_timeline,
    timeline_verdict,
)
from accelscope.doctor.kineto import KinetoTrace, parse_trace
from accelscope.errors import BadInputError

STEP_US = 10_000.0
HOST_PID, HOST_TID, GPU_PID = 1234, 1234, 0


class TraceBuilder:
    """Append events; ``document()`` gives the trace dict."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.correlation = 1

    def _x(self, cat: str, name: str, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
        event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
        event.update(kw)
        self.events.append(event)
        return event

    def step(self, index: int, ts: float, dur: float = STEP_US) -> None:
        self._x("user_annotation", f"ProfilerStep#{index}", ts, dur, pid=HOST_PID, tid=HOST_TID)

    def annotation(self, name: str, ts: float, dur: float) -> None:
        self._x("user_annotation", name, ts, dur, pid=HOST_PID, tid=HOST_TID)

    def cpu_op(self, name: str, ts: float, dur: float) -> None:
        self._x("cpu_op", name, ts, dur, pid=HOST_PID, tid=HOST_TID)

    def runtime(self, name: str, ts: float, dur: float, correlation: int | None = None) -> None:
        args = {} if correlation is None else {"correlation": correlation}
        self._x("cuda_runtime", name, ts, dur, pid=HOST_PID, tid=HOST_TID, args=args)

    def kernel(self, ts: float, dur: float, stream: int = 7, name: str = "void gemm") -> None:
        c = self.correlation
        self.correlation += 1
        self.runtime("cudaLaunchKernel", ts - 5, 4, c)
        args = {"device": 0, "stream": stream, "correlation": c}
        self._x("kernel", name, ts, dur, pid=GPU_PID, tid=stream, args=args)

    def memcpy(self, ts: float, dur: float, name: str, *, launch_at: float | None = None) -> int:
        c = self.correlation
        self.correlation += 1
        start = ts - 5 if launch_at is None else launch_at
        self.runtime("cudaMemcpyAsync", start, ts + dur - start, c)
        args = {"device": 0, "stream": 7, "correlation": c, "bytes": 1 << 20}
        self._x("gpu_memcpy", name, ts, dur, pid=GPU_PID, tid=7, args=args)
        return c

    def document(self) -> dict[str, Any]:
        meta = [
            {"ph": "M", "name": "process_name", "pid": GPU_PID, "args": {"name": "GPU 0"}},
            {
                "ph": "X",
                "cat": "overhead",
                "name": "Activity Buffer Request",
                "pid": -1,
                "tid": 0,
                "ts": 0.0,
                "dur": 1e9,
            },
        ]
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9}],
            "displayTimeUnit": "ms",
            "traceEvents": meta + self.events,
        }


def steps(builder: TraceBuilder, n: int, body: Any, *, annotate: bool = True) -> TraceBuilder:
    for i in range(n):
        t0 = 1_000_000.0 + i * STEP_US
        if annotate:
            builder.step(i, t0)
        body(builder, t0)
    return builder


def sync_bound(b: TraceBuilder, t0: float) -> None:
    """~50 readbacks per step: a 20 µs kernel, then .item() waits and Python runs."""
    for k in range(50):
        t = t0 + k * 200.0 + 10
        b.kernel(t, 20)
        b.cpu_op("aten::item", t + 20, 170)
        b.cpu_op("aten::_local_scalar_dense", t + 22, 160)
        b.runtime("cudaStreamSynchronize", t + 30, 140)


def pageable(b: TraceBuilder, t0: float) -> None:
    """A 7.8 ms pageable HtoD copy (78 % of the step), then 1 ms of kernels."""
    b.cpu_op("aten::copy_", t0 + 50, 7_900)
    b.memcpy(t0 + 100, 7_800, "Memcpy HtoD (Pageable -> Device)", launch_at=t0 + 60)
    b.kernel(t0 + 8_000, 1_000)


def input_bound(b: TraceBuilder, t0: float) -> None:
    """6 ms in the DataLoader's __next__, then 3 ms of kernels."""
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 10, 6_000)
    b.memcpy(t0 + 6_050, 50, "Memcpy HtoD (Pinned -> Device)")
    b.kernel(t0 + 6_200, 3_000)


def launch_bound(b: TraceBuilder, t0: float) -> None:
    """100 kernels of 10 µs, each gap spent launching the next."""
    for k in range(100):
        t = t0 + k * 100.0 + 5
        b.kernel(t, 10, name="void elementwise")
        b.runtime("cudaLaunchKernel", t + 10, 85)


def device_bound(b: TraceBuilder, t0: float) -> None:
    """Kernels 95 % of the step."""
    b.kernel(t0 + 100, 4_700)
    b.kernel(t0 + 4_850, 4_800)


def covered(b: TraceBuilder, t0: float) -> None:
    """Tiny kernels back to back: they cover the step (SM activity decides)."""
    for k in range(200):
        b.kernel(t0 + k * 50.0, 50, name="void tiny")


def mixed(b: TraceBuilder, t0: float) -> None:
    """DataLoader 35 %, readbacks 35 %, kernels 30 %."""
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 3_500)
    b.kernel(t0 + 3_500, 3_000)
    b.cpu_op("aten::item", t0 + 6_500, 3_500)


def two_streams(b: TraceBuilder, t0: float) -> None:
    """Overlapping kernels on two streams: busy is their union (90 %), not their sum (120 %)."""
    b.kernel(t0, 6_000, stream=7)
    b.kernel(t0 + 3_000, 6_000, stream=8)


def memory_bound(b: TraceBuilder, t0: float) -> None:
    """Layer norm, GELU, softmax, reductions back to back (85 %), thin sgemms between (10 %)."""
    names = [
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int>",
    ]
    t = t0 + 100
    for k in range(17):
        b.kernel(t, 500, name=names[k % len(names)])
        t += 500
    b.kernel(t, 1_000, name="ampere_sgemm_128x64_nn")


def tensor_core_bf16(b: TraceBuilder, t0: float) -> None:
    """bf16 tensor-core GEMMs 95 % of the step."""
    b.kernel(t0 + 100, 4_700, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128")
    b.kernel(t0 + 4_850, 4_800, name="nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN")


def fp32_matmul(b: TraceBuilder, t0: float) -> None:
    """IEEE fp32 GEMMs (CUDA cores) 95 % of the step."""
    b.kernel(t0 + 100, 4_700, name="ampere_sgemm_128x64_nn")
    b.kernel(t0 + 4_850, 4_800, name="cutlass_80_simt_sgemm_256x128_8x4_nn_align1")


def host_preprocessing(b: TraceBuilder, t0: float) -> None:
    """7 ms of CPU operators on host tensors (crop, flip, normalise, stack; no CUDA call),
    then the copy and 2 ms of kernels."""
    t = t0 + 10
    for _ in range(20):
        b.cpu_op("aten::slice", t, 10)
        b.cpu_op("aten::div", t + 10, 150)
        b.cpu_op("aten::flip", t + 160, 100)
        b.cpu_op("aten::sub", t + 260, 90)
        t += 350
    b.cpu_op("aten::stack", t, 50)
    b.cpu_op("aten::cat", t + 5, 40)
    b.cpu_op("aten::copy_", t + 60, 300)
    b.memcpy(t + 100, 250, "Memcpy HtoD (Pageable -> Device)", launch_at=t + 70)
    b.kernel(t + 500, 2_000, name="sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc")


def _trace(body: Any, n: int = 3, *, annotate: bool = True) -> KinetoTrace:
    return parse_trace(steps(TraceBuilder(), n, body, annotate=annotate).document())


def _verdict(body: Any, **kw: Any) -> Any:
    trace = _trace(body)
    return trace, timeline_verdict(trace.timelines(), **kw)


def _assert_partition(trace: KinetoTrace) -> None:
    for s in trace.timelines():
        assert math.isclose(sum(s.by_cause.values()), s.step_us, rel_tol=1e-9)
        assert all(0.0 <= v <= 1.0 for v in s.shares.values())
        for us in (s.compute_busy_us, s.copy_busy_us, s.busy_us, s.idle_us):
            assert 0.0 <= us <= s.step_us


ARCHETYPES = [
    sync_bound,
    pageable,
    input_bound,
    launch_bound,
    device_bound,
    covered,
    mixed,
    memory_bound,
    tensor_core_bf16,
    fp32_matmul,
    host_preprocessing,
]


@pytest.mark.parametrize("body", ARCHETYPES, ids=lambda f: f.__name__)
def test_every_share_is_a_part_of_its_step(body: Any) -> None:
    trace = _trace(body)
    assert trace.step_source == "ProfilerStep" and len(trace.steps) == 3
    assert all(math.isclose(w.end_us - w.start_us, STEP_US) for w in trace.steps)
    _assert_partition(trace)


def test_sync_bound_readbacks_named_not_compute() -> None:
    trace, v = _verdict(sync_bound, sm_active=0.01, nvml_utilisation=0.09)
    assert v.bottleneck == "sync"
    assert v.compute_share == pytest.approx(0.10, abs=0.01)
    assert dict(v.ranked)["sync"] > 0.8
    assert "read them every N steps" in v.advice and "bf16" not in v.advice
    step = trace.timelines()[0]
    assert len(step.gaps) >= 50 and {g.cause for g in step.gaps[1:-1]} == {"sync"}


def test_the_182_percent_figure_is_inconsistent_and_never_drives_the_verdict() -> None:
    trace, _ = _verdict(sync_bound)
    step_s = STEP_US / 1e6
    census = SuppliedFigure(
        name="census per-operator GPU time", value_s=1.82 * step_s, step_s=step_s
    )
    v = timeline_verdict(trace.timelines(), supplied=[census], sm_active=0.01)
    assert v.bottleneck == "sync"
    (check,) = v.figures
    assert not check.used and check.ratio == pytest.approx(1.82)
    assert check.note.startswith("inconsistent: not used")
    assert any("inconsistent: not used" in n for n in v.notes)


def test_figure_check_tolerance_and_clipping() -> None:
    assert check_figure(SuppliedFigure(name="a", value_s=0.5, step_s=1.0)).used
    clipped = check_figure(SuppliedFigure(name="b", value_s=1.03, step_s=1.0))
    assert clipped.used and clipped.ratio == 1.0 and "clipped" in clipped.note
    over = check_figure(SuppliedFigure(name="c", value_s=CONSISTENCY_TOLERANCE + 0.01, step_s=1.0))
    assert not over.used
    assert not check_figure(SuppliedFigure(name="d", value_s=1.0, step_s=0.0)).used


def test_pageable_copies_named_with_pinned_memory_advice() -> None:
    trace, v = _verdict(pageable)
    assert v.bottleneck == "h2d_pageable"
    assert dict(v.ranked)["h2d_pageable"] >= 0.78
    assert v.copy_share == pytest.approx(0.78, abs=0.005)
    assert "pin_memory=True" in v.advice and "non_blocking" in v.advice
    assert "bf16" not in v.advice
    assert trace.timelines()[0].copy_by_kind == {"HtoD pageable": pytest.approx(7_800)}


def test_input_bound_gaps_under_the_dataloader() -> None:
    _, v = _verdict(input_bound)
    assert v.bottleneck == "dataloader"
    assert dict(v.ranked)["dataloader"] == pytest.approx(0.60, abs=0.01)
    assert "num_workers" in v.advice


def test_launch_bound_many_tiny_kernels() -> None:
    _, v = _verdict(launch_bound)
    assert v.bottleneck == "launch"
    assert v.compute_share == pytest.approx(0.10, abs=0.005)
    assert "CUDA graphs" in v.advice and "bf16" not in v.advice


def test_device_bound_needs_kernels_and_sm_activity() -> None:
    _, v = _verdict(device_bound, sm_active=0.7)
    assert v.bottleneck == "compute" and v.compute_share == pytest.approx(0.95)
    assert "bf16" in v.advice
    _, unmeasured = _verdict(device_bound)
    assert unmeasured.bottleneck == "compute"
    assert any("SM activity not measured" in n for n in unmeasured.notes)
    _, low = _verdict(device_bound, sm_active=0.3)
    assert low.bottleneck == "mixed" and any("not called device-bound" in n for n in low.notes)


def test_underfilled_gpu_is_its_own_finding_never_bf16() -> None:
    _, v = _verdict(covered, sm_active=0.05, nvml_utilisation=1.0)
    assert v.busy_share == pytest.approx(1.0) and v.bottleneck == "underfilled"
    assert "CUDA graphs" in v.advice and "batch" in v.advice and "fused" in v.advice
    assert "precision will not help" in v.advice and "bf16" not in v.advice
    assert "under-filled" in v.headline


def test_mixed_ranks_the_shares() -> None:
    _, v = _verdict(mixed)
    assert v.bottleneck == "mixed"
    assert v.headline.startswith("mixed:")
    top = dict(v.ranked[:3])
    assert set(top) == {"dataloader", "sync", "compute"}
    assert top["dataloader"] == pytest.approx(0.35, abs=0.01)


def test_overlapping_streams_are_not_double_counted() -> None:
    trace = _trace(two_streams)
    s = trace.timelines()[0]
    assert s.compute_busy_us == pytest.approx(9_000) and s.busy_us == pytest.approx(9_000)
    assert s.share(s.busy_us) == pytest.approx(0.9)


def test_intervals_are_clipped_to_the_step() -> None:
    window = StepWindow(index=0, start_us=100.0, end_us=200.0)
    device = [DeviceInterval(start_us=50.0, end_us=250.0, kind="kernel")]
    s = step_timeline(window, device, [])
    assert s.busy_us == 100.0 and s.idle_us == 0.0 and s.shares["compute"] == 1.0


def test_gap_attribution_priority() -> None:
    window = StepWindow(index=0, start_us=0.0, end_us=100.0)
    host = [
        HostSpan(start_us=0.0, end_us=100.0, category="launch"),
        HostSpan(start_us=20.0, end_us=40.0, category="sync"),
        HostSpan(start_us=30.0, end_us=60.0, category="dataloader"),
    ]
    device = [DeviceInterval(start_us=90.0, end_us=100.0, kind="kernel")]
    s = step_timeline(window, device, host)
    assert s.by_cause["sync"] == 20.0 and s.by_cause["dataloader"] == 20.0
    assert s.by_cause["launch"] == 50.0 and s.by_cause["compute"] == 10.0
    (gap,) = s.gaps
    assert gap.cause == "launch"


def test_steps_from_optimizer_annotations_else_whole_window() -> None:
    def body(b: TraceBuilder, t0: float) -> None:
        b.kernel(t0 + 100, 8_000)
        b.annotation("Optimizer.step#SGD.step", t0 + 9_000, 900)

    trace = _trace(body, n=4, annotate=False)
    assert trace.step_source == "optimizer step" and len(trace.steps) == 3
    assert all(math.isclose(w.end_us - w.start_us, STEP_US) for w in trace.steps)
    whole = _trace(device_bound, n=2, annotate=False)
    assert whole.step_source == "whole window" and len(whole.steps) == 1


def test_nccl_and_readback_copies() -> None:
    b = TraceBuilder()
    b.step(0, 0.0, 1_000)
    b.kernel(100, 200, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    b.memcpy(500, 100, "Memcpy DtoH (Device -> Pageable)")
    b.cpu_op("aten::copy_", 480, 400)
    trace = parse_trace(b.document())
    (s,) = trace.timelines()
    assert s.by_cause["communication"] == pytest.approx(200)
    assert s.by_cause["sync"] >= 100  # the DtoH copy, then the host waiting in copy_
    assert s.copy_by_kind == {"DtoH pageable": pytest.approx(100)}


@pytest.mark.parametrize(
    ("document", "mention"),
    [
        ({"schemaVersion": 1}, "no traceEvents"),
        ([1, 2], "no GPU events"),
        (
            {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}]},
            "no GPU events",
        ),
        ("text", "no traceEvents"),
    ],
)
def test_parse_rejects_traces_without_gpu_events(document: Any, mention: str) -> None:
    with pytest.raises(BadInputError, match=mention):
        parse_trace(document)


@pytest.mark.parametrize(
    ("name", "klass", "precision"),
    [
        ("ampere_sgemm_128x64_nn", "matrix", "fp32"),
        ("cutlass_80_simt_sgemm_256x128_8x4_nn_align1", "matrix", "fp32"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128", "matrix", "reduced"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", "matrix", "reduced"),
        ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTN", "matrix", "reduced"),
        ("nvjet_sss_128x64_32x8_2x1_v_bz_NNN", "matrix", "fp32"),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>",
            "matrix",
            "reduced",
        ),
        ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nhwckrsc_nchw", "matrix", "fp32"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "matrix", "reduced"),
        ("fmha_cutlassF_f32_aligned_64x64_rf_sm80", "matrix", "fp32"),
        ("sm90_e4m3e4m3_s_gemm", "matrix", "reduced"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
            "memory",
            "fp32",
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "memory", "fp32"),
        (
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
            "memory",
            "fp32",
        ),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512>", "memory", "fp32"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "memory", "fp32"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>", "memory", "fp32"),
        (
            "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float>",
            "memory",
            "fp32",
        ),
        ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<3>>", "memory", "unknown"),
        ("void tiny", "other", "unknown"),
    ],
)
def test_kernel_classes_and_precision_from_names(name: str, klass: str, precision: str) -> None:
    assert kernel_class(name) == klass
    assert kernel_precision(name) == precision


def test_memory_bound_kernels_are_named_memory_with_fusion_advice_never_bf16() -> None:
    trace, v = _verdict(memory_bound, sm_active=0.7)
    assert v.bottleneck == "memory"
    assert dict(v.ranked)["memory"] == pytest.approx(0.85, abs=0.005)
    assert dict(v.ranked)["compute"] == pytest.approx(0.10, abs=0.005)
    assert v.kernel_share == pytest.approx(0.95, abs=0.005)
    assert "fus" in v.advice and "torch.compile" in v.advice and "bf16" not in v.advice
    assert v.headline.startswith("memory-bound on the device")
    assert v.kernel_classes["memory"] == pytest.approx(0.85, abs=0.005)
    _assert_partition(trace)


def test_reduced_precision_matrix_kernels_get_no_bf16_advice() -> None:
    _, v = _verdict(tensor_core_bf16, sm_active=0.8)
    assert v.bottleneck == "compute" and v.matrix_precision == "reduced"
    assert "bf16" not in v.advice and "autocast" not in v.advice
    assert "tensor cores" in v.advice and "fp8" in v.advice and "torch.compile" in v.advice
    assert "reduced precision" in v.headline


def test_fp32_matrix_kernels_get_the_bf16_advice() -> None:
    _, v = _verdict(fp32_matmul, sm_active=0.8)
    assert v.bottleneck == "compute" and v.matrix_precision == "fp32"
    assert "bf16" in v.advice and "(in fp32)" in v.headline
    assert not any("do not give their precision" in n for n in v.notes)


def test_host_preprocessing_is_host_compute_not_launch() -> None:
    trace, v = _verdict(host_preprocessing)
    assert v.bottleneck == "host_compute"
    shares = dict(v.ranked)
    assert shares["host_compute"] == pytest.approx(0.70, abs=0.02)
    assert shares["launch"] < 0.05
    assert "DataLoader workers" in v.advice and "bf16" not in v.advice
    _assert_partition(trace)


def test_operators_that_call_cuda_are_launches_and_views_are_not_host_compute() -> None:
    b = TraceBuilder()
    b.step(0, 0.0, 1_000)
    b.cpu_op("aten::add", 100, 100)
    b.runtime("cudaLaunchKernel", 150, 20)
    b.cpu_op("aten::view", 300, 100)
    b.cpu_op("aten::flip", 500, 200)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 700, 200)
    b.cpu_op("aten::div", 750, 100)
    b.kernel(950, 50)
    (s,) = parse_trace(b.document()).timelines()
    assert s.by_cause["host_compute"] == pytest.approx(200)
    assert s.by_cause["dataloader"] == pytest.approx(200)
    assert s.by_cause["launch"] >= 100


# The live doctor path (rules/device_bound.py) under the same invariants, on the simulated
# CUDA stream of test_doctor_gpu.py.


def test_live_device_bound_needs_sm_activity_where_gpm_measured_it() -> None:
    from test_doctor_gpu import HEALTHY, _by_rule, _run
    from test_doctor_gpu_evidence import _gpu, _telemetry, _with

    from accelscope.doctor.verdict import diagnose

    ctx = _run(HEALTHY)
    diagnosis = diagnose(_with(ctx, telemetry=_telemetry([(_gpu(1.0, 0.5),)] * 6)))
    finding = _by_rule(diagnosis)["device-bound"]
    assert finding.status == "clear" and "names underfilled" in finding.summary
    assert diagnosis.bottleneck == "underfilled"
    half = diagnose(_with(ctx, telemetry=_telemetry([(_gpu(30.0, 0.5),)] * 6)))
    assert half.bottleneck == "mixed" and half.timeline is not None
    assert any("SM active is 30%" in n for n in half.timeline.notes)
    busy = _by_rule(diagnose(_with(ctx, telemetry=_telemetry([(_gpu(92.0, 40.0),)] * 6))))
    assert busy["device-bound"].status == "fired"


def _whatif(name: str, speedup: float, low: float, high: float) -> Any:
    from accelscope.doctor.whatif import WhatIfResult

    return WhatIfResult(
        name=name,
        label=name,
        status="ok",
        speedup=speedup,
        speedup_low=low,
        speedup_high=high,
    )


def test_a_rule_whose_what_ifs_measured_slower_does_not_name_the_bottleneck() -> None:
    from test_doctor_gpu import HEALTHY, _run

    from accelscope.doctor.findings import FIRED
    from accelscope.doctor.refute import REFUTED, refute_by_what_ifs
    from accelscope.doctor.verdict import diagnose

    diagnosis = diagnose(_run(HEALTHY))
    assert diagnosis.bottleneck == "device-bound"
    top = diagnosis.fired[0]
    assert "bf16" in top.what_ifs
    slower = [_whatif(w, 0.6, 0.55, 0.66) for w in top.what_ifs]
    out = refute_by_what_ifs(diagnosis, slower, "no what-if measurably beat the baseline")
    assert out.bottleneck != "device-bound"
    refuted = {f.rule: f for f in out.findings}["device-bound"]
    assert refuted.status == REFUTED and not refuted.fired
    assert "bf16 measured 0.60x items/s (95 % bounds 0.55-0.66x)" in refuted.summary
    assert any("is not named the bottleneck" in n and "bf16 measured" in n for n in out.notes)
    standing = [f.rule for f in diagnosis.fired if not set(f.what_ifs) & set(top.what_ifs)]
    # on CUDA the GPU's timeline named it: a refuted name is not handed to a smaller finding
    assert out.bottleneck == "unconfirmed" and diagnosis.timeline is not None
    assert [f.rule for f in out.fired] == standing
    assert all(f.status in (FIRED, REFUTED) for f in out.findings if f.rule in standing)
    # one what-if slower, another faster (or within the noise): the rule stands
    mixed = [_whatif("bf16", 0.6, 0.55, 0.66), _whatif("compile", 1.3, 1.2, 1.4)]
    assert refute_by_what_ifs(diagnosis, mixed).bottleneck == "device-bound"
    noise = [_whatif(w, 0.97, 0.9, 1.04) for w in top.what_ifs]
    assert refute_by_what_ifs(diagnosis, noise) == diagnosis


def test_with_every_fired_rule_refuted_no_bottleneck_is_confirmed() -> None:
    from dataclasses import replace

    from test_doctor_gpu import HEALTHY, _run

    from accelscope.doctor.refute import refute_by_what_ifs
    from accelscope.doctor.verdict import diagnose

    diagnosis = diagnose(_run(HEALTHY))
    top = diagnosis.fired[0]
    alone = replace(
        diagnosis,
        findings=(top, *(replace(f, status="clear") for f in diagnosis.findings[1:])),
    )
    out = refute_by_what_ifs(alone, [_whatif("bf16", 0.6, 0.55, 0.66)])
    assert out.bottleneck == "unconfirmed" and out.title == "no confirmed bottleneck"
    assert out.headline.startswith("no confirmed bottleneck: the profile pointed at")
    assert "bf16 measured 0.60x" in out.headline


def test_device_to_device_copies_are_not_readbacks() -> None:
    b = TraceBuilder()
    b.step(0, 0.0, 1_000)
    b.cpu_op("aten::copy_", 100, 800)
    b.memcpy(850, 50, "Memcpy DtoD (Device -> Device)", launch_at=110)
    (s,) = parse_trace(b.document()).timelines()
    assert s.by_cause["sync"] == 0.0 and s.by_cause["launch"] > 0.0
    assert s.copy_by_kind == {"DtoD": pytest.approx(50)}


def test_a_gap_that_opens_in_a_readback_is_the_readbacks_gap_by_gap() -> None:
    """The GPU ran dry while the host waited in .item(); the Python and the launch after it,
    until the GPU had work again, are the readback's cost."""
    b = TraceBuilder()
    b.step(0, 0.0, 1_000)
    b.kernel(0, 100)
    b.cpu_op("aten::item", 50, 150)  # waits until 100, returns at 200
    b.runtime("cudaStreamSynchronize", 60, 130)
    b.runtime("cudaLaunchKernel", 600, 20)  # 200..600: Python, no event
    b._x("kernel", "void gemm", 700, 300, pid=GPU_PID, tid=7, args={"stream": 7})
    (s,) = parse_trace(b.document()).timelines()
    assert s.by_cause["sync"] == pytest.approx(600)
    assert s.by_cause["launch"] == 0.0 and s.by_cause["other"] == 0.0


def test_python_between_operators_is_launch_time_not_other() -> None:
    b = TraceBuilder()
    b.step(0, 0.0, 1_000)
    b.cpu_op("aten::add", 0, 100)
    b.runtime("cudaLaunchKernel", 50, 20)
    b._x("kernel", "void elementwise", 900, 100, pid=GPU_PID, tid=7, args={"stream": 7})
    (s,) = parse_trace(b.document()).timelines()
    assert s.by_cause["launch"] == pytest.approx(900) and s.by_cause["other"] == 0.0
    # a gap in which the host recorded nothing at all stays 'other'
    quiet = TraceBuilder()
    quiet.step(0, 0.0, 1_000)
    quiet._x("kernel", "void gemm", 900, 100, pid=GPU_PID, tid=7, args={"stream": 7})
    (q,) = parse_trace(quiet.document()).timelines()
    assert q.by_cause["other"] == pytest.approx(900)


def test_profiler_steps_filed_as_operators_are_steps() -> None:
    b = TraceBuilder()
    for i in range(2):
        b.cpu_op(f"ProfilerStep#{i + 5}", i * 1_000.0, 1_000)
        b.kernel(i * 1_000.0 + 100, 800)
    trace = parse_trace(b.document())
    assert trace.step_source == "ProfilerStep" and [w.index for w in trace.steps] == [5, 6]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"by_cause": {"compute": 600.0, "launch": 300.0}}, "sum to"),
        ({"by_cause": {"compute": 1200.0, "launch": -200.0}}, "outside"),
        ({"busy_us": 1100.0}, "outside"),
        ({"compute_busy_us": 700.0, "busy_us": 600.0}, "above its busy"),
        ({"kernel_by_class": {"memory": 1500.0}}, "outside"),
        ({"step_us": float("nan")}, "length"),
    ],
)
def test_a_step_whose_parts_do_not_partition_it_is_not_built(
    change: dict[str, Any], message: str
) -> None:
    # a bug upstream raises where the timeline is built instead of being clipped by a reader
    good: dict[str, Any] = {
        "index": 0,
        "step_us": 1000.0,
        "compute_busy_us": 600.0,
        "copy_busy_us": 0.0,
        "busy_us": 600.0,
        "copy_by_kind": {},
        "by_cause": {"compute": 600.0, "launch": 400.0},
        "gaps": (),
    }
    StepTimeline(**good)  # the partition holds
    with pytest.raises(ValueError, match=message):
        StepTimeline(**(good | change))
