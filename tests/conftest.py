"""Shared fixtures: a fixed environment and synthetic results, no real hardware needed."""

from __future__ import annotations

import pytest

from accelscope.accuracy.fidelity import Fidelity
from accelscope.hardware.cpu import CpuInfo
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.gpu import GpuInfo
from accelscope.measurement.memory import MemoryPeak
from accelscope.measurement.record import Measurement, StopReason
from accelscope.measurement.threads import ThreadSettings
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Device, Precision, RunSpec


@pytest.fixture
def environment() -> Environment:
    cpu = CpuInfo(
        model_name="Intel(R) Xeon(R) Platinum 8480+",
        vendor="GenuineIntel",
        arch="x86_64",
        logical_cores=2,
        physical_cores=1,
        usable_cores=2,
        sockets=1,
        max_freq_mhz=None,
        l2_cache_bytes=2 * 1024 * 1024,
        l3_cache_bytes=None,
        isa=("amx_bf16", "amx_int8", "amx_tile", "avx2", "avx512_bf16", "avx512f"),
    )
    gpu = GpuInfo(
        index=0,
        name="NVIDIA H200",
        memory_bytes=150_000_000_000,
        compute_capability="9.0",
        driver_version="580.1",
        cuda_runtime="12.8",
        uuid="GPU-0",
    )
    return Environment(
        hostname="box",
        os="Linux-6.1",
        python="3.11.7",
        cpu=cpu,
        memory_bytes=24 * 1024**3,
        gpus=(gpu,),
        libraries=(("numpy", "2.4.6"), ("torch", "2.13.0")),
        torch_build=(("cuda", "none"), ("mkldnn", "True")),
        collected_at="2026-11-20T22:00:00+00:00",
    )


def make_result(environment: Environment, batch: int = 8, seed: float = 0.0) -> Result:
    """A fully populated result with awkward floats (to prove lossless round trips)."""
    spec = RunSpec(
        model="resnet50",
        backend="eager",
        precision=Precision.BF16,
        batch_size=batch,
        threads=2,
        device=Device.CPU,
        model_digest="zoo:resnet50:v1",
        options=(("channels_last", "true"),),
    )
    samples = tuple(0.1 + seed + i * 1e-17 + 1 / 3 for i in range(12))
    return Result(
        spec=spec,
        environment=environment,
        status=Status.OK,
        measurement=Measurement(
            samples_s=samples,
            items_per_call=batch,
            first_call_s=1.2345678901234567,
            warmup_samples_s=(0.5, 0.4),
            stop_reason=StopReason.BUDGET,
            budget_s=10.0,
        ),
        memory=MemoryPeak(
            rss_peak_bytes=123456789,
            rss_start_bytes=1000,
            rss_method="region",
            cuda_allocated_peak_bytes=None,
            cuda_reserved_peak_bytes=None,
        ),
        threads=ThreadSettings(
            requested=2, intra_op=2, inter_op=1, omp_num_threads="2", available_cores=2
        ),
        accuracy=Accuracy(
            fidelity=Fidelity(rel_l2=1e-3, max_abs=0.25, cosine=0.9999995, top1_agreement=1.0),
            metric_name="top1_accuracy",
            metric_value=0.97,
            reference_metric_value=0.975,
            metric_source="digits",
        ),
        prepare_s=0.01,
        warnings=("noisy: IQR is 12% of the median (> 10%)",),
    )


def tiny_onnx_bytes(batch: int | str = "batch", seed: int = 0) -> bytes:
    """A small valid ONNX graph, y = x @ W + b with W (16, 4) an initializer; ``batch`` is a
    symbolic (str) or fixed (int) first dimension."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test interrupts like a terminal's Ctrl-C: a shell
    starts background jobs with SIGINT ignored and children inherit that, so a suite run in
    the background would otherwise test nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
