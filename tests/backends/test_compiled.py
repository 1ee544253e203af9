"""The torch.compile backend on the trained digits CNN: fidelity per precision, options, errors.

Compiles are slow (seconds each on two cores), so every compiled runner is built once per module
and shared by the tests that read it.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Iterator

import pytest
import torch
from torch._dynamo.utils import counters

from accelscope.accuracy.fidelity import Fidelity, compare_outputs
from accelscope.backends.base import Batch, Runner
from accelscope.backends.compiled import CompileBackend, cxx_compiler, inductor_options
from accelscope.backends.eager import EagerBackend
from accelscope.backends.quantize import torchao_installed
from accelscope.backends.registry import get_backend, register_backend
from accelscope.engine.accuracy_check import (
    build_accuracy_check,
    calibration_batches,
    with_reference,
)
from accelscope.engine.configuration import measure_config
from accelscope.errors import BadInputError, MeasurementError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.loading import load_model
from accelscope.result import Status
from accelscope.spec import Precision, RunSpec, TensorSpec

pytestmark = [
    pytest.mark.skipif(cxx_compiler() is None, reason="inductor needs a C++ compiler"),
    pytest.mark.slow,  # the module's fixtures compile the model: about 100 s
]
INT8_OK = torchao_installed() and platform.machine().lower() in ("x86_64", "amd64")
needs_int8 = pytest.mark.skipif(not INT8_OK, reason="int8 needs torchao on x86")

BATCH = 32


def _spec(precision: Precision, backend: str = "compile", **options: str) -> RunSpec:
    return RunSpec(
        model="digits-cnn",
        backend=backend,
        precision=precision,
        batch_size=BATCH,
        threads=2,
        options=tuple(options.items()),
    )


def _chunks(model: LoadedModel) -> list[Batch]:
    """The 360 held-out digits as full batches (the last one padded by wrapping around)."""
    assert model.eval_data is not None
    pixels = model.eval_data.inputs["pixels"]
    padded = torch.cat([pixels, pixels[: -len(pixels) % BATCH]])
    return [{"pixels": padded[i : i + BATCH]} for i in range(0, len(padded), BATCH)]


def _logits(runner: Runner, batches: list[Batch]) -> list[torch.Tensor]:
    return [torch.cat([runner.outputs(runner.run(runner.feed(b)))[0] for b in batches])]


@pytest.fixture(scope="module")
def digits() -> LoadedModel:
    return load_model("digits-cnn")


@pytest.fixture(scope="module")
def batches(digits: LoadedModel) -> list[Batch]:
    return _chunks(digits)


@pytest.fixture(scope="module")
def reference(digits: LoadedModel, batches: list[Batch]) -> list[torch.Tensor]:
    return _logits(EagerBackend().prepare(digits, _spec(Precision.FP32, "eager")), batches)


@pytest.fixture(scope="module")
def fidelity(
    digits: LoadedModel, batches: list[Batch], reference: list[torch.Tensor]
) -> Iterator[dict[str, Fidelity]]:
    """Fidelity against eager fp32 on the whole eval set, per compiled configuration."""
    backend = CompileBackend()
    calibration = batches[:4]
    configs: dict[str, tuple[RunSpec, list[Batch]]] = {
        "fp32": (_spec(Precision.FP32), []),
        "bf16": (_spec(Precision.BF16), []),
        "fp32-cl-nofreeze": (_spec(Precision.FP32, channels_last="true", freezing="false"), []),
    }
    if INT8_OK:
        configs["int8"] = (_spec(Precision.INT8), calibration)
        configs["int8-dynamic"] = (_spec(Precision.INT8, quantization="dynamic"), [])
    found: dict[str, Fidelity] = {}
    for key, (spec, calib) in configs.items():
        runner = backend.prepare(digits, spec, calib)
        graphs_before = counters["stats"]["unique_graphs"]
        try:
            found[key] = compare_outputs(_logits(runner, batches), reference, classifier=True)
        finally:
            runner.close()
        graphs_compiled[key] = counters["stats"]["unique_graphs"] - graphs_before
    yield found


graphs_compiled: dict[str, int] = {}
"""Graphs dynamo compiled per configuration after ``prepare``, while the eval set ran."""


def test_compiled_in_prepare_never_again(fidelity: dict[str, Fidelity]) -> None:
    # The warm call in prepare compiles; the eval batches (views, padded copies) must reuse it:
    # a recompile would run without freezing (slow fp32, broken int8) inside the timed region.
    assert graphs_compiled == dict.fromkeys(fidelity, 0)


def test_fp32_matches_eager(fidelity: dict[str, Fidelity]) -> None:
    assert fidelity["fp32"].rel_l2 < 1e-4
    assert fidelity["fp32"].top1_agreement == 1.0


def test_channels_last_without_freezing_matches_eager(fidelity: dict[str, Fidelity]) -> None:
    assert fidelity["fp32-cl-nofreeze"].rel_l2 < 1e-4


def test_bf16_autocast_is_close(fidelity: dict[str, Fidelity]) -> None:
    assert fidelity["bf16"].rel_l2 < 2e-2
    assert (fidelity["bf16"].top1_agreement or 0) >= 0.99


@needs_int8
@pytest.mark.parametrize("key", ["int8", "int8-dynamic"])
def test_int8_outputs_track_fp32(fidelity: dict[str, Fidelity], key: str) -> None:
    assert fidelity[key].cosine > 0.99
    assert (fidelity[key].top1_agreement or 0) >= 0.97


@needs_int8
def test_static_int8_without_calibration_is_refused(digits: LoadedModel) -> None:
    with pytest.raises(MeasurementError, match="needs calibration data"):
        CompileBackend().prepare(digits, _spec(Precision.INT8))


@needs_int8
def test_int8_measured_through_the_engine(digits: LoadedModel, environment: Environment) -> None:
    register_backend(CompileBackend())
    backend = get_backend("compile")
    spec = _spec(Precision.INT8, channels_last="true")
    check = with_reference(build_accuracy_check(digits, 64), digits, spec, environment)
    result = measure_config(
        digits,
        spec,
        backend,
        environment,
        timer_config=TimerConfig(budget_s=0.2, min_samples=2, warmup_iters=1, warmup_min_s=0.0),
        accuracy=check,
        calibration=calibration_batches(digits, BATCH),
    )
    assert result.status is Status.OK
    assert result.measurement is not None and result.measurement.throughput_items_per_s > 0
    assert result.accuracy is not None and result.accuracy.fidelity is not None
    assert (result.accuracy.fidelity.top1_agreement or 0) >= 0.97
    assert (result.accuracy.metric_value or 0) > 0.9


@pytest.mark.parametrize(
    "precision", [Precision.FP32, pytest.param(Precision.INT8, marks=needs_int8)]
)
def test_wrong_input_spec_is_bad_input(precision: Precision) -> None:
    model = LoadedModel(
        ref="linear",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 7)),),
        digest="x",
        module=torch.nn.Linear(10, 2),
    )
    spec = RunSpec(model="linear", backend="compile", precision=precision, batch_size=2, threads=1)
    with pytest.raises(BadInputError, match="failed on its first call"):
        CompileBackend().prepare(model, spec, [{"x": torch.randn(2, 7)}])


@needs_int8
def test_int8_with_nothing_to_quantize_is_refused() -> None:
    model = LoadedModel(
        ref="relu",
        format=ModelFormat.TORCH,
        inputs=(TensorSpec(name="x", shape=("N", 7)),),
        digest="x",
        module=torch.nn.ReLU(),
    )
    spec = RunSpec(
        model="relu", backend="compile", precision=Precision.INT8, batch_size=2, threads=1
    )
    with pytest.raises(MeasurementError, match="no convolution or linear layer"):
        CompileBackend().prepare(model, spec, [{"x": torch.randn(2, 7)}])


@needs_int8
def test_int8_refuses_exported_programs(digits: LoadedModel, environment: Environment) -> None:
    exported = dataclasses.replace(digits, format=ModelFormat.EXPORTED)
    verdict = CompileBackend().supports(exported, _spec(Precision.INT8), environment)
    assert not verdict.ok and "torch.export program" in verdict.reason


@pytest.mark.parametrize(
    ("precision", "options", "reason"),
    [
        (Precision.FP32, {"fuse": "true"}, "no option 'fuse'"),
        (Precision.FP32, {"mode": "fast"}, "mode='fast'"),
        (Precision.FP32, {"freezing": "yes"}, "freezing='yes'"),
        (Precision.BF16, {"quantization": "dynamic"}, "applies to int8 only"),
        (Precision.FP16, {}, "CUDA only"),
        (Precision.FP8, {}, "fp8 (torchao float8) runs on CUDA GPUs"),
    ],
)
def test_supports_rejects_with_a_reason(
    digits: LoadedModel,
    environment: Environment,
    precision: Precision,
    options: dict[str, str],
    reason: str,
) -> None:
    verdict = CompileBackend().supports(digits, _spec(precision, **options), environment)
    assert not verdict.ok
    assert reason in verdict.reason


def test_supports_accepts_every_declared_option(
    digits: LoadedModel, environment: Environment
) -> None:
    backend = CompileBackend()
    cuda_only = ("cudnn_benchmark", "inputs")  # CUDA settings: refused here, said so
    for key, values in CompileBackend.options.items():
        precision = {"quantization": Precision.INT8, "weights": Precision.BF16}.get(
            key, Precision.FP32
        )
        for value in values:
            verdict = backend.supports(digits, _spec(precision, **{key: value}), environment)
            if key in cuda_only:
                assert verdict.reason == f"option {key} applies to CUDA devices", (key, value)
            else:
                assert verdict.ok, (key, value, verdict.reason)


def test_no_compiler_or_torchao_is_explained(
    digits: LoadedModel, environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("accelscope.backends.compiled.torchao_installed", lambda: False)
    verdict = CompileBackend().supports(digits, _spec(Precision.INT8), environment)
    assert not verdict.ok and "pip install 'accelscope[torchao]'" in verdict.reason
    monkeypatch.setattr("accelscope.backends.compiled.shutil.which", lambda name: None)
    verdict = CompileBackend().available(environment)
    assert not verdict.ok
    assert verdict.reason == "no C++ compiler found (inductor needs one)"


def test_inductor_options_expand_mode_and_default_to_freezing() -> None:
    assert inductor_options(_spec(Precision.FP32))["freezing"] is True
    tuned = inductor_options(_spec(Precision.FP32, mode="max-autotune", freezing="false"))
    assert tuned["max_autotune"] is True and tuned["freezing"] is False


@needs_int8
def test_a_recompile_for_another_batch_size_keeps_freezing(
    digits: LoadedModel, batches: list[Batch], reference: list[torch.Tensor]
) -> None:
    # Dynamo reads the global freezing flag when it traces: a runner called at a batch size it
    # was not prepared for recompiles, and that recompile must be frozen too (unfrozen static
    # int8 fails in inductor on the quantized-conv weight prepack).
    runner = CompileBackend().prepare(digits, _spec(Precision.INT8), batches[:4])
    try:
        single = runner.outputs(runner.run(runner.feed({"pixels": batches[0]["pixels"][:1]})))[0]
    finally:
        runner.close()
    assert single.shape[0] == 1
    assert int(single.argmax(dim=1)) == int(reference[0][0].argmax())
