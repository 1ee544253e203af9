"""The default GPU sweep (``bench MODEL --device cuda`` with no other choice) on a fake H100:
its rows, each with its pinned-copy twin, the float8 gate, and the memory check that skips a
batch before it runs.

Covers: accelscope.sweep.gpu_default, accelscope.sweep.memory_fit, accelscope.sweep.space."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.models.base import LoadedModel
from accelscope.models.loading import load_model
from accelscope.spec import Device, Precision, TensorSpec
from accelscope.sweep.gpu_default import DEFAULT_GPU_BATCHES, GRAPH_MAX_BATCH, PINNED
from accelscope.sweep.memory_fit import (
    GIB,
    DeviceMemory,
    MemoryEstimate,
    MemoryFit,
    estimate_memory,
    peak_live_bytes,
    read_device_memory,
)
from accelscope.sweep.space import SweepSpace, expand
from accelscope.testing.fake_gpus import A100_SXM, H100_SXM, FakeGpus

CONV = (
    "import torch\ndef make():\n    torch.manual_seed(0)\n    return torch.nn.Sequential("
    "torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), "
    "torch.nn.Linear(4, 2))\n"
)
MLP = (
    "import torch\ndef make():\n    torch.manual_seed(0)\n    return torch.nn.Sequential("
    "torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))\n"
)


def _model(tmp_path: Path, name: str, source: str, inputs: tuple[TensorSpec, ...]) -> LoadedModel:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_model(f"{path}:make", inputs=inputs)


@pytest.fixture
def conv(tmp_path: Path) -> LoadedModel:
    return _model(tmp_path, "conv", CONV, (TensorSpec(name="x", shape=("N", 3, 8, 8)),))


@pytest.fixture
def mlp(tmp_path: Path) -> LoadedModel:
    return _model(tmp_path, "mlp", MLP, (TensorSpec(name="x", shape=("N", 4)),))


def _h100() -> Environment:
    with FakeGpus([H100_SXM]):
        return collect_environment()


def _space(**fields: object) -> SweepSpace:
    values: dict[str, object] = dict(
        batch_sizes=DEFAULT_GPU_BATCHES, threads=(1,), device=Device.CUDA, gpu_default=True
    )
    values.update(fields)
    return SweepSpace(**values)  # type: ignore[arg-type]


def test_each_row_is_followed_by_its_pinned_twin(conv: LoadedModel) -> None:
    found = expand(_space(batch_sizes=(8,)), conv, _h100())
    labels = [c.spec.label() for c in found]
    assert labels[:4] == [
        "eager/fp32/b8/t1",
        "eager/fp32/b8/t1/inputs=pinned",
        "eager/tf32/b8/t1/channels_last=true/cudnn_benchmark=true",
        "eager/tf32/b8/t1/channels_last=true/cudnn_benchmark=true/inputs=pinned",
    ]
    for resident, twin in zip(found[::2], found[1::2], strict=True):
        assert PINNED not in resident.spec.options and PINNED in twin.spec.options
        assert replace(twin.spec, options=resident.spec.options) == resident.spec
    by_label = {c.spec.label(): c for c in found}
    bf16 = by_label["eager/bf16/b8/t1/channels_last=true/cudnn_benchmark=true/weights=cast"]
    assert bf16.runnable, bf16.skip_reason
    assert "eager/fp16/b8/t1/channels_last=true/cudnn_benchmark=true/weights=cast" in by_label


def test_cuda_graphs_only_at_small_batches(conv: LoadedModel) -> None:
    found = expand(_space(), conv, _h100())
    modes = {
        c.spec.batch_size: dict(c.spec.options)["mode"]
        for c in found
        if c.spec.backend == "compile" and c.spec.precision is Precision.BF16
    }
    assert modes == {
        b: ("reduce-overhead" if b <= GRAPH_MAX_BATCH else "default") for b in DEFAULT_GPU_BATCHES
    }


def test_float8_is_tried_only_where_it_can_pay(conv: LoadedModel, mlp: LoadedModel) -> None:
    import importlib.util

    fp8 = [
        c
        for c in expand(_space(batch_sizes=(8,)), conv, _h100())
        if c.spec.precision is Precision.FP8
    ]
    assert fp8 and all("not Linear-heavy" in c.skip_reason for c in fp8)
    with FakeGpus([A100_SXM]):
        a100 = collect_environment()
    older = [
        c for c in expand(_space(batch_sizes=(8,)), mlp, a100) if c.spec.precision is Precision.FP8
    ]
    assert all("needs Hopper (sm_90)" in c.skip_reason for c in older)
    linear = [
        c
        for c in expand(_space(batch_sizes=(8,)), mlp, _h100())
        if c.spec.precision is Precision.FP8
    ]
    if importlib.util.find_spec("torchao") is None:
        assert all("needs torchao" in c.skip_reason for c in linear)
    else:  # torchao here: what is left is the compile backend's own CUDA check (triton)
        assert all(
            "Linear-heavy" not in c.skip_reason and "Hopper" not in c.skip_reason for c in linear
        )
    # channels-last only where an input is 4-D
    assert not any(
        "channels_last" in dict(c.spec.options)
        for c in expand(_space(batch_sizes=(8,)), mlp, _h100())
    )


def test_the_cpu_default_sweep_has_no_fp8_rows(mlp: LoadedModel, environment: Environment) -> None:
    cpu = replace(environment, gpus=())
    found = expand(SweepSpace(batch_sizes=(8,), threads=(1,)), mlp, cpu)
    assert not any(c.spec.precision is Precision.FP8 and c.spec.backend == "compile" for c in found)
    with pytest.raises(Exception, match="needs --device cuda"):
        SweepSpace(gpu_default=True)


def test_the_activation_peak_is_what_is_alive_at_once(mlp: LoadedModel) -> None:
    """Linear(4,8) -> ReLU -> Linear(8,3): at most the first output and the ReLU's (8 + 8 floats
    per item) are alive at once; the weights' transposed views are not new memory."""
    assert peak_live_bytes(mlp, 1) == 64
    assert peak_live_bytes(mlp, 2) == 128
    estimate = estimate_memory(mlp)
    assert estimate.activation_bytes_per_item == 64 and estimate.fixed_activation_bytes == 0
    assert estimate.weight_bytes == (4 * 8 + 8 + 8 * 3 + 3) * 4


