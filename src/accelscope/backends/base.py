"""The runtime extension point: a ``Backend`` prepares a model into a ``Runner`` for one RunSpec.

A backend says whether it is available here (and why not), which model formats, precisions and
devices it handles, and turns a loaded model into a runner. The runner converts inputs to its
native form once (outside timing), runs, synchronises, and hands outputs back as CPU tensors for
accuracy checks (also outside timing).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.errors import NotAvailableError
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment
    from accelscope.hardware.sync import IntervalTimer

__all__ = ["Availability", "Backend", "Batch", "Runner"]

Batch = dict[str, "torch.Tensor"]
"""One batch of inputs, by input name, as CPU tensors."""


@dataclass(frozen=True)
class Availability:
    """Whether something can run here; ``reason`` says why not (or notes when it can)."""

    ok: bool
    reason: str = ""

    def require(self, what: str) -> None:
        """Raise :class:`NotAvailableError` with the reason when not available."""
        if not self.ok:
            raise NotAvailableError(f"{what} not available: {self.reason}")


class Runner(ABC):
    """A model prepared for one configuration."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    @abstractmethod
    def feed(self, batch: Batch) -> Any:
        """Convert a batch to the runtime's native inputs (done once, not timed)."""

    @abstractmethod
    def run(self, feed: Any) -> Any:
        """Run one inference on prepared inputs; returns native outputs (the timed call)."""

    @abstractmethod
    def outputs(self, raw: Any) -> list[torch.Tensor]:
        """Native outputs as float32 CPU tensors, for accuracy checks (not timed)."""

    def synchronize(self) -> None:  # noqa: B027 - CPU runtimes are synchronous
        """Block until the device has finished queued work (no-op for synchronous runtimes)."""

    def interval(self) -> IntervalTimer | None:
        """A device-side interval timer, or ``None`` to time with the host clock after sync."""
        return None

    def activate(self) -> None:  # noqa: B027 - most runners have no process-wide settings
        """Make this runner's process-wide settings current again (fp32 math, current device):
        called before its calls when runners of several configurations share a process (the
        interleaved re-measure); not timed."""

    def notes(self) -> tuple[str, ...]:
        """What the result should say about how this runner computes (for example, an fp32
        that is not IEEE fp32 because the runtime cannot turn TF32 off); empty by default."""
        return ()

    def close(self) -> None:  # noqa: B027 - most runners hold nothing to release
        """Release runtime resources."""


class Backend(ABC):
    """One runtime (PyTorch eager, ONNX Runtime, ...). Subclasses set the class attributes."""

    name: str = ""
    description: str = ""
    formats: frozenset[ModelFormat] = frozenset()
    precisions: frozenset[Precision] = frozenset()
    devices: frozenset[Device] = frozenset({Device.CPU})
    cuda_precisions: frozenset[Precision] = frozenset()
    """Precisions it runs on CUDA devices only: a default sweep elsewhere leaves them out
    rather than listing a row that can never run there."""
    options: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Backend options (``RunSpec.options`` keys) and their allowed values."""
    tf32_control: ClassVar[bool] = False
    """Whether the runtime honours ``RunSpec.tf32`` on CUDA (TF32 on, or IEEE fp32 when off)."""

    @abstractmethod
    def available(self, env: Environment) -> Availability:
        """Whether this runtime can run on this machine at all, and if not, why."""

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        """Whether this runtime can run ``model`` under ``spec`` here, and if not, why."""
        here = self.available(env)
        if not here.ok:
            return here
        if model.format not in self.formats:
            kinds = ", ".join(sorted(f.value for f in self.formats))
            return Availability(
                False, f"backend {self.name!r} runs {kinds} models, not {model.format.value}"
            )
        if spec.precision not in self.precisions:
            kinds = ", ".join(p.value for p in Precision if p in self.precisions)
            return Availability(
                False,
                f"backend {self.name!r} supports precisions {kinds}, not {spec.precision.value}",
            )
        if spec.device not in self.devices:
            return Availability(False, f"backend {self.name!r} does not run on {spec.device.value}")
        if spec.tf32:
            why = self._tf32_refusal(spec, env)
            if why:
                return Availability(False, why)
        for key, value in spec.options:
            allowed = self.options.get(key)
            if allowed is None:
                known = ", ".join(sorted(self.options)) or "none"
                return Availability(
                    False, f"backend {self.name!r} has no option {key!r} (options: {known})"
                )
            if value not in allowed:
                return Availability(
                    False, f"option {key}={value!r} not one of: {', '.join(allowed)}"
                )
        return Availability(True)

    def _tf32_refusal(self, spec: RunSpec, env: Environment) -> str:
        """Why ``spec.tf32`` cannot run here (empty when it can): TF32 is a mode of NVIDIA
        tensor cores from compute capability 8.0 (Ampere) that this runtime must control."""
        if spec.device is not Device.CUDA:
            return "TF32 is a CUDA tensor-core mode; tf32 on needs device cuda"
        if not self.tf32_control:
            return f"backend {self.name!r} cannot switch TF32 on or off"
        gpu = next((g for g in env.gpus if g.index == spec.device_index), None)
        if gpu is not None and gpu.cc_tuple is not None and gpu.cc_tuple < (8, 0):
            return (
                f"TF32 needs compute capability 8.0+ (Ampere); {gpu.name} has "
                f"{gpu.compute_capability}"
            )
        return ""

    @abstractmethod
    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        """Build a runner for ``model`` under ``spec`` (may compile or quantize; the time it
        takes is recorded as ``prepare_s``). ``calibration`` holds sample batches for static
        quantization (int8); backends that need it and get none raise ``MeasurementError``."""
