"""ONNX Runtime backend: ONNX files, or PyTorch models exported to ONNX; fp32 and int8.

Execution providers: CPU; CUDA where this onnxruntime build has it; TensorRT with ``ep=tensorrt``.

int8 comes in two flavours, chosen with the ``quantization`` option:

* ``static`` (the default): calibrated QDQ quantization, weights per channel. Activations are
  uint8 and weights int8 (U8S8). On CPUs with VNNI (AVX512-VNNI, AVX-VNNI) or AMX, MLAS runs
  U8S8 convolutions and matmuls on the ``vpdpbusd``/AMX int8 path with no saturation; measured on
  ResNet-50 (2 threads, batch 8) U8S8 ran ~4x faster than fp32 with the same top-1, while S8S8
  (int8 activations) fell back to slower kernels and did not beat fp32. On CPUs without VNNI the
  weights use 7 bits (``reduce_range``) to avoid the ``vpmaddubsw`` saturation ORT warns about.
* ``dynamic``: weights quantized ahead, activations at run time. Convolutions get uint8 weights
  (``ConvInteger`` has fast kernels only for U8U8) and matmuls int8 weights (S8 ran BERT-base
  ~2x faster than U8 here). No calibration needed.

ONNX Runtime's CPU provider has no real bf16/fp16 path, so those precisions are refused.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.onnx_export import export_onnx
from accelscope.errors import MeasurementError, ModelLoadError, NotAvailableError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.spec import BATCH_DIM, Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = ["OnnxRuntimeBackend", "quantize_onnx"]

_INSTALL_HINT = "pip install 'accelscope[onnx]' -c constraints.txt"
_VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")


def _has_vnni() -> bool:
    from accelscope.hardware.cpu import read_cpu_info

    try:
        isa = read_cpu_info().isa
    except Exception:  # noqa: BLE001 - unknown CPU: assume the careful setting
        return False
    return any(feature in isa for feature in _VNNI)


def _rebatch(batches: Sequence[Batch], names: Sequence[str], batch_size: int | None) -> list[Any]:
    """All calibration samples as numpy feeds of exactly ``batch_size`` rows (the exported graph
    has a fixed batch); a short last chunk is padded by repeating its last row. ``None`` (inputs
    without a batch dimension): the batches as they are."""
    import numpy as np

    if batch_size is None:
        return [{name: b[name].detach().cpu().numpy() for name in names} for b in batches]
    if not batches:
        return []
    columns = {
        name: np.concatenate([b[name].detach().cpu().numpy() for b in batches]) for name in names
    }
    total = len(next(iter(columns.values())))
    feeds = []
    for start in range(0, total, batch_size):
        feed = {}
        for name, values in columns.items():
            chunk = values[start : start + batch_size]
            if len(chunk) < batch_size:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - len(chunk), 0)])
            feed[name] = np.ascontiguousarray(chunk)
        feeds.append(feed)
    return feeds


class _CalibrationReader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over prepared numpy feeds."""

    def __init__(self, feeds: list[Any]) -> None:
        self._feeds = feeds
        self._iter: Iterator[Any] = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = iter(self._feeds)

    def __iter__(self) -> _CalibrationReader:
        return self

    def __next__(self) -> dict[str, Any]:
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item

    def __len__(self) -> int:
        return len(self._feeds)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._iter = iter(self._feeds[start_index:end_index])


