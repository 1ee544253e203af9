"""PyTorch eager backend: the model as written, fp32 or bf16/fp16 (autocast, or the weights cast).

Options (``RunSpec.options``), shared with ``compile`` through :class:`TorchRunner`:

* ``channels_last`` (NHWC weights and 4-D inputs);
* ``weights=cast`` (bf16/fp16 only): the module's weights and floating inputs are cast to the
  reduced dtype once, before timing, instead of autocast re-casting every weight on every call
  (on a GPU at small batch those casts are a large share of the step);
* ``cudnn_benchmark`` (CUDA): cuDNN times its convolution algorithms per shape and keeps the
  fastest; set for the runner's life and set back on close, like TF32;
* ``inputs=pinned`` (CUDA): each timed call starts from a batch in pinned host memory and
  includes its host-to-device copy (what a service sees); the default ``device`` keeps the
  batch resident on the device (MLPerf's ``start_from_device``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from contextlib import nullcontext, suppress
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.errors import MeasurementError
from accelscope.hardware.sync import CudaEventInterval, device_synchronizer
from accelscope.hardware.tf32 import (
    Fp32Math,
    apply_cudnn_benchmark,
    apply_tf32,
    read_fp32_math,
    restore_fp32_math,
)
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment
    from accelscope.hardware.sync import IntervalTimer

__all__ = [
    "TORCH_OPTIONS",
    "EagerBackend",
    "TorchRunner",
    "channels_last_requested",
    "flatten_outputs",
    "own_module",
    "pinned_inputs",
    "reduced_dtype",
    "to_channels_last",
    "torch_device",
    "torch_options_refusal",
    "weights_cast",
]

TORCH_OPTIONS: dict[str, tuple[str, ...]] = {
    "channels_last": ("true", "false"),
    "weights": ("autocast", "cast"),
    "cudnn_benchmark": ("true", "false"),
    "inputs": ("device", "pinned"),
}
"""The options every torch runner honours (see the module docstring)."""


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


def weights_cast(spec: RunSpec) -> bool:
    """True when the spec casts the weights to its reduced precision (``weights=cast``)."""
    return dict(spec.options).get("weights") == "cast"


def pinned_inputs(spec: RunSpec) -> bool:
    """True when each timed call includes the batch's copy from pinned host memory."""
    return dict(spec.options).get("inputs") == "pinned"


