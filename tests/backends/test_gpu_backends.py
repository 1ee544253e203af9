"""What every backend does with the device ordinal and the TF32 setting, through fake GPUs and
on the CPU: who may run TF32 and why not, runners that set (and set back) the fp32 math and the
current device, ONNX Runtime's CUDA provider options, and a caller's module left where it was.

Covers: accelscope.backends.base, accelscope.backends.eager, accelscope.backends.onnxruntime,
accelscope.hardware.tf32."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.eager import EagerBackend, TorchRunner, own_module
from accelscope.backends.onnxruntime import OnnxRuntimeBackend, _tf32_notes
from accelscope.backends.registry import get_backend
from accelscope.engine.configuration import measure_config
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.tf32 import (
    CONV_KEY,
    MATMUL_KEY,
    Fp32Math,
    read_fp32_math,
    restore_fp32_math,
)
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.testing import fixed_environment
from accelscope.testing.fake_gpus import H100_SXM, T4, FakeGpus

TORCH_DEFAULT = Fp32Math(matmul="ieee", conv="tf32")


@pytest.fixture(autouse=True)
def torch_defaults() -> Iterator[None]:
    restore_fp32_math(TORCH_DEFAULT)
    yield
    restore_fp32_math(TORCH_DEFAULT)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(1))  # type: ignore[no-any-return]


def net_model() -> LoadedModel:
    return LoadedModel(
        ref="net",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 3, 4, 4)),),
        digest="test:net",
        task=Task.CLASSIFICATION,
        module=Net().eval(),
    )


def spec(**fields: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        model="net", backend="eager", precision=Precision.FP32, batch_size=2, threads=1
    )
    values.update(fields)
    return RunSpec(**values)


def gpu_environment(*gpus: Any) -> Environment:
    base = fixed_environment()
    found = tuple(
        replace(base.gpus[0], index=i, name=g.name, compute_capability=f"{g.major}.{g.minor}")
        for i, g in enumerate(gpus)
    )
    return replace(base, gpus=found)


# ---------------------------------------------------------------------- who may run TF32


class NoTf32(Backend):
    name = "no-tf32"
    formats = frozenset({ModelFormat.TORCH})
    precisions = frozenset({Precision.FP32})
    devices = frozenset({Device.CPU, Device.CUDA})

    def available(self, env: Environment) -> Availability:
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        raise AssertionError("not prepared in these tests")


@pytest.mark.parametrize(
    ("backend", "fields", "gpus", "reason"),
    [
        (EagerBackend(), {}, (H100_SXM,), "tf32 on needs device cuda"),
        (NoTf32(), {"device": Device.CUDA}, (H100_SXM,), "cannot switch TF32 on or off"),
        (EagerBackend(), {"device": Device.CUDA}, (T4,), "compute capability 8.0+"),
    ],
)
def test_tf32_is_refused_with_the_reason(
    backend: Backend, fields: dict[str, Any], gpus: tuple[Any, ...], reason: str
) -> None:
    verdict = backend.supports(net_model(), spec(tf32=True, **fields), gpu_environment(*gpus))
    assert not verdict.ok and reason in verdict.reason


@pytest.mark.parametrize("name", ["eager", "compile", "onnxruntime", "tensorrt"])
def test_the_torch_and_cuda_runtimes_control_tf32(name: str) -> None:
    assert get_backend(name).tf32_control


def test_tf32_on_an_ampere_or_later_gpu_is_supported() -> None:
    verdict = EagerBackend().supports(
        net_model(),
        spec(device=Device.CUDA, device_index=1, tf32=True),
        gpu_environment(T4, H100_SXM),
    )
    assert verdict.ok  # judged on cuda:1 (the H100), not on cuda:0 (the T4)


# ------------------------------------------------------- runners: fp32 math and the device


class ProbeRunner(TorchRunner):
    """A torch runner that runs nothing (the fake GPU has no memory)."""

    def feed(self, batch: Batch) -> Any:
        return batch

    def run(self, feed: Any) -> Any:
        return feed


@pytest.mark.parametrize("tf32", [False, True])
def test_a_runner_sets_the_fp32_math_and_sets_it_back(tf32: bool) -> None:
    runner = ProbeRunner(spec(tf32=tf32))
    expected = "tf32" if tf32 else "ieee"
    assert read_fp32_math() == Fp32Math(matmul=expected, conv=expected)
    runner.close()
    assert read_fp32_math() == TORCH_DEFAULT


def test_a_runner_on_cuda_1_works_there_and_sets_the_current_device_back() -> None:
    with FakeGpus([H100_SXM, H100_SXM]) as gpus:
        runner = ProbeRunner(spec(device=Device.CUDA, device_index=1))
        assert torch.cuda.current_device() == 1  # model code allocating on "cuda" lands there
        runner.synchronize()
        interval = runner.interval()
        assert interval is not None
        interval.start()
        interval.stop()
        torch.cuda.set_device(0)  # another configuration's runner in this process
        runner.activate()
        assert torch.cuda.current_device() == 1
        runner.close()
        assert torch.cuda.current_device() == 0
    assert "synchronize:1" in gpus.calls and "event.record:1" in gpus.calls
    assert [c for c in gpus.calls if c.startswith("set_device")] == [
        "set_device:1",
        "set_device:0",
        "set_device:1",
        "set_device:0",
    ]
    assert "_lazy_init" not in gpus.calls


def test_onnxruntime_cuda_provider_options_name_the_device_and_tf32() -> None:
    providers = OnnxRuntimeBackend._providers(spec(device=Device.CUDA, device_index=1), "auto")
    assert providers[0] == ("CUDAExecutionProvider", {"device_id": "1", "use_tf32": "0"})
    tf32 = OnnxRuntimeBackend._providers(spec(device=Device.CUDA, tf32=True), "auto")
    assert tf32[0] == ("CUDAExecutionProvider", {"device_id": "0", "use_tf32": "1"})
    trt = OnnxRuntimeBackend._providers(spec(device=Device.CUDA, device_index=1), "tensorrt")
    assert trt[0][0] == "TensorrtExecutionProvider" and trt[0][1]["device_id"] == "1"
    assert OnnxRuntimeBackend._providers(spec(), "auto") == ["CPUExecutionProvider"]


def test_an_fp32_that_is_not_ieee_says_so() -> None:
    cuda = spec(device=Device.CUDA, backend="onnxruntime")
    [note] = _tf32_notes(cuda, {"ep": "tensorrt"})
    assert "not IEEE fp32" in note and "TensorRT" in note
    assert (
        _tf32_notes(cuda, {}) == ()
        and _tf32_notes(replace(cuda, tf32=True), {"ep": "tensorrt"}) == ()
    )


# --------------------------------------------------------------- the caller's module


def test_a_module_moved_to_another_device_is_a_copy() -> None:
    module = Net()
    moved = own_module(module, torch.device("meta"))
    assert moved is not module and next(moved.parameters()).device.type == "meta"
    assert all(p.device.type == "cpu" for p in module.parameters())  # the caller's stays
    assert own_module(module, torch.device("cpu")) is module  # already there: no copy


def test_tied_weights_stay_tied_in_the_copy() -> None:
    module = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    module[1].weight = module[0].weight
    moved = own_module(module, torch.device("meta"))
    assert moved[0].weight is moved[1].weight


def test_channels_last_leaves_the_callers_module_as_it_was() -> None:
    model = net_model()
    assert model.module is not None
    weight = model.module.conv.weight
    runner = EagerBackend().prepare(model, spec(options=(("channels_last", "true"),)))
    runner.close()
    assert model.module.conv.weight is weight
    assert weight.is_contiguous()  # not turned channels-last under the caller


class NotedRunner(ProbeRunner):
    def outputs(self, raw: Any) -> list[torch.Tensor]:
        return [raw["x"].sum(dim=(1, 2, 3))[:, None]]

    def notes(self) -> tuple[str, ...]:
        return ("fp32 here is not IEEE fp32: test",)


class NotedBackend(Backend):
    name = "noted"
    formats = frozenset({ModelFormat.TORCH})
    precisions = frozenset({Precision.FP32})
    tf32_control = True
    options: ClassVar[dict[str, tuple[str, ...]]] = {}

    def available(self, env: Environment) -> Availability:
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        return NotedRunner(spec)


def test_a_result_records_the_math_it_ran_under_and_the_runners_notes() -> None:
    env = fixed_environment()  # collected before: no numerics
    result = measure_config(
        net_model(),
        spec(backend="noted"),
        NotedBackend(),
        env,
        timer_config=TimerConfig(budget_s=0.05, min_samples=3, warmup_iters=1),
    )
    numerics = dict(result.environment.numerics)
    assert numerics[MATMUL_KEY] == "ieee" and numerics[CONV_KEY] == "ieee"
    assert "fp32 here is not IEEE fp32: test" in result.warnings
    assert read_fp32_math() == TORCH_DEFAULT  # set back once measured
    assert result.environment.fingerprint() == env.fingerprint()