def test_a_batch_that_does_not_fit_is_skipped_before_it_runs(conv: LoadedModel) -> None:
    estimate = MemoryEstimate(
        weight_bytes=100 << 20, fixed_activation_bytes=0, activation_bytes_per_item=8 << 20
    )
    fit = MemoryFit(estimate=estimate, device=DeviceMemory(free_bytes=3 * GIB, source="test"))
    found = expand(_space(memory=fit), conv, _h100())
    eager_fp32 = {c.spec.batch_size: c for c in found if c.spec.label().startswith("eager/fp32/")}
    assert eager_fp32[8].runnable and eager_fp32[64].runnable
    for batch in (256, 512):  # 1 GiB + 100 MiB + 1.5 x batch x 8 MiB > 3 GiB
        assert eager_fp32[batch].skip_reason.startswith(f"does not fit: batch {batch} needs about")
    needed = estimate.needed_bytes(eager_fp32[256].spec)
    assert needed == int(100 * 2**20 + 1.5 * 256 * 8 * 2**20 + GIB)
    bf16 = next(c for c in found if c.spec.batch_size == 256 and c.spec.precision is Precision.BF16)
    assert estimate.needed_bytes(bf16.spec) < needed  # half the bytes per element


def test_free_memory_falls_back_to_the_total_and_says_why() -> None:
    with FakeGpus([H100_SXM]):
        gpu = collect_environment().gpus[0]

    class NoDriver:
        def nvmlInit(self) -> None:
            raise RuntimeError("no driver")

    memory = read_device_memory(gpu, nvml=NoDriver())
    assert memory.free_bytes == gpu.memory_bytes
    assert "free memory not readable (NVML: RuntimeError)" in memory.source

    class Nvml:
        def nvmlInit(self) -> None:
            return None

        def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
            return uuid

        def nvmlDeviceGetMemoryInfo(self, handle: str) -> object:
            class Info:
                free = 7 * GIB

            return Info()

    assert read_device_memory(gpu, nvml=Nvml()).free_bytes == 7 * GIB
