"""OpenVINO backend (CPU plugin): fp32, bf16, and int8 through NNCF when it is installed.

PyTorch models are converted with ``openvino.convert_model`` (example inputs from the model's
input spec) and the converted model is cached as OpenVINO IR next to the ONNX exports, so the
conversion (seconds to tens of seconds) is paid once per model, not once per configuration.
ONNX files are read directly. The model is reshaped to the configuration's fixed batch size and
compiled with ``INFERENCE_NUM_THREADS`` = the spec's threads and an explicit inference precision
(f32 must be explicit: on CPUs with AMX or AVX512-BF16 OpenVINO would otherwise pick bf16).

Performance hint (option ``hint``): ``latency`` (default) compiles one stream that uses all the
threads for each inference. ``throughput`` lets OpenVINO split the threads into several streams;
one synchronous request would then only use one stream, so the runner splits each batch into as
many equal sub-batches as there are streams and runs them as parallel asynchronous requests
(outputs are joined along dim 0; models whose inputs do not lead with the batch dimension run
unsplit). One timed call still processes exactly one batch, so ``benchmark_app -hint
throughput``, which keeps several whole batches in flight, can report a few per cent more at the
same ``-shape``: it is measuring more work in flight, not a faster engine.

int8 is NNCF post-training static quantization (``nncf.quantize``) of the OpenVINO model:
FakeQuantize nodes on the activations and weights of convolutions and matmuls, activation ranges
from the ``calibration`` batches (the same training-side samples the other int8 paths calibrate
on; every batch is used, as given: the model is reshaped to their size for the statistics, then
to the configuration's). Preset ``performance`` (symmetric int8 throughout, the CPU plugin's
fastest kernels) for most models; ``mixed`` (asymmetric activations) with NNCF's transformer
patterns for encoders and language models; NNCF's fast bias correction stays on. The CPU plugin
runs the quantized layers in int8 (VNNI/AMX where present) and everything else at the explicit
f32 inference precision. NNCF's log lines and progress bars are silenced for the call.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.onnx_export import (
    cached_file,
    default_cache_dir,
    export_key,
    export_onnx,
    quiet,
)
from accelscope.errors import MeasurementError, NotAvailableError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat, Task
from accelscope.models.inputs import make_batch
from accelscope.spec import BATCH_DIM, Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = ["OpenVinoBackend", "int8_model"]

_INSTALL_HINT = "pip install 'accelscope[openvino]' -c constraints.txt"
_NNCF_HINT = "NNCF post-training quantization needs nncf (pip install nncf)"
_TRANSFORMER_TASKS = (Task.ENCODER, Task.LANGUAGE_MODEL)
_PRECISION_HINTS = {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.INT8: "f32"}


@functools.lru_cache(maxsize=1)
def _core() -> Any:
    import openvino as ov

    return ov.Core()


def _cpu_has_bf16() -> bool:
    try:
        capabilities = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception:  # noqa: BLE001 - no CPU plugin: the compile will say so
        return False
    return "BF16" in capabilities


def _convert_torch(model: LoadedModel, path: Path) -> None:
    """Convert ``model.module`` with ``openvino.convert_model`` and save it as IR at ``path``."""
    import openvino as ov

    if model.module is None:
        raise MeasurementError(f"model {model.ref!r} has no PyTorch module to convert")
    module = model.module.to("cpu").eval()
    batch = make_batch(model.inputs, 2, seed=0)
    example = tuple(batch[name] for name in model.input_names)
    with quiet():
        converted = ov.convert_model(module, example_input=example)
    ov.save_model(converted, str(path), compress_to_fp16=False)


def _read_model(model: LoadedModel) -> Any:
    """The OpenVINO model for ``model`` (from the IR cache for PyTorch models)."""
    core = _core()
    if model.format is ModelFormat.ONNX:
        if model.onnx_path is None:
            raise MeasurementError(f"model {model.ref!r} has no ONNX file")
        path = model.onnx_path
    else:
        directory = default_cache_dir() / f"openvino-{export_key(model, None)}"
        try:
            path = cached_file(directory, "model.xml", lambda p: _convert_torch(model, p))
        except Exception as exc:  # noqa: BLE001 - the converter raises anything
            try:  # the ONNX exporters trace differently and may succeed where it failed
                path = export_onnx(model, batch_size=None)
            except MeasurementError as onnx_exc:
                why = exception_line(exc, named=True)
                raise MeasurementError(
                    f"openvino cannot convert {model.ref}: {why}; {onnx_exc}"
                ) from exc
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise MeasurementError(
            f"openvino cannot read {path}: {exception_line(exc, named=True)}"
        ) from exc


def _input_order(ov_model: Any, model: LoadedModel) -> list[int]:
    """For each of ``model.input_names``, the index of the matching OpenVINO input."""
    names = [set(port.get_names()) for port in ov_model.inputs]
    if len(names) != len(model.input_names):
        raise MeasurementError(
            f"openvino sees {len(names)} inputs for {model.ref}, the spec declares "
            f"{len(model.input_names)}"
        )
    if model.format is not ModelFormat.ONNX:  # converted from forward(): positional order
        return list(range(len(names)))
    order = []
    for name in model.input_names:
        matches = [i for i, port_names in enumerate(names) if name in port_names]
        if not matches:
            raise MeasurementError(f"the ONNX model {model.ref} has no input called {name!r}")
        order.append(matches[0])
    return order


def _reshape(ov_model: Any, model: LoadedModel, order: list[int], batch_size: int) -> None:
    import openvino as ov

    shapes = {
        index: ov.PartialShape(list(spec.concrete_shape(batch_size)))
        for index, spec in zip(order, model.inputs, strict=True)
    }
    try:
        ov_model.reshape(shapes)
    except Exception as exc:
        why = exception_line(exc, named=True)
        raise MeasurementError(
            f"openvino cannot reshape {model.ref} to batch {batch_size}: {why}"
        ) from exc


@contextlib.contextmanager
def _quiet_nncf() -> Iterator[None]:
    """NNCF's log lines (its own stdout handler) at ERROR, and its progress bars, warnings and any
    other stdout/stderr chatter swallowed, for the block."""
    nncf_logger = logging.getLogger("nncf")
    levels = [nncf_logger.level, *(handler.level for handler in nncf_logger.handlers)]
    nncf_logger.setLevel(logging.ERROR)  # what nncf.set_log_level does, but restorable
    for handler in nncf_logger.handlers:
        handler.setLevel(logging.ERROR)
    try:
        with quiet():
            yield
    finally:
        nncf_logger.setLevel(levels[0])
        for handler, level in zip(nncf_logger.handlers, levels[1:], strict=False):
            handler.setLevel(level)


def _import_nncf() -> Any:
    # accelscope works offline: NNCF_CI is NNCF's own switch that turns its usage telemetry off
    os.environ.setdefault("NNCF_CI", "1")
    try:
        with _quiet_nncf():
            import nncf
    except Exception as exc:  # a broken install raises anything on import
        raise NotAvailableError(
            "openvino int8 not available: nncf cannot be imported "
            f"({exception_line(exc, named=True)}); {_NNCF_HINT}"
        ) from exc
    return nncf


def _calibration_rows(model: LoadedModel, calibration: Sequence[Batch]) -> set[int]:
    """The batch sizes among ``calibration`` (empty for inputs without a batch dimension)."""
    return {
        int(batch[spec.name].shape[spec.shape.index(BATCH_DIM)])
        for batch in calibration
        for spec in model.inputs
        if BATCH_DIM in spec.shape
    }


def _quantize_int8(
    ov_model: Any, model: LoadedModel, order: list[int], calibration: Sequence[Batch]
) -> Any:
    """``ov_model`` quantized to int8 by NNCF's post-training quantization, calibrated on every
    batch of ``calibration`` as given: the model is reshaped to the calibration batches' size
    (left dynamic when they differ), the caller reshapes the result to its own batch size."""
    nncf = _import_nncf()
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters

    if not calibration:
        raise MeasurementError(
            "openvino int8 static quantization needs calibration batches and got none"
        )
    names = model.input_names
    rows = _calibration_rows(model, calibration)
    _reshape(ov_model, model, order, rows.pop() if len(rows) == 1 else -1)

    def to_inputs(batch: Batch) -> dict[int, Any]:
        return {
            index: batch[name].detach().cpu().contiguous().numpy()
            for index, name in zip(order, names, strict=True)
        }

    transformer = model.task in _TRANSFORMER_TASKS
    batch_first = all(spec.shape[:1] == (BATCH_DIM,) for spec in model.inputs)
    # Each dataset item is a whole batch: statistics per sample, as NNCF sets itself for a
    # batched DataLoader (not for transformers, where it warns that this may cost accuracy).
    batchwise = batch_first and not transformer
    try:
        with _quiet_nncf():
            return nncf.quantize(
                ov_model,
                nncf.Dataset(list(calibration), to_inputs),
                preset=(
                    nncf.QuantizationPreset.MIXED
                    if transformer
                    else nncf.QuantizationPreset.PERFORMANCE
                ),
                target_device=nncf.TargetDevice.CPU,
                subset_size=len(calibration),
                model_type=nncf.ModelType.TRANSFORMER if transformer else None,
                advanced_parameters=AdvancedQuantizationParameters(batchwise_statistics=batchwise),
            )
    except Exception as exc:
        raise MeasurementError(
            f"nncf int8 quantization of {model.ref} failed: {exception_line(exc, named=True)}"
        ) from exc


def int8_model(model: LoadedModel, calibration: Sequence[Batch], batch_size: int) -> Any:
    """``model`` as the OpenVINO model the backend's int8 configuration compiles: NNCF
    post-training quantization on ``calibration``, reshaped to ``batch_size`` (for saving as IR
    and handing to other tools, e.g. ``benchmark_app``)."""
    ov_model = _read_model(model)
    order = _input_order(ov_model, model)
    quantized = _quantize_int8(ov_model, model, order, calibration)
    _reshape(quantized, model, order, batch_size)
    return quantized


def _parallel_parts(batch_size: int, streams: int) -> int:
    """Largest divisor of ``batch_size`` not above ``streams`` (equal sub-batches)."""
    return max(d for d in range(1, max(1, min(batch_size, streams)) + 1) if batch_size % d == 0)


@dataclass(frozen=True)
class _Feed:
    """Per-request input tensors (sharing memory with ``arrays``, which they must outlive)."""

    arrays: tuple[Any, ...]
    parts: tuple[dict[int, Any], ...]


class _OpenVinoRunner(Runner):
    """Runs one batch per call: one synchronous request, or ``parts`` parallel requests."""

    def __init__(
        self, compiled: Any, spec: RunSpec, names: tuple[str, ...], order: list[int], parts: int
    ) -> None:
        super().__init__(spec)
        self._compiled = compiled
        self._names = names
        self._order = order
        self._parts = parts
        self._requests = [compiled.create_infer_request() for _ in range(parts)]

    def feed(self, batch: Batch) -> _Feed:
        import numpy as np
        import openvino as ov

        arrays = tuple(
            np.ascontiguousarray(batch[name].detach().cpu().numpy()) for name in self._names
        )
        split = [np.split(array, self._parts) for array in arrays]
        parts = tuple(
            {
                index: ov.Tensor(pieces[part], shared_memory=True)
                for index, pieces in zip(self._order, split, strict=True)
            }
            for part in range(self._parts)
        )
        return _Feed(arrays=arrays, parts=parts)

    def run(self, feed: Any) -> Any:
        if self._parts == 1:
            return [self._requests[0].infer(feed.parts[0]).to_tuple()]
        for request, inputs in zip(self._requests, feed.parts, strict=True):
            request.start_async(inputs)
        for request in self._requests:
            request.wait()
        return [
            tuple(tensor.data.copy() for tensor in request.output_tensors)
            for request in self._requests
        ]

    def outputs(self, raw: Any) -> list[torch.Tensor]:
        import numpy as np
        import torch

        merged = [np.concatenate(pieces) for pieces in zip(*raw, strict=True)]
        return [torch.from_numpy(np.asarray(array, dtype=np.float32)) for array in merged]

    def close(self) -> None:
        self._requests.clear()
        self._compiled = None


class OpenVinoBackend(Backend):
    """OpenVINO on the CPU: fp32 and bf16 by inference-precision hint; int8 through NNCF.

    Option ``hint``: ``latency`` (default; one stream) or ``throughput`` (several streams kept
    busy with parallel sub-batches).
    """

    name = "openvino"
    description = "OpenVINO CPU plugin (fp32, bf16; int8 via NNCF)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED, ModelFormat.ONNX})
    precisions = frozenset({Precision.FP32, Precision.BF16, Precision.INT8})
    devices = frozenset({Device.CPU})
    options: ClassVar[dict[str, tuple[str, ...]]] = {"hint": ("latency", "throughput")}

    def available(self, env: Environment) -> Availability:
        if importlib.util.find_spec("openvino") is None:
            return Availability(False, f"openvino is not installed ({_INSTALL_HINT})")
        return Availability(True)

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        base = super().supports(model, spec, env)
        if not base.ok:
            return base
        if spec.precision is Precision.INT8 and importlib.util.find_spec("nncf") is None:
            return Availability(False, f"openvino int8 not available: {_NNCF_HINT}")
        if spec.precision is Precision.BF16 and not _cpu_has_bf16():
            return Availability(
                False,
                "OpenVINO's CPU plugin reports no BF16 capability here (it would run bf16 as f32; "
                "it needs AVX512-BF16 or AMX)",
            )
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if importlib.util.find_spec("openvino") is None:
            raise NotAvailableError(f"openvino not available ({_INSTALL_HINT})")
        if spec.precision is Precision.INT8 and importlib.util.find_spec("nncf") is None:
            raise NotAvailableError(f"openvino int8 not available: {_NNCF_HINT}")
        ov_model = _read_model(model)
        order = _input_order(ov_model, model)
        hint = dict(spec.options).get("hint", "latency")
        config: dict[str, Any] = {
            "INFERENCE_NUM_THREADS": spec.threads,
            "INFERENCE_PRECISION_HINT": _PRECISION_HINTS[spec.precision],
            "PERFORMANCE_HINT": hint.upper(),
        }
        if spec.precision is Precision.INT8:
            ov_model = _quantize_int8(ov_model, model, order, calibration)
        _reshape(ov_model, model, order, spec.batch_size)
        compiled = self._compile(ov_model, config, model)
        parts = 1
        batch_first = all(t.shape[:1] == (BATCH_DIM,) for t in model.inputs)
        if hint == "throughput" and batch_first:
            streams = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            parts = _parallel_parts(spec.batch_size, streams)
            if parts > 1:
                _reshape(ov_model, model, order, spec.batch_size // parts)
                compiled = self._compile(ov_model, config, model)
        return _OpenVinoRunner(compiled, spec, model.input_names, order, parts)

    @staticmethod
    def _compile(ov_model: Any, config: dict[str, Any], model: LoadedModel) -> Any:
        try:
            return _core().compile_model(ov_model, "CPU", config)
        except Exception as exc:
            raise MeasurementError(
                f"openvino cannot compile {model.ref}: {exception_line(exc, named=True)}"
            ) from exc
