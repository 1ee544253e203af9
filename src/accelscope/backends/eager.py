"""PyTorch eager backend: the model as written, fp32 or autocast bf16/fp16."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext, suppress
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.errors import MeasurementError
from accelscope.hardware.sync import CudaEventInterval, device_synchronizer
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment
    from accelscope.hardware.sync import IntervalTimer

__all__ = [
    "EagerBackend",
    "TorchRunner",
    "channels_last_requested",
    "flatten_outputs",
    "to_channels_last",
]


def flatten_outputs(value: Any) -> list[torch.Tensor]:
    """All tensors in a (nested) model output, in order, as detached float32 CPU tensors."""
    import torch

    found: list[torch.Tensor] = []

    def visit(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            found.append(item.detach().to("cpu", torch.float32))
        elif isinstance(item, dict):
            for key in item:
                visit(item[key])
        elif isinstance(item, list | tuple):
            for element in item:
                visit(element)
        elif hasattr(item, "to_tuple"):  # transformers ModelOutput
            visit(item.to_tuple())

    visit(value)
    return found


def channels_last_requested(spec: RunSpec) -> bool:
    """True when the spec asks for the channels-last (NHWC) memory format."""
    return dict(spec.options).get("channels_last") == "true"


def to_channels_last(tensors: list[Any]) -> list[Any]:
    """4-D tensors converted to channels-last memory format; others unchanged."""
    import torch

    return [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in tensors]


class TorchRunner(Runner):
    """Base for runtimes whose outputs are torch tensors on the spec's device: output
    flattening, device sync and CUDA-event timing live here once."""

    def __init__(self, spec: RunSpec) -> None:
        import torch

        super().__init__(spec)
        self._device = torch.device("cuda" if spec.device is Device.CUDA else "cpu")
        self._sync = device_synchronizer(spec.device)

    def outputs(self, raw: Any) -> list[torch.Tensor]:
        tensors = flatten_outputs(raw)
        if not tensors:
            raise MeasurementError("the model returned no tensors; nothing to compare")
        return tensors

    def synchronize(self) -> None:
        self._sync()

    def interval(self) -> IntervalTimer | None:
        if self.spec.device is Device.CUDA:
            return CudaEventInterval(self._device.index or 0)
        return None


class _EagerRunner(TorchRunner):
    def __init__(self, module: torch.nn.Module, spec: RunSpec, input_names: tuple[str, ...]):
        import torch

        super().__init__(spec)
        self._channels_last = channels_last_requested(spec)
        self._module = module.to(self._device)
        with suppress(NotImplementedError):  # a .pt2 program's module() has no train mode
            self._module.eval()
        if self._channels_last:
            self._module = self._module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._names = input_names
        autocast_dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}
        dtype = autocast_dtype.get(spec.precision)
        self._autocast = (
            torch.autocast(device_type=self._device.type, dtype=dtype)
            if dtype is not None
            else nullcontext()
        )

    def feed(self, batch: Batch) -> Any:
        tensors = [batch[name].to(self._device) for name in self._names]
        return to_channels_last(tensors) if self._channels_last else tensors

    def run(self, feed: Any) -> Any:
        import torch

        with torch.inference_mode(), self._autocast:
            return self._module(*feed)


class EagerBackend(Backend):
    """PyTorch eager mode; bf16/fp16 through autocast (weights stay fp32)."""

    name = "eager"
    description = "PyTorch eager (fp32; bf16/fp16 via autocast)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset({Precision.FP32, Precision.BF16, Precision.FP16})
    devices = frozenset({Device.CPU, Device.CUDA})
    options: ClassVar[dict[str, tuple[str, ...]]] = {"channels_last": ("true", "false")}

    def available(self, env: Environment) -> Availability:
        return Availability(True, "PyTorch is installed")

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        base = super().supports(model, spec, env)
        if not base.ok:
            return base
        if spec.device is Device.CUDA and not env.gpus:
            return Availability(False, "no CUDA device found on this machine")
        if spec.precision is Precision.FP16 and spec.device is Device.CPU:
            return Availability(False, "fp16 autocast runs on CUDA only; use bf16 on CPU")
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if model.module is None:
            raise MeasurementError(f"model {model.ref!r} has no PyTorch module to run")
        return _EagerRunner(model.module, spec, model.input_names)