def reduced_dtype(spec: RunSpec) -> torch.dtype | None:
    """The torch dtype of a bf16/fp16 spec (``None`` for the others)."""
    import torch

    return {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(spec.precision)


def torch_options_refusal(spec: RunSpec) -> str:
    """Why the torch options of ``spec`` cannot run (empty when they can)."""
    options = dict(spec.options)
    if options.get("weights") == "cast" and spec.precision not in (Precision.BF16, Precision.FP16):
        return "option weights=cast applies to bf16 and fp16"
    for key in ("cudnn_benchmark", "inputs"):
        if key in options and spec.device is not Device.CUDA:
            return f"option {key} applies to CUDA devices"
    return ""


def to_channels_last(tensors: list[Any]) -> list[Any]:
    """4-D tensors converted to channels-last memory format; others unchanged."""
    import torch

    return [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in tensors]


def torch_device(spec: RunSpec) -> torch.device:
    """The torch device of ``spec``: ``cpu``, or ``cuda:N`` with its ordinal."""
    import torch

    if spec.device is Device.CUDA:
        return torch.device("cuda", spec.device_index)
    return torch.device("cpu")


def own_module(module: torch.nn.Module, device: torch.device, *, copy_always: bool = False) -> Any:
    """``module`` on ``device``, leaving the caller's module as it was.

    ``nn.Module.to`` moves a module in place, so moving the caller's module would put it (and
    keep it) on the GPU, and a memory-format change would leak into every later runner of the
    same module in this process. So when the module must change (another device, or
    ``copy_always`` because the caller will change it) this returns a copy whose parameters and
    buffers are created directly on ``device`` (no second host copy of the weights); a module
    already there is returned as is. A module that cannot be copied (``deepcopy`` refuses it)
    is moved in place, as before.
    """
    tensors = list(itertools.chain(module.parameters(), module.buffers()))
    if not copy_always and all(t.device == device for t in tensors):
        return module
    import torch

    memo: dict[int, Any] = {}
    for tensor in tensors:
        if id(tensor) in memo:
            continue
        moved = tensor.detach().to(device, copy=True)
        if isinstance(tensor, torch.nn.Parameter):
            moved = torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = moved
    try:
        copied = copy.deepcopy(module, memo)
    except Exception:  # noqa: BLE001 - a module deepcopy refuses (weakrefs, handles): move it
        return module.to(device)
    return copied.to(device)  # anything deepcopy did not see as a parameter or buffer


class TorchRunner(Runner):
    """Base for runtimes whose outputs are torch tensors on the spec's device: output
    flattening, device sync and CUDA-event timing live here once.

    While the runner lives, the process computes fp32 as ``spec.tf32`` says (TF32 allowed for
    cuBLAS and cuDNN, or IEEE) and, on CUDA, the spec's device is the current device (model
    code that allocates on "cuda" lands there); :meth:`close` sets both back. Subclasses that
    override ``close`` call this one.
    """

    def __init__(self, spec: RunSpec) -> None:
        import torch

        super().__init__(spec)
        self._device = torch_device(spec)
        self._sync = device_synchronizer(spec.device, spec.device_index)
        self._fp32_before: Fp32Math | None = read_fp32_math(torch)
        apply_tf32(spec.tf32, torch)
        self._device_before: int | None = None
        if spec.device is Device.CUDA:
            self._device_before = torch.cuda.current_device()
            torch.cuda.set_device(spec.device_index)
        self._benchmark = dict(spec.options).get("cudnn_benchmark")
        self._benchmark_before: bool | None = None
        if self._benchmark is not None:
            self._benchmark_before = apply_cudnn_benchmark(self._benchmark == "true", torch)
        self._pinned = pinned_inputs(spec) and spec.device is Device.CUDA
        self._input_dtype = reduced_dtype(spec) if weights_cast(spec) else None

    def place(self, tensors: list[torch.Tensor], *, channels_last: bool = False) -> list[Any]:
        """A batch as the timed call starts from it (not timed): floating inputs cast when the
        weights are, 4-D inputs channels-last when asked, then on the device, or in pinned
        host memory when each call includes the copy (:meth:`arrive` does it)."""
        if self._input_dtype is not None:
            tensors = [t.to(self._input_dtype) if t.is_floating_point() else t for t in tensors]
        if channels_last:
            tensors = to_channels_last(tensors)
        if self._pinned:
            return [t.pin_memory() for t in tensors]
        return [t.to(self._device) for t in tensors]

    def arrive(self, feed: list[Any]) -> list[Any]:
        """Inside the timed call: the pinned batch's asynchronous copy to the device (queued on
        the current stream, so the device timer's events enclose it); the feed itself when it
        is resident there already."""
        if not self._pinned:
            return feed
        return [t.to(self._device, non_blocking=True) for t in feed]

    def outputs(self, raw: Any) -> list[torch.Tensor]:
        tensors = flatten_outputs(raw)
        if not tensors:
            raise MeasurementError("the model returned no tensors; nothing to compare")
        return tensors

    def synchronize(self) -> None:
        self._sync()

    def interval(self) -> IntervalTimer | None:
        if self.spec.device is Device.CUDA:
            return CudaEventInterval(self.spec.device_index)
        return None

    def activate(self) -> None:
        """Set this configuration's fp32 math (and, on CUDA, its device) again: another
        runner in this process may have set its own since."""
        import torch

        apply_tf32(self.spec.tf32, torch)
        if self._benchmark is not None:
            apply_cudnn_benchmark(self._benchmark == "true", torch)
        if self.spec.device is Device.CUDA:
            torch.cuda.set_device(self.spec.device_index)

    def close(self) -> None:
        """Set the fp32 math and the current device back to what they were before."""
        import torch

        before, self._fp32_before = self._fp32_before, None
        if before is not None:
            restore_fp32_math(before, torch)
        benchmark, self._benchmark_before = self._benchmark_before, None
        if benchmark is not None:
            apply_cudnn_benchmark(benchmark, torch)
        device, self._device_before = self._device_before, None
        if device is not None:
            torch.cuda.set_device(device)


class _EagerRunner(TorchRunner):
    def __init__(self, module: torch.nn.Module, spec: RunSpec, input_names: tuple[str, ...]):
        import torch

        super().__init__(spec)
        self._channels_last = channels_last_requested(spec)
        # casting or changing the memory format changes the module: work on a copy
        changes = self._channels_last or (weights_cast(spec) and reduced_dtype(spec) is not None)
        self._module = own_module(module, self._device, copy_always=changes)
        with suppress(NotImplementedError):  # a .pt2 program's module() has no train mode
            self._module.eval()
        if self._channels_last:
            self._module = self._module.to(memory_format=torch.channels_last)
        self._names = input_names
        dtype = reduced_dtype(spec)
        if dtype is not None and weights_cast(spec):
            self._module = self._module.to(dtype)  # a copy: own_module copied it (see below)
            dtype = None
        self._autocast = (
            torch.autocast(device_type=self._device.type, dtype=dtype)
            if dtype is not None
            else nullcontext()
        )

    def feed(self, batch: Batch) -> Any:
        return self.place([batch[name] for name in self._names], channels_last=self._channels_last)

    def run(self, feed: Any) -> Any:
        import torch

        with torch.inference_mode(), self._autocast:
            return self._module(*self.arrive(feed))


class EagerBackend(Backend):
    """PyTorch eager mode; bf16/fp16 through autocast (weights stay fp32)."""

    name = "eager"
    description = "PyTorch eager (fp32; bf16/fp16 via autocast or cast weights)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset({Precision.FP32, Precision.BF16, Precision.FP16})
    devices = frozenset({Device.CPU, Device.CUDA})
    options: ClassVar[dict[str, tuple[str, ...]]] = dict(TORCH_OPTIONS)
    tf32_control = True

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
        refusal = torch_options_refusal(spec)
        return Availability(False, refusal) if refusal else Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        if model.module is None:
            raise MeasurementError(f"model {model.ref!r} has no PyTorch module to run")
        return _EagerRunner(model.module, spec, model.input_names)
