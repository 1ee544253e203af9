"""OpenVINO int8: NNCF post-training quantization through the openvino backend.

Real runs quantize the zoo ``digits-cnn`` (real held-out data, real training-side calibration
samples) and tiny models built here; every OpenVINO IR conversion goes to a per-module cache.
"""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from accelscope.accuracy.fidelity import compare_outputs
from accelscope.backends import openvino as ov_backend
from accelscope.backends.base import Batch
from accelscope.backends.onnx_export import CACHE_ENV
from accelscope.backends.openvino import OpenVinoBackend
from accelscope.engine.accuracy_check import calibration_batches, run_chunked
from accelscope.errors import MeasurementError, NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.models.inputs import make_batch
from accelscope.models.loading import load_model
from accelscope.spec import Precision, RunSpec, TensorSpec

needs_nncf = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
    reason="openvino and nncf not installed",
)


@pytest.fixture(scope="module", autouse=True)
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every conversion of this module goes to one private cache directory."""
    path = tmp_path_factory.mktemp("exports")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(path))
        yield path


@pytest.fixture(scope="module")
def digits() -> LoadedModel:
    return load_model("digits-cnn")


class TinyEncoder(nn.Module):
    """One self-attention block with a layer norm and an MLP: (N, 8, 16) -> (N, 8, 16)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1)
        x = self.norm(x + self.proj(attention @ v))
        return x + self.mlp(x)  # type: ignore[no-any-return]


def tiny_encoder() -> LoadedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = TinyEncoder().eval()
    return LoadedModel(
        ref="tiny-encoder",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 8, 16), dtype="float32"),),
        digest="test:tiny-encoder",
        task=Task.ENCODER,
        module=module,
    )


def spec_for(precision: Precision, batch: int, *options: tuple[str, str]) -> RunSpec:
    return RunSpec(
        model="m",
        backend="openvino",
        precision=precision,
        batch_size=batch,
        threads=2,
        options=tuple(options),
    )


def held_out(model: LoadedModel, spec: RunSpec, calibration: list[Batch]) -> list[torch.Tensor]:
    """The backend's outputs on every held-out digits image."""
    assert model.eval_data is not None
    runner = OpenVinoBackend().prepare(model, spec, calibration)
    try:
        return run_chunked(runner, model.eval_data.inputs, spec.batch_size)
    finally:
        runner.close()


def top1(outputs: list[torch.Tensor], model: LoadedModel) -> float:
    assert model.eval_data is not None
    return float((outputs[0].argmax(1) == model.eval_data.labels).float().mean())


@needs_nncf
@pytest.mark.parametrize("hint", ["latency", "throughput"])
def test_int8_digits_agrees_with_fp32(
    digits: LoadedModel, hint: str, capfd: pytest.CaptureFixture[str]
) -> None:
    calibration = calibration_batches(digits, 32)
    fp32 = held_out(digits, spec_for(Precision.FP32, 32, ("hint", hint)), calibration)
    capfd.readouterr()
    int8 = held_out(digits, spec_for(Precision.INT8, 32, ("hint", hint)), calibration)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # no NNCF log lines or progress bars
    assert len(int8) == len(fp32) and int8[0].shape == fp32[0].shape
    assert int8[0].dtype == torch.float32
    fidelity = compare_outputs(int8, fp32, classifier=True)
    assert fidelity.top1_agreement is not None and fidelity.top1_agreement >= 0.97
    assert fidelity.rel_l2 < 0.2
    assert top1(int8, digits) >= top1(fp32, digits) - 0.02


@needs_nncf
def test_int8_runs_convolutions_in_int8(digits: LoadedModel) -> None:
    runner = OpenVinoBackend().prepare(
        digits, spec_for(Precision.INT8, 32), calibration_batches(digits, 32)
    )
    try:
        executed = runner._compiled.get_runtime_model()  # type: ignore[attr-defined]
    finally:
        runner.close()
    kinds: Counter[tuple[str, str]] = Counter()
    for op in executed.get_ordered_ops():
        info = op.get_rt_info()
        kinds[(info["layerType"].astype(str), info["runtimePrecision"].astype(str))] += 1
    int8_convolutions = sum(
        n for (kind, p), n in kinds.items() if kind == "Convolution" and p in ("u8", "i8")
    )
    assert int8_convolutions >= 1, kinds


