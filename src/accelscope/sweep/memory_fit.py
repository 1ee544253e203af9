"""Will a batch fit in the device's memory? Checked before a configuration runs, so a batch axis
that goes up to what memory allows ends with "skipped: needs about X GiB" instead of an out-of-
memory failure that costs a worker start (and, for ``compile``, a compile).

The activation figure is measured, not guessed: the model runs eagerly on the CPU (this process
never touches the GPU) at batch 1 and batch 2 under a dispatch mode that follows every tensor an
operator creates until it is freed, and keeps the peak of the bytes alive at once. The difference
between the two peaks is what one more item costs; the rest does not grow with the batch. That
is an inference-mode (no-grad) peak of the eager program: a GPU adds its own workspaces (cuDNN,
cuBLAS, inductor's buffers), which :data:`HEADROOM` and :data:`CONTEXT_RESERVE_BYTES` stand for.
It stays an estimate: a real out-of-memory is still recorded, and ends that batch axis.
"""

from __future__ import annotations

import importlib
import weakref
from dataclasses import dataclass
from typing import Any

from accelscope.hardware.gpu import GpuInfo
from accelscope.models.base import LoadedModel
from accelscope.models.inputs import make_batch
from accelscope.spec import Precision, RunSpec
from accelscope.units import ELEMENT_BYTES

__all__ = [
    "CONTEXT_RESERVE_BYTES",
    "HEADROOM",
    "DeviceMemory",
    "MemoryEstimate",
    "MemoryFit",
    "estimate_memory",
    "peak_live_bytes",
    "read_device_memory",
]

GIB = 1 << 30
CONTEXT_RESERVE_BYTES = 1 * GIB
"""The CUDA context, cuBLAS/cuDNN handles and the allocator's first blocks (about 0.5-1 GiB)."""
HEADROOM = 1.5
"""Factor on the eager activation peak for what the GPU adds: convolution workspaces (larger
under ``cudnn.benchmark``), the allocator's rounding and fragmentation, CUDA-graph pools."""
_ACTIVATIONS_IN = {Precision.FP8: Precision.BF16, Precision.INT8: Precision.FP32}
"""The precision activations are held in where it is not the weights': float8 keeps bf16
activations; the int8 backends here are CPU ones (never checked against a GPU)."""


class _LiveBytes:
    """A dispatch mode's bookkeeping: bytes of the storages operators created that are still
    referenced, and their peak. A storage is counted once however many views share it."""

    def __init__(self) -> None:
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, live tensors]
        self.current = 0
        self.peak = 0

    def track(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        if not address or not size:
            return
        entry = self.live.get(address)
        if entry is None:
            entry = self.live[address] = [size, 0]
            self.current += size
            self.peak = max(self.peak, self.current)
        entry[1] += 1
        weakref.finalize(tensor, self.release, address)

    def release(self, address: int) -> None:
        entry = self.live.get(address)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.current -= entry[0]
            del self.live[address]


def peak_live_bytes(model: LoadedModel, batch_size: int) -> int:
    """The most bytes of operator-created tensors alive at once in one eager, no-grad call of
    ``model`` on the CPU at ``batch_size`` (inputs and weights not included)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    if model.module is None:
        raise ValueError(f"model {model.ref} has no PyTorch module to run")
    book = _LiveBytes()

    class _Follow(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            # a view or an in-place result shares an input's storage (a weight's transpose,
            # relu_): no new memory, and a weight's bytes are counted apart
            inputs = {
                leaf.untyped_storage().data_ptr()
                for leaf in tree_leaves((args, kwargs))
                if isinstance(leaf, torch.Tensor)
            }
            for leaf in tree_leaves(out):
                if (
                    isinstance(leaf, torch.Tensor)
                    and leaf.untyped_storage().data_ptr() not in inputs
                ):
                    book.track(leaf)
            return out

    batch = make_batch(model.inputs, batch_size, seed=0)
    feed = [batch[name] for name in model.input_names]
    with torch.no_grad(), _Follow():  # type: ignore[no-untyped-call]
        output = model.module(*feed)
    del output
    return book.peak


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """What a model needs on the device, in fp32 bytes: its weights, the activation peak that
    does not grow with the batch, and what each more item adds (see the module docstring)."""

    weight_bytes: int
    fixed_activation_bytes: int
    activation_bytes_per_item: int

    def needed_bytes(self, spec: RunSpec) -> int:
        """Bytes ``spec`` needs on its device: weights at its precision (twice for ``compile``,
        whose frozen constants and CUDA-graph pools hold a second copy), the activations at
        its batch with :data:`HEADROOM`, and :data:`CONTEXT_RESERVE_BYTES`."""
        fp32 = ELEMENT_BYTES[Precision.FP32]  # what the eager CPU run measured
        weight_scale = ELEMENT_BYTES[spec.precision] / fp32
        act_scale = ELEMENT_BYTES[_ACTIVATIONS_IN.get(spec.precision, spec.precision)] / fp32
        copies = 2 if spec.backend == "compile" else 1
        activations = self.fixed_activation_bytes + spec.batch_size * self.activation_bytes_per_item
        return int(
            copies * self.weight_bytes * weight_scale
            + HEADROOM * activations * act_scale
            + CONTEXT_RESERVE_BYTES
        )


@dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    """The memory a sweep may use on its device, and where the figure came from."""

    free_bytes: int
    source: str
    """``free now (NVML)`` or ``total (free memory not readable: why)``."""


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    """An estimate held against a device's memory."""

    estimate: MemoryEstimate
    device: DeviceMemory

    def refusal(self, spec: RunSpec) -> str:
        """Why ``spec`` is not run (empty when it fits)."""
        needed = self.estimate.needed_bytes(spec)
        if needed <= self.device.free_bytes:
            return ""
        return (
            f"does not fit: batch {spec.batch_size} needs about {needed / GIB:.1f} GiB "
            f"(estimate from the eager activation peak) and the device has "
            f"{self.device.free_bytes / GIB:.1f} GiB ({self.device.source})"
        )


def estimate_memory(model: LoadedModel) -> MemoryEstimate:
    """Weights and activation peaks of ``model``, measured on the CPU at batches 1 and 2."""
    if model.module is None:
        raise ValueError(f"model {model.ref} has no PyTorch module to run")
    weights = sum(
        t.numel() * t.element_size() for t in (*model.module.parameters(), *model.module.buffers())
    )
    one, two = peak_live_bytes(model, 1), peak_live_bytes(model, 2)
    per_item = max(two - one, 0)
    return MemoryEstimate(
        weight_bytes=weights,
        fixed_activation_bytes=max(one - per_item, 0),
        activation_bytes_per_item=per_item if per_item else one,
    )


def read_device_memory(gpu: GpuInfo, nvml: Any = None) -> DeviceMemory:
    """The free memory of ``gpu`` now, from NVML by the device's UUID (no CUDA context is made:
    the sweep's parent stays off the GPU); its total memory, said so, where NVML cannot tell."""
    why = "no device UUID"
    if gpu.uuid:
        try:
            nvml = nvml if nvml is not None else importlib.import_module("pynvml")
            nvml.nvmlInit()
            handle = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
            free = int(nvml.nvmlDeviceGetMemoryInfo(handle).free)
            return DeviceMemory(free_bytes=free, source=f"free now on {gpu.name}, by NVML")
        except Exception as exc:  # noqa: BLE001 - no pynvml, no driver, NVMLError: say why
            why = f"NVML: {type(exc).__name__}"
    return DeviceMemory(
        free_bytes=gpu.memory_bytes,
        source=f"total memory of {gpu.name}; free memory not readable ({why})",
    )
