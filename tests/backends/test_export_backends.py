"""ONNX export cache, ONNX Runtime (fp32/int8 from torch models), OpenVINO, TensorRT availability.

Real runs use the zoo ``digits-cnn`` (real held-out data) and a tiny CNN; every export goes to a
per-test-session cache directory.

Covers: accelscope.backends.onnx_export, accelscope.backends.onnxruntime,
accelscope.backends.openvino, accelscope.backends.tensorrt.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelscope.accuracy.fidelity import compare_outputs
from accelscope.backends.base import Backend, Batch
from accelscope.backends.eager import EagerBackend
from accelscope.backends.onnx_export import CACHE_ENV, export_key, export_onnx
from accelscope.backends.onnxruntime import OnnxRuntimeBackend
from accelscope.backends.openvino import OpenVinoBackend
from accelscope.backends.registry import get_backend, register_backend
from accelscope.backends.tensorrt import TensorRtBackend
from accelscope.engine.accuracy_check import build_accuracy_check, calibration_batches, run_chunked
from accelscope.engine.configuration import measure_config
from accelscope.errors import MeasurementError, NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.models.inputs import make_batch
from accelscope.models.loading import load_model
from accelscope.spec import Device, Precision, RunSpec, TensorSpec

needs_ort = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed"
)
needs_ov = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="openvino not installed"
)


class TinyCnn(nn.Module):
    """Conv-BN-ReLU, pooling and a linear head: (N, 3, 16, 16) -> (N, 5) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2)
        )
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).flatten(1))  # type: ignore[no-any-return]


def tiny_model(seed: int = 0) -> LoadedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = TinyCnn().eval()
    return LoadedModel(
        ref="tiny-cnn",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 3, 16, 16), dtype="float32"),),
        digest="test:tiny-cnn",
        task=Task.CLASSIFICATION,
        module=module,
    )


