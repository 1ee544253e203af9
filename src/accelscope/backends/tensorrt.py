"""TensorRT backend through Torch-TensorRT's dynamo frontend (CUDA devices only).

``torch_tensorrt.compile(module, ir="dynamo", inputs=[...], enabled_precisions={...})`` builds
one TensorRT engine for the configuration's fixed input shapes; the build time is recorded as
``prepare_s``.

Precisions: fp32 (IEEE: TF32 off unless the configuration asks for it, ``RunSpec.tf32``), fp16,
bf16 (compute capability >= 8.0).
int8 and fp8 are explicit quantization: NVIDIA ModelOpt (``nvidia-modelopt``) inserts calibrated
quantize/dequantize nodes into a copy of the model (per-tensor activations, per-channel weights),
and TensorRT fuses them into int8/fp8 kernels; fp8 needs compute capability >= 8.9 (Ada, Hopper).
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.eager import TorchRunner, own_module, torch_device
from accelscope.errors import MeasurementError, NotAvailableError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.inputs import torch_dtype
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = ["TensorRtBackend"]

_INSTALL_HINT = "pip install torch-tensorrt (a build matching the installed torch)"
_MODELOPT_HINT = "pip install nvidia-modelopt"
_MIN_CC = {Precision.BF16: (8, 0), Precision.FP8: (8, 9)}
_QUANT_CONFIGS = {Precision.INT8: "INT8_DEFAULT_CFG", Precision.FP8: "FP8_DEFAULT_CFG"}


def _enabled_precisions(precision: Precision) -> set[Any]:
    import torch

    return {
        Precision.FP32: {torch.float32},
        Precision.FP16: {torch.float16},
        Precision.BF16: {torch.bfloat16},
        Precision.INT8: {torch.int8},
        Precision.FP8: {torch.float8_e4m3fn},
    }[precision]


def _quantize(module: Any, precision: Precision, calibration: Sequence[Batch], names: Any) -> Any:
    """A calibrated copy of ``module`` with ModelOpt Q/DQ nodes for ``precision``."""
    import modelopt.torch.quantization as mtq
    import torch

    if not calibration:
        raise MeasurementError(f"tensorrt {precision.value} needs calibration batches, got none")
    quantized = copy.deepcopy(module)
    device = next(module.parameters()).device

    def forward_loop(target: Any) -> None:
        with torch.no_grad():
            for batch in calibration:
                target(*(batch[name].to(device) for name in names))

    config = getattr(mtq, _QUANT_CONFIGS[precision])
    try:
        mtq.quantize(quantized, config, forward_loop=forward_loop)
    except Exception as exc:
        raise MeasurementError(
            f"modelopt {precision.value} quantization failed: {exception_line(exc, named=True)}"
        ) from exc
    return quantized


class _TensorRtRunner(TorchRunner):
    def __init__(self, compiled: Any, spec: RunSpec, names: tuple[str, ...]) -> None:
        super().__init__(spec)
        self._compiled = compiled
        self._names = names

    def feed(self, batch: Batch) -> list[torch.Tensor]:
        return [batch[name].to(self._device).contiguous() for name in self._names]

    def run(self, feed: Any) -> Any:
        import torch

        with torch.inference_mode():
            return self._compiled(*feed)

    def close(self) -> None:
        self._compiled = None
        super().close()


class TensorRtBackend(Backend):
    """TensorRT engines built by Torch-TensorRT (dynamo IR) for fixed input shapes, on CUDA."""

    name = "tensorrt"
    description = "TensorRT via Torch-TensorRT (CUDA; fp32, fp16, bf16; int8/fp8 via ModelOpt)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset(
        {Precision.FP32, Precision.FP16, Precision.BF16, Precision.INT8, Precision.FP8}
    )
    devices = frozenset({Device.CUDA})
    tf32_control = True

    def available(self, env: Environment) -> Availability:
        if not env.gpus:
            return Availability(False, "no CUDA device")
        if importlib.util.find_spec("torch_tensorrt") is None:
            return Availability(False, f"torch_tensorrt is not installed ({_INSTALL_HINT})")
        return Availability(True)

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        base = super().supports(model, spec, env)
        if not base.ok:
            return base
        needed = _MIN_CC.get(spec.precision)
        gpu = next((g for g in env.gpus if g.index == spec.device_index), env.gpus[0])
        if needed is not None and gpu.cc_tuple is not None and gpu.cc_tuple < needed:
            return Availability(
                False,
                f"tensorrt {spec.precision.value} needs compute capability "
                f"{needed[0]}.{needed[1]}+; {gpu.name} has {gpu.compute_capability}",
            )
        if spec.precision in _QUANT_CONFIGS and importlib.util.find_spec("modelopt") is None:
            return Availability(
                False,
                f"tensorrt {spec.precision.value} needs NVIDIA ModelOpt ({_MODELOPT_HINT})",
            )
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if model.module is None:
            raise MeasurementError(f"model {model.ref!r} has no PyTorch module to compile")
        try:
            import torch
            import torch_tensorrt
        except ImportError as exc:
            raise NotAvailableError(f"tensorrt not available: {exc} ({_INSTALL_HINT})") from exc
        device = torch_device(spec)
        module = own_module(model.module, device).eval()  # a copy on the GPU
        if spec.precision in _QUANT_CONFIGS:
            module = _quantize(module, spec.precision, calibration, model.input_names)
        inputs = [
            torch_tensorrt.Input(
                shape=tensor.concrete_shape(spec.batch_size), dtype=torch_dtype(tensor.dtype)
            )
            for tensor in model.inputs
        ]
        settings: dict[str, Any] = {
            "ir": "dynamo",
            "inputs": inputs,
            "enabled_precisions": _enabled_precisions(spec.precision),
            "disable_tf32": not spec.tf32,  # off: fp32 is IEEE fp32, as on every backend
            "device": device,
        }
        if spec.precision in _QUANT_CONFIGS:
            settings["min_block_size"] = 1
        try:
            with torch.no_grad(), _export_mode(spec.precision):
                compiled = torch_tensorrt.compile(module, **settings)
        except MeasurementError:
            raise
        except Exception as exc:
            raise MeasurementError(
                f"torch_tensorrt cannot compile {model.ref} for {spec.precision.value}: "
                f"{exception_line(exc, named=True)}"
            ) from exc
        return _TensorRtRunner(compiled, spec, model.input_names)


def _export_mode(precision: Precision) -> Any:
    """ModelOpt's ``export_torch_mode`` for quantized models (Q/DQ as exportable ops)."""
    import contextlib

    if precision not in _QUANT_CONFIGS:
        return contextlib.nullcontext()
    from modelopt.torch.quantization.utils import export_torch_mode

    return export_torch_mode()
