"""The torch runners' GPU options, on fake GPUs and the CPU: ``cudnn_benchmark`` set for the
runner's life and set back, ``weights=cast`` (a cast copy, the caller's module untouched, the
same answers within bf16's precision), which specs the options refuse, and the float8 gate.

Covers: accelscope.backends.eager, accelscope.backends.compiled, accelscope.hardware.tf32."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch import nn

from accelscope.backends.base import Batch
from accelscope.backends.compiled import CompileBackend, float8_refusal, linear_weight_share
from accelscope.backends.eager import EagerBackend, TorchRunner, torch_options_refusal
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.tf32 import apply_cudnn_benchmark
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.testing.fake_gpus import H100_SXM, L4, FakeGpus


@pytest.fixture(autouse=True)
def benchmark_off() -> Iterator[None]:
    before = apply_cudnn_benchmark(False)
    yield
    apply_cudnn_benchmark(before)


def spec(**fields: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        model="m", backend="eager", precision=Precision.FP32, batch_size=2, threads=1
    )
    values.update(fields)
    return RunSpec(**values)


class ProbeRunner(TorchRunner):
    """A torch runner that runs nothing (the fake GPU has no memory)."""

    def feed(self, batch: Batch) -> Any:
        return batch

    def run(self, feed: Any) -> Any:
        return feed


def test_cudnn_benchmark_lives_as_long_as_its_runner() -> None:
    with FakeGpus([H100_SXM]):
        runner = ProbeRunner(spec(device=Device.CUDA, options=(("cudnn_benchmark", "true"),)))
        assert torch.backends.cudnn.benchmark is True
        apply_cudnn_benchmark(False)  # another configuration's runner in this process
        runner.activate()
        assert torch.backends.cudnn.benchmark is True
        runner.close()
        assert torch.backends.cudnn.benchmark is False
        untouched = ProbeRunner(spec(device=Device.CUDA))  # no option: the flag is left alone
        assert torch.backends.cudnn.benchmark is False
        untouched.close()


def test_options_refuse_what_they_cannot_mean() -> None:
    assert torch_options_refusal(spec(options=(("weights", "cast"),))) == (
        "option weights=cast applies to bf16 and fp16"
    )
    assert torch_options_refusal(spec(options=(("inputs", "pinned"),))) == (
        "option inputs applies to CUDA devices"
    )
    assert torch_options_refusal(spec(options=(("cudnn_benchmark", "true"),))) == (
        "option cudnn_benchmark applies to CUDA devices"
    )
    cuda = spec(device=Device.CUDA, precision=Precision.BF16, options=(("weights", "cast"),))
    assert torch_options_refusal(cuda) == ""


def _mlp_model(module: nn.Module) -> LoadedModel:
    return LoadedModel(
        ref="mlp",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 16)),),
        digest="test:mlp",
        task=Task.CLASSIFICATION,
        module=module,
    )


def test_cast_weights_run_a_cast_copy_with_the_same_answers(environment: Environment) -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    model = _mlp_model(module)
    cpu = replace(environment, gpus=())
    cast = spec(precision=Precision.BF16, options=(("weights", "cast"),))
    backend = EagerBackend()
    assert backend.supports(model, cast, cpu).ok
    runner = backend.prepare(model, cast)
    batch = {"x": torch.randn(2, 16)}
    feed = runner.feed(batch)
    assert feed[0].dtype is torch.bfloat16  # floating inputs cast once, before timing
    got = runner.outputs(runner.run(feed))[0]
    with torch.no_grad():
        want = module(batch["x"])
    assert torch.allclose(got, want, rtol=0.05, atol=0.05)
    assert all(p.dtype is torch.float32 for p in module.parameters())  # the caller's module
    runner.close()


def test_float8_is_for_linear_heavy_models_on_hopper(environment: Environment) -> None:
    conv = nn.Sequential(nn.Conv2d(3, 64, 3), nn.Flatten(), nn.Linear(64, 2))
    mlp = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
    assert linear_weight_share(mlp) == 1.0 and linear_weight_share(conv) < 0.1
    with FakeGpus([H100_SXM]):
        hopper = collect_environment()
    with FakeGpus([L4]):
        ada = collect_environment()
    fp8 = spec(backend="compile", precision=Precision.FP8, device=Device.CUDA)
    assert "not Linear-heavy" in float8_refusal(_mlp_model(conv), fp8, hopper)
    assert "needs Hopper (sm_90) or newer; NVIDIA L4 is sm_89" in float8_refusal(
        _mlp_model(mlp), fp8, ada
    )
    assert float8_refusal(_mlp_model(mlp), replace(fp8, device=Device.CPU), environment) == (
        "fp8 (torchao float8) runs on CUDA GPUs"
    )
    import importlib.util

    found = float8_refusal(_mlp_model(mlp), fp8, hopper)
    if importlib.util.find_spec("torchao") is None:
        assert found.startswith("float8 needs torchao")
    else:
        assert found == ""
    # compile runs fp8 on CUDA only: a CPU default sweep never lists it
    assert Precision.FP8 in CompileBackend.cuda_precisions


def test_float8_compiles_unfrozen_unless_asked() -> None:
    from accelscope.backends.compiled import inductor_options

    fp8 = spec(backend="compile", precision=Precision.FP8, device=Device.CUDA)
    assert inductor_options(fp8)["freezing"] is False
    assert inductor_options(replace(fp8, options=(("freezing", "true"),)))["freezing"] is True
    assert inductor_options(replace(fp8, precision=Precision.BF16))["freezing"] is True