def quantize_onnx(source: Path, workdir: Path, mode: str, calibration: list[Any]) -> Path:
    """Quantize ``source`` into ``workdir``; returns the int8 model's path."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.registry import IntegerOpsRegistry
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = workdir / "prepared.onnx"
    try:  # shape inference + graph fusions (Conv+BN, ...) give the quantizer cleaner patterns
        quant_pre_process(str(source), str(prepared))
    except Exception:  # noqa: BLE001 - optional step; quantize the original instead
        prepared = source
    output = workdir / f"{mode}.onnx"
    if mode == "static":
        quantize_static(
            str(prepared),
            str(output),
            _CalibrationReader(calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            reduce_range=not _has_vnni(),
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        return output
    convs = workdir / "dynamic-conv.onnx"
    quantize_dynamic(
        str(prepared), str(convs), op_types_to_quantize=["Conv"], weight_type=QuantType.QUInt8
    )
    others = sorted(set(IntegerOpsRegistry) - {"Conv"})
    quantize_dynamic(str(convs), str(output), op_types_to_quantize=others)
    return output


class _OrtRunner(Runner):
    def __init__(
        self,
        session: Any,
        spec: RunSpec,
        input_names: tuple[str, ...],
        notes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(spec)
        self._session = session
        self._names = input_names
        self._notes = notes

    def notes(self) -> tuple[str, ...]:
        return self._notes

    def feed(self, batch: Batch) -> Any:
        return {name: batch[name].detach().cpu().contiguous().numpy() for name in self._names}

    def run(self, feed: Any) -> Any:
        return self._session.run(None, feed)

    def outputs(self, raw: Any) -> list[torch.Tensor]:
        import numpy as np
        import torch

        return [torch.from_numpy(np.asarray(array, dtype=np.float32)) for array in raw]


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime with all graph optimisations; threads pinned through the session options.

    PyTorch models are exported to ONNX for the configuration's fixed batch size (cached, see
    :mod:`accelscope.backends.onnx_export`): a fixed shape cannot hide a batch size the tracer
    baked into the graph, and lets ORT fold shape computations. Options: ``quant``
    (``static``/``dynamic``, int8 only; default ``static``) and ``ep`` (``auto``: CPU or CUDA
    by device; ``tensorrt``).
    """

    name = "onnxruntime"
    description = "ONNX Runtime (CPU EP; CUDA/TensorRT EP where installed); fp32, int8"
    formats = frozenset({ModelFormat.ONNX, ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset({Precision.FP32, Precision.INT8})
    devices = frozenset({Device.CPU, Device.CUDA})
    options: ClassVar[dict[str, tuple[str, ...]]] = {
        "quantization": ("static", "dynamic"),
        "ep": ("auto", "tensorrt"),
    }
    tf32_control = True

    def available(self, env: Environment) -> Availability:
        if importlib.util.find_spec("onnxruntime") is None:
            return Availability(False, f"onnxruntime is not installed ({_INSTALL_HINT})")
        return Availability(True)

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        low_float = spec.precision in (Precision.BF16, Precision.FP16)
        if low_float and spec.device is Device.CPU and self.available(env).ok:
            return Availability(
                False,
                f"ONNX Runtime has no real {spec.precision.value} path on the CPU (its CPU "
                "provider would cast around fp32 kernels); use eager or openvino for "
                f"{spec.precision.value}",
            )
        base = super().supports(model, spec, env)
        if not base.ok:
            return base
        options = dict(spec.options)
        if "quantization" in options and spec.precision is not Precision.INT8:
            return Availability(False, "option quant applies to precision int8 only")
        if options.get("quantization") == "dynamic" and spec.device is not Device.CPU:
            return Availability(False, "dynamic int8 kernels run on the CPU provider only")
        if options.get("ep") == "tensorrt":
            if spec.device is not Device.CUDA:
                return Availability(False, "ep=tensorrt runs on device cuda only")
            provider = "TensorrtExecutionProvider"
        elif spec.device is Device.CUDA:
            provider = "CUDAExecutionProvider"
        else:
            return Availability(True)
        if spec.device is Device.CUDA and not env.gpus:
            return Availability(False, "no CUDA device found on this machine")
        import onnxruntime as ort

        if provider not in ort.get_available_providers():
            return Availability(
                False, f"this onnxruntime build has no {provider} (pip install onnxruntime-gpu)"
            )
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise NotAvailableError(f"onnxruntime not available: {exc} ({_INSTALL_HINT})") from exc
        options = dict(spec.options)
        quant = options.get("quantization", "static")
        if spec.precision is Precision.INT8 and quant == "static" and not calibration:
            raise MeasurementError(
                "int8 static quantization needs calibration batches and got none "
                "(give calibration data, or use option quantization=dynamic)"
            )
        source = self._onnx_file(model, spec.batch_size)
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = spec.threads
        session_options.inter_op_num_threads = 1
        session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = self._providers(spec, options.get("ep", "auto"))
        with tempfile.TemporaryDirectory(prefix="accelscope-ort-") as workdir:
            path = source
            if spec.precision is Precision.INT8:
                try:
                    batched = any(BATCH_DIM in t.shape for t in model.inputs)
                    rows = spec.batch_size if batched else None
                    feeds = _rebatch(calibration, model.input_names, rows)
                    path = quantize_onnx(source, Path(workdir), quant, feeds)
                except Exception as exc:
                    raise MeasurementError(
                        f"onnxruntime {quant} int8 quantization of {model.ref} failed: "
                        f"{type(exc).__name__}: {exception_line(exc)}"
                    ) from exc
            try:
                session = ort.InferenceSession(str(path), session_options, providers=providers)
            except Exception as exc:
                raise ModelLoadError(
                    f"onnxruntime cannot load {path.name} for {model.ref}: {exception_line(exc)}"
                ) from exc
        return _OrtRunner(session, spec, model.input_names, _tf32_notes(spec, options))

    @staticmethod
    def _onnx_file(model: LoadedModel, batch_size: int) -> Path:
        if model.format is ModelFormat.ONNX:
            if model.onnx_path is None:
                raise MeasurementError(f"model {model.ref!r} has no ONNX file")
            return model.onnx_path
        return export_onnx(model, batch_size=batch_size)

    @staticmethod
    def _providers(spec: RunSpec, ep: str) -> list[Any]:
        if spec.device is Device.CPU:
            return ["CPUExecutionProvider"]
        cuda_options = {  # fp32 is IEEE unless asked: the CUDA EP's own default is TF32
            "device_id": str(spec.device_index),
            "use_tf32": "1" if spec.tf32 else "0",
        }
        gpu: list[Any] = [("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"]
        if ep != "tensorrt":
            return gpu
        trt_options = {
            "device_id": str(spec.device_index),
            "trt_int8_enable": spec.precision is Precision.INT8,
        }
        return [("TensorrtExecutionProvider", trt_options), *gpu]


def _tf32_notes(spec: RunSpec, options: dict[str, str]) -> tuple[str, ...]:
    """What this configuration's fp32 is, where it is not what ``spec.tf32`` asked: the
    TensorRT execution provider builds fp32 layers with TF32 allowed (TensorRT's default) and
    has no option to forbid it."""
    if spec.device is Device.CUDA and options.get("ep") == "tensorrt" and not spec.tf32:
        return (
            "fp32 here is not IEEE fp32: the TensorRT execution provider allows TF32 in fp32 "
            "layers (TensorRT's default; it has no option to turn it off)",
        )
    return ()