@needs_nncf
def test_int8_calibrates_on_exactly_the_batches_passed_in(
    digits: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nncf

    calls: list[dict[str, Any]] = []
    real_quantize = nncf.quantize

    def recording_quantize(model: Any, dataset: Any, **kwargs: Any) -> Any:
        calls.append({"items": list(dataset.get_inference_data()), **kwargs})
        return real_quantize(model, dataset, **kwargs)

    monkeypatch.setattr(nncf, "quantize", recording_quantize)
    calibration = calibration_batches(digits, 16)  # not the configuration's batch size
    assert len(calibration) == 4
    runner = OpenVinoBackend().prepare(digits, spec_for(Precision.INT8, 32), calibration)
    runner.close()

    (call,) = calls
    assert call["subset_size"] == len(calibration)
    assert call["preset"] is nncf.QuantizationPreset.PERFORMANCE
    assert call["model_type"] is None
    assert call["advanced_parameters"].batchwise_statistics is True
    assert len(call["items"]) == len(calibration)
    for item, batch in zip(call["items"], calibration, strict=True):
        assert list(item) == [0]
        np.testing.assert_array_equal(item[0], batch["pixels"].numpy())


@needs_nncf
def test_int8_calibration_batches_of_mixed_sizes(digits: LoadedModel) -> None:
    sizes = calibration_batches(digits, 24)[:2] + calibration_batches(digits, 8)[:3]
    assert {int(batch["pixels"].shape[0]) for batch in sizes} == {8, 24}
    fp32 = held_out(digits, spec_for(Precision.FP32, 32), sizes)
    int8 = held_out(digits, spec_for(Precision.INT8, 32), sizes)
    agreement = compare_outputs(int8, fp32, classifier=True).top1_agreement
    assert agreement is not None and agreement >= 0.97


@needs_nncf
def test_int8_without_calibration_is_refused(digits: LoadedModel) -> None:
    with pytest.raises(MeasurementError, match="calibration"):
        OpenVinoBackend().prepare(digits, spec_for(Precision.INT8, 32))


@needs_nncf
def test_int8_transformer_uses_the_mixed_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    import nncf

    presets: list[Any] = []
    real_quantize = nncf.quantize

    def recording_quantize(model: Any, dataset: Any, **kwargs: Any) -> Any:
        presets.append((kwargs["preset"], kwargs["model_type"]))
        return real_quantize(model, dataset, **kwargs)

    monkeypatch.setattr(nncf, "quantize", recording_quantize)
    model = tiny_encoder()
    calibration = calibration_batches(model, 4)
    batch = make_batch(model.inputs, 4, seed=7)
    outputs = {}
    for precision in (Precision.FP32, Precision.INT8):
        runner = OpenVinoBackend().prepare(model, spec_for(precision, 4), calibration)
        try:
            outputs[precision] = runner.outputs(runner.run(runner.feed(batch)))
        finally:
            runner.close()
    assert presets == [(nncf.QuantizationPreset.MIXED, nncf.ModelType.TRANSFORMER)]
    assert compare_outputs(outputs[Precision.INT8], outputs[Precision.FP32]).rel_l2 < 0.2


def test_int8_without_nncf_says_how_to_install(
    environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "nncf" else real_find_spec(name, *a),
    )
    backend, model = OpenVinoBackend(), tiny_encoder()
    verdict = backend.supports(model, spec_for(Precision.INT8, 8), environment)
    if importlib.util.find_spec("openvino") is None:
        assert not verdict.ok and "openvino is not installed" in verdict.reason
        return
    assert not verdict.ok
    assert verdict.reason.startswith("openvino int8 not available:")
    assert "pip install nncf" in verdict.reason
    assert backend.supports(model, spec_for(Precision.FP32, 8), environment).ok
    with pytest.raises(NotAvailableError, match="pip install nncf"):
        backend.prepare(model, spec_for(Precision.INT8, 8), calibration_batches(model, 8))


def test_broken_nncf_import_is_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nncf", None)  # makes ``import nncf`` raise ImportError
    with pytest.raises(NotAvailableError, match=r"nncf cannot be imported.*pip install nncf"):
        ov_backend._import_nncf()
