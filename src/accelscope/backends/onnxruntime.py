"""ONNX Runtime backend for ONNX model files (CPU execution provider; CUDA EP where present)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.errors import MeasurementError, ModelLoadError, NotAvailableError
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = ["OnnxRuntimeBackend"]

_INSTALL_HINT = "pip install 'accelscope[onnx]' -c constraints.txt"


class _OrtRunner(Runner):
    def __init__(self, session: Any, spec: RunSpec, input_names: tuple[str, ...]) -> None:
        super().__init__(spec)
        self._session = session
        self._names = input_names

    def feed(self, batch: Batch) -> Any:
        return {name: batch[name].numpy() for name in self._names}

    def run(self, feed: Any) -> Any:
        return self._session.run(None, feed)

    def outputs(self, raw: Any) -> list[torch.Tensor]:
        import numpy as np
        import torch

        return [torch.from_numpy(np.asarray(array, dtype=np.float32)) for array in raw]


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime with graph optimisations on; threads pinned through the session options."""

    name = "onnxruntime"
    description = "ONNX Runtime (CPU EP; CUDA EP where installed)"
    formats = frozenset({ModelFormat.ONNX})
    precisions = frozenset({Precision.FP32})
    devices = frozenset({Device.CPU, Device.CUDA})

    def available(self, env: Environment) -> Availability:
        if importlib.util.find_spec("onnxruntime") is None:
            return Availability(False, f"onnxruntime is not installed ({_INSTALL_HINT})")
        return Availability(True)

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        base = super().supports(model, spec, env)
        if not base.ok or spec.device is Device.CPU:
            return base
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return Availability(False, "this onnxruntime build has no CUDAExecutionProvider")
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if model.onnx_path is None:
            raise MeasurementError(f"model {model.ref!r} has no ONNX file")
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise NotAvailableError(f"onnxruntime not available: {exc} ({_INSTALL_HINT})") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = spec.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = (
            ["CUDAExecutionProvider", "CPUExecutionProvider"]
            if spec.device is Device.CUDA
            else ["CPUExecutionProvider"]
        )
        try:
            session = ort.InferenceSession(str(model.onnx_path), options, providers=providers)
        except Exception as exc:
            raise ModelLoadError(
                f"onnxruntime cannot load {model.onnx_path}: {str(exc).splitlines()[0]}"
            ) from exc
        return _OrtRunner(session, spec, model.input_names)