@pytest.fixture(scope="module", autouse=True)
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every export of this module goes to one private cache directory."""
    path = tmp_path_factory.mktemp("exports")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def digits() -> LoadedModel:
    return load_model("digits-cnn")


def spec_for(
    backend: str, precision: Precision, batch: int, *options: tuple[str, str], model: str = "m"
) -> RunSpec:
    return RunSpec(
        model=model,
        backend=backend,
        precision=precision,
        batch_size=batch,
        threads=2,
        options=tuple(options),
    )


def outputs_of(backend: Backend, model: LoadedModel, spec: RunSpec, batch: Batch, **kw: Any) -> Any:
    runner = backend.prepare(model, spec, **kw)
    try:
        return runner.outputs(runner.run(runner.feed(batch)))
    finally:
        runner.close()


def eager_outputs(model: LoadedModel, batch: Batch) -> list[torch.Tensor]:
    return outputs_of(EagerBackend(), model, spec_for("eager", Precision.FP32, 1), batch)  # type: ignore[no-any-return]


def digits_agreement(backend: Backend, model: LoadedModel, spec: RunSpec, **kw: Any) -> float:
    """Top-1 agreement with eager fp32 over the held-out digits (360 images)."""
    data = model.eval_data
    assert data is not None
    eager = EagerBackend().prepare(model, spec_for("eager", Precision.FP32, spec.batch_size))
    runner = backend.prepare(model, spec, **kw)
    try:
        got = run_chunked(runner, data.inputs, spec.batch_size)
    finally:
        runner.close()
    want = run_chunked(eager, data.inputs, spec.batch_size)
    agreement = compare_outputs(got, want, classifier=True).top1_agreement
    assert agreement is not None
    return agreement


# --- export --------------------------------------------------------------------------------


@needs_ort
def test_export_is_cached_and_not_rewritten(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = tiny_model()
    first = export_onnx(model, None, cache_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    again = export_onnx(model, None, cache_dir=tmp_path)
    assert again == first and again.stat().st_mtime_ns == stamp
    fixed = export_onnx(model, 4, cache_dir=tmp_path)
    assert fixed != first
    session = ort.InferenceSession(str(first), providers=["CPUExecutionProvider"])
    (graph_input,) = session.get_inputs()
    assert graph_input.name == "x" and graph_input.shape[0] == "N"
    # no staging directories are left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {first.parent.name, fixed.parent.name}
    )


def test_export_key_follows_weights_and_settings() -> None:
    model = tiny_model()
    key = export_key(model, None)
    assert export_key(tiny_model(), None) == key
    assert export_key(tiny_model(seed=1), None) != key  # same digest, other weights
    assert export_key(model, 8) != key
    assert export_key(model, None, opset=17) != key


def test_export_cache_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)
    with pytest.raises(MeasurementError, match="belongs to another user"):
        export_onnx(tiny_model(), 2, cache_dir=tmp_path)


def test_export_failure_is_a_one_line_measurement_error(tmp_path: Path) -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("cannot trace this\nsecond line")

    model = replace(tiny_model(), module=Broken(), ref="broken")
    with pytest.raises(MeasurementError, match="cannot export broken to ONNX") as info:
        export_onnx(model, 2, cache_dir=tmp_path)
    assert "\n" not in str(info.value)
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- ONNX Runtime --------------------------------------------------------------------------


@needs_ort
def test_ort_fp32_from_torch_matches_eager(digits: LoadedModel) -> None:
    backend = OnnxRuntimeBackend()
    for model, batch_size in ((tiny_model(), 4), (digits, 32)):
        batch = make_batch(model.inputs, batch_size, seed=3)
        got = outputs_of(backend, model, spec_for("onnxruntime", Precision.FP32, batch_size), batch)
        assert compare_outputs(got, eager_outputs(model, batch)).rel_l2 < 1e-4


@needs_ort
def test_ort_int8_static_keeps_digits_top1(digits: LoadedModel) -> None:
    spec = spec_for("onnxruntime", Precision.INT8, 32)
    calibration = calibration_batches(digits, 24)  # re-batched to the graph's fixed 32 rows
    agreement = digits_agreement(OnnxRuntimeBackend(), digits, spec, calibration=calibration)
    assert agreement >= 0.95


@needs_ort
def test_ort_int8_static_without_calibration_is_refused(digits: LoadedModel) -> None:
    with pytest.raises(MeasurementError, match="calibration"):
        OnnxRuntimeBackend().prepare(digits, spec_for("onnxruntime", Precision.INT8, 32))


@needs_ort
def test_ort_int8_dynamic_runs_without_calibration(digits: LoadedModel) -> None:
    spec = spec_for("onnxruntime", Precision.INT8, 32, ("quantization", "dynamic"))
    assert digits_agreement(OnnxRuntimeBackend(), digits, spec) >= 0.95


# --- OpenVINO ------------------------------------------------------------------------------


@needs_ov
@pytest.mark.parametrize(
    ("precision", "hint", "tolerance"),
    [
        (Precision.FP32, "latency", 1e-4),
        (Precision.FP32, "throughput", 1e-4),
        (Precision.BF16, "latency", 2e-2),
    ],
)
def test_openvino_matches_eager(
    digits: LoadedModel, precision: Precision, hint: str, tolerance: float
) -> None:
    batch = make_batch(digits.inputs, 32, seed=3)
    spec = spec_for("openvino", precision, 32, ("hint", hint))
    got = outputs_of(OpenVinoBackend(), digits, spec, batch)
    fidelity = compare_outputs(got, eager_outputs(digits, batch), classifier=True)
    assert fidelity.rel_l2 < tolerance
    assert fidelity.top1_agreement is not None and fidelity.top1_agreement >= 0.95


@needs_ov
def test_openvino_reads_onnx_files_and_tiny_cnn(tmp_path: Path) -> None:
    model = tiny_model()
    path = export_onnx(model, None, cache_dir=tmp_path)
    onnx_model = replace(model, format=ModelFormat.ONNX, module=None, onnx_path=path)
    batch = make_batch(model.inputs, 3, seed=5)
    want = eager_outputs(model, batch)
    for variant in (model, onnx_model):
        got = outputs_of(OpenVinoBackend(), variant, spec_for("openvino", Precision.FP32, 3), batch)
        assert compare_outputs(got, want).rel_l2 < 1e-4


@needs_ort
@needs_ov
def test_torch_export_programs_run_on_ort_and_openvino(tmp_path: Path) -> None:
    model = tiny_model()
    assert model.module is not None
    program = torch.export.export(
        model.module, (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: torch.export.Dim("N")},)
    )
    torch.export.save(program, tmp_path / "tiny.pt2")
    exported = load_model(str(tmp_path / "tiny.pt2"), inputs=model.inputs)
    assert exported.format is ModelFormat.EXPORTED
    batch = make_batch(model.inputs, 4, seed=1)
    want = eager_outputs(model, batch)
    for backend in (OnnxRuntimeBackend(), OpenVinoBackend()):
        got = outputs_of(backend, exported, spec_for(backend.name, Precision.FP32, 4), batch)
        assert compare_outputs(got, want).rel_l2 < 1e-4


# --- end to end through the registry and measure_config ------------------------------------


@needs_ort
@needs_ov
def test_registered_backends_measure_end_to_end(
    digits: LoadedModel, environment: Environment
) -> None:
    for backend in (OnnxRuntimeBackend(), OpenVinoBackend(), TensorRtBackend()):
        register_backend(backend)
    timer = TimerConfig(budget_s=0.2, min_samples=3, warmup_iters=1, warmup_min_s=0.0)
    check = build_accuracy_check(digits, 32)
    for name, precision in (("onnxruntime", Precision.INT8), ("openvino", Precision.FP32)):
        result = measure_config(
            digits,
            spec_for(name, precision, 32, model="digits-cnn"),
            get_backend(name),
            environment,
            timer_config=timer,
            accuracy=check,
            calibration=calibration_batches(digits, 32),
        )
        assert result.measurement is not None and result.measurement.samples_s
        assert result.accuracy is not None and result.accuracy.metric_value is not None
        assert result.accuracy.metric_value > 0.9


# --- availability and options --------------------------------------------------------------


def test_tensorrt_availability_reasons(
    environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, model = TensorRtBackend(), tiny_model()
    cuda = replace(spec_for("tensorrt", Precision.FP16, 8), device=Device.CUDA)
    no_gpu = replace(environment, gpus=())
    assert backend.available(no_gpu).reason == "no CUDA device"
    if importlib.util.find_spec("torch_tensorrt") is None:
        verdict = backend.supports(model, cuda, environment)
        assert not verdict.ok and verdict.reason.startswith("torch_tensorrt is not installed")
        with pytest.raises(NotAvailableError, match="not available: torch_tensorrt is not"):
            verdict.require("tensorrt/fp16")

    real_find_spec = importlib.util.find_spec
    installed = {"torch_tensorrt"}

    def fake_find_spec(name: str, *args: Any) -> Any:
        return object() if name in installed else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    assert backend.supports(model, cuda, environment).ok
    assert (
        "does not run on cpu"
        in backend.supports(model, replace(cuda, device=Device.CPU), environment).reason
    )
    int8 = replace(cuda, precision=Precision.INT8)
    assert "nvidia-modelopt" in backend.supports(model, int8, environment).reason
    installed.add("modelopt")
    assert backend.supports(model, int8, environment).ok
    ampere = replace(environment, gpus=(replace(environment.gpus[0], compute_capability="8.0"),))
    fp8 = replace(cuda, precision=Precision.FP8)
    assert "compute capability 8.9+" in backend.supports(model, fp8, ampere).reason
    assert backend.supports(model, fp8, environment).ok  # H200: 9.0


def test_openvino_availability_reasons(
    environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, model = OpenVinoBackend(), tiny_model()
    if importlib.util.find_spec("nncf") is None:
        verdict = backend.supports(model, spec_for("openvino", Precision.INT8, 8), environment)
        assert not verdict.ok and verdict.reason.endswith("needs nncf (pip install nncf)")
    cuda = replace(spec_for("openvino", Precision.FP32, 8), device=Device.CUDA)
    assert not backend.supports(model, cuda, environment).ok
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "openvino" else real_find_spec(name, *a),
    )
    reason = backend.available(environment).reason
    assert "pip install 'accelscope[openvino]' -c constraints.txt" in reason


@pytest.mark.parametrize(
    ("backend", "precision", "options", "reason"),
    [
        (OnnxRuntimeBackend(), Precision.FP32, (("quantization", "dynamic"),), "int8 only"),
        (OnnxRuntimeBackend(), Precision.INT8, (("quantization", "weekly"),), "not one of"),
        (OnnxRuntimeBackend(), Precision.FP32, (("speed", "max"),), "has no option 'speed'"),
        (OnnxRuntimeBackend(), Precision.FP32, (("ep", "tensorrt"),), "device cuda only"),
        (OnnxRuntimeBackend(), Precision.BF16, (), "no real bf16 path"),
        (OpenVinoBackend(), Precision.FP32, (("hint", "fastest"),), "not one of"),
        (OpenVinoBackend(), Precision.FP16, (), "supports precisions"),
    ],
)
def test_options_and_precisions_are_validated(
    environment: Environment,
    backend: Backend,
    precision: Precision,
    options: tuple[tuple[str, str], ...],
    reason: str,
) -> None:
    if not backend.available(environment).ok:
        pytest.skip(f"{backend.name} not installed")
    verdict = backend.supports(
        tiny_model(), spec_for(backend.name, precision, 8, *options), environment
    )
    assert not verdict.ok and reason in verdict.reason


@needs_ort
def test_ort_valid_options_are_accepted(environment: Environment) -> None:
    backend, model = OnnxRuntimeBackend(), tiny_model()
    for options in (
        (),
        (("quantization", "static"),),
        (("quantization", "dynamic"), ("ep", "auto")),
    ):
        spec = spec_for("onnxruntime", Precision.INT8, 8, *options)
        assert backend.supports(model, spec, environment).ok
