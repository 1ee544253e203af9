"""PyTorch ``torch.compile`` backend (inductor): fp32, bf16, fp16 (CUDA) and int8 (PT2E).

Compile timing: :meth:`CompileBackend.prepare` compiles *eagerly*. It runs one warm call on a
synthetic batch of the spec's shapes (``make_batch``, seed 0), so the whole compile lands in
``prepare_s`` (ResNet-50 on two Sapphire Rapids cores: about 8-18 s with an empty inductor
cache, int8 export + calibration included; inductor's on-disk kernel cache makes repeats
faster) and the timer's ``first_call_s`` is an ordinary call. ``dynamic`` is ``False`` (a runner
serves one batch size), so that warm call is the only compile; a recompile forced later by
different input metadata would run without freezing (see ``prepare``).

Precisions:

* fp32: the model as written, compiled.
* bf16 / fp16: ``torch.autocast`` *inside* the compiled region (fp16 on CUDA only). With
  freezing the weight casts are constant-folded: measured on ResNet-50 as fast as casting the
  model to bf16 (185 vs 185 items/s), with the same accuracy, while numerically sensitive ops
  (softmax, norms, reductions) stay float32 and the user's module is left untouched.
* int8: static post-training quantization through PT2E with torchao's x86 inductor quantizer
  (:mod:`accelscope.backends.quantize`), calibrated on the ``calibration`` batches, then
  compiled; CPU (x86) only. ``quantization=dynamic`` computes activation scales from each batch
  at run time instead: no calibration needed, meant for linear-heavy (transformer) models.

Options (``RunSpec.options``): ``channels_last`` (NHWC weights and 4-D inputs), ``freezing``
(inductor folds weights into constants, fuses conv+bn and pre-packs weights for oneDNN; on by
default because it is the CPU fast path: ResNet-50 fp32 1.2x, bf16 1.9x, and int8 about 10x,
since only frozen graphs reach the fused int8 kernels), ``mode`` (``default``,
``max-autotune`` - GEMM/conv template autotuning, much longer compiles -, ``reduce-overhead`` -
CUDA graphs, no effect on CPU) and ``quantization`` (int8 only).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.eager import (
    TorchRunner,
    channels_last_requested,
    own_module,
    to_channels_last,
    torch_device,
)
from accelscope.backends.quantize import (
    TORCHAO_INSTALL_HINT,
    batch_dynamic_shapes,
    pt2e_int8,
    torchao_installed,
)
from accelscope.errors import BadInputError, MeasurementError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.inputs import make_batch
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = ["CompileBackend", "cxx_compiler", "inductor_options"]

_DEFAULTS = {"channels_last": "false", "freezing": "true", "mode": "default"}
_X86 = ("x86_64", "amd64", "x86", "i686")


def cxx_compiler() -> str | None:
    """Path of the C++ compiler inductor would use for CPU kernels, or ``None`` if none is found.

    Inductor tries ``torch._inductor.config.cpp.cxx`` in order (``$CXX``, else ``g++``).
    """
    candidates: list[str] = []
    try:
        from torch._inductor import config

        configured = config.cpp.cxx
        entries = configured if isinstance(configured, list | tuple) else (configured,)
        candidates = [str(entry) for entry in entries if entry]
    except ImportError:
        pass
    if not candidates:
        candidates = [os.environ.get("CXX", "g++")]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def inductor_options(spec: RunSpec) -> dict[str, Any]:
    """Inductor config for ``spec``: the ``mode`` preset plus ``freezing``.

    ``torch.compile`` refuses ``mode`` and ``options`` together, so the mode is expanded into
    its option set (``torch._inductor.list_mode_options``) and merged.
    """
    from torch._inductor import list_mode_options

    chosen = {**_DEFAULTS, **dict(spec.options)}
    options: dict[str, Any] = dict(list_mode_options(chosen["mode"]))
    options["freezing"] = chosen["freezing"] == "true"
    return options


class _CompiledRunner(TorchRunner):
    """Runs a compiled callable on prepared inputs under ``no_grad`` (freezing requires it)."""

    def __init__(
        self,
        spec: RunSpec,
        compiled: Callable[..., Any],
        input_names: tuple[str, ...],
        freezing: bool = False,
    ) -> None:

        super().__init__(spec)
        self._compiled: Callable[..., Any] | None = compiled
        self._freezing = freezing
        self._names = input_names
        self._channels_last = channels_last_requested(spec)

    def feed(self, batch: Batch) -> Any:
        tensors = [batch[name].to(self._device) for name in self._names]
        return to_channels_last(tensors) if self._channels_last else tensors

    def run(self, feed: Any) -> Any:
        import torch

        if self._compiled is None:
            raise MeasurementError("this runner was closed")
        from torch._inductor import config as inductor_config

        # no_grad rather than inference_mode: inductor freezing requires grad mode off, and
        # inference tensors fed to a graph compiled outside inference_mode force recompiles.
        with torch.no_grad():
            if inductor_config.freezing == self._freezing:
                return self._compiled(*feed)
            # Dynamo reads the *global* freezing flag when it traces, so a recompile (a new
            # batch size, say) must see the flag this runner was prepared with.
            with inductor_config.patch(freezing=self._freezing):
                return self._compiled(*feed)

    def close(self) -> None:
        self._compiled = None
        super().close()


def _autocast_wrapped(module: torch.nn.Module, spec: RunSpec) -> Callable[..., Any]:
    """``module`` as a callable running under autocast for bf16/fp16 (itself for fp32/int8)."""
    import torch

    dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(spec.precision)
    if dtype is None:
        return module
    device_type = "cuda" if spec.device is Device.CUDA else "cpu"

    def forward(*args: Any) -> Any:
        with torch.autocast(device_type=device_type, dtype=dtype):
            return module(*args)

    return forward


def _compile(fn: Callable[..., Any], spec: RunSpec) -> Callable[..., Any]:
    """``torch.compile`` with inductor, static shapes, and (where torch has it) a recompile
    budget of its own, so many runners of one model class in one process cannot exhaust the
    shared per-code-object limit and silently fall back to eager."""
    import inspect

    import torch

    kwargs: dict[str, Any] = {
        "backend": "inductor",
        "dynamic": False,
        "options": inductor_options(spec),
    }
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        kwargs["isolate_recompiles"] = True
    compile_fn: Callable[..., Callable[..., Any]] = torch.compile
    return compile_fn(fn, **kwargs)


def _eager_failure(
    model: LoadedModel, spec: RunSpec, module: Any, batch: Batch
) -> BadInputError | None:
    """``BadInputError`` when ``module`` fails on ``batch`` in eager mode too (a wrong input
    spec rather than a compiler or quantizer problem), else ``None``."""
    import torch

    try:
        with torch.no_grad():
            module(*[batch[name].to(torch_device(spec)) for name in model.input_names])
    except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
        shapes = ", ".join(s.to_text() for s in model.inputs)
        return BadInputError(
            f"model {model.ref} failed on its first call with inputs {shapes} at batch "
            f"{spec.batch_size}: {type(exc).__name__}: {exception_line(exc)}"
        )
    return None


def _compile_failure(
    model: LoadedModel, spec: RunSpec, module: Any, batch: Batch, exc: Exception
) -> Exception:
    """The error to raise for a failed compiling call: out of memory, bad input, or compile."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return MeasurementError(f"out of memory at batch {spec.batch_size} ({spec.label()})")
    return _eager_failure(model, spec, module, batch) or MeasurementError(
        f"torch.compile of {model.ref} failed ({spec.label()}): "
        f"{type(exc).__name__}: {exception_line(exc)}"
    )


class CompileBackend(Backend):
    """``torch.compile`` with inductor; int8 through PT2E static quantization (torchao)."""

    name = "compile"
    description = "torch.compile (inductor; bf16/fp16 autocast, int8 PT2E static quantization)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset({Precision.FP32, Precision.BF16, Precision.FP16, Precision.INT8})
    devices = frozenset({Device.CPU, Device.CUDA})
    options: ClassVar[dict[str, tuple[str, ...]]] = {
        "channels_last": ("true", "false"),
        "freezing": ("true", "false"),
        "mode": ("default", "max-autotune", "reduce-overhead"),
        "quantization": ("static", "dynamic"),
    }
    tf32_control = True

    def available(self, env: Environment) -> Availability:
        if cxx_compiler() is None:
            return Availability(False, "no C++ compiler found (inductor needs one)")
        return Availability(True, "torch.compile with a C++ compiler for inductor")

    def supports(self, model: LoadedModel, spec: RunSpec, env: Environment) -> Availability:
        base = super().supports(model, spec, env)
        if not base.ok:
            return base
        if "quantization" in dict(spec.options) and spec.precision is not Precision.INT8:
            return Availability(False, "option quantization applies to int8 only")
        if spec.device is Device.CUDA:
            return self._supports_cuda(spec, env)
        if spec.precision is Precision.FP16:
            return Availability(False, "fp16 autocast runs on CUDA only; use bf16 on CPU")
        if spec.precision is Precision.INT8:
            if env.cpu.arch.lower() not in _X86:
                return Availability(
                    False, f"int8 uses the x86 inductor quantizer, not {env.cpu.arch}"
                )
            if not torchao_installed():
                return Availability(False, f"int8 needs torchao ({TORCHAO_INSTALL_HINT})")
            if model.format is not ModelFormat.TORCH:
                return Availability(
                    False,
                    "int8 quantizes PyTorch modules (zoo or factory models); the x86 quantizer "
                    "cannot match layers in a torch.export program",
                )
        return Availability(True)

    @staticmethod
    def _supports_cuda(spec: RunSpec, env: Environment) -> Availability:
        import importlib.util

        if not env.gpus:
            return Availability(False, "no CUDA device found on this machine")
        if spec.precision is Precision.INT8:
            return Availability(False, "int8 (x86 inductor quantizer) runs on CPU only")
        if importlib.util.find_spec("triton") is None:
            return Availability(False, "inductor needs triton for CUDA (pip install triton)")
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        """Compile ``model`` for ``spec`` and run it once, so ``prepare_s`` holds the compile.

        int8 first quantizes on ``calibration`` (each a batch by input name, CPU tensors);
        without it the static scheme raises ``MeasurementError``. Freezing is a global inductor
        setting read while dynamo traces, so it is patched in for the compiling call only.
        A failing compile is ``BadInputError`` when the model fails eagerly too (wrong input
        spec), else ``MeasurementError``.
        """
        import torch
        from torch._inductor import config as inductor_config

        if model.module is None:
            raise MeasurementError(f"model {model.ref!r} has no PyTorch module to run")
        options = {**_DEFAULTS, **dict(spec.options)}
        static_int8 = options.get("quantization", "static") == "static"
        if spec.precision is Precision.INT8 and static_int8 and not calibration:
            raise MeasurementError("int8 static quantization needs calibration data")
        # the caller's module stays where it is: a copy moves (and may turn channels-last)
        module = own_module(
            model.module, torch_device(spec), copy_always=options["channels_last"] == "true"
        )
        if model.format is ModelFormat.TORCH:  # an exported program's module refuses eval()
            module.eval()
        names = model.input_names
        warm_batch = make_batch(model.inputs, spec.batch_size, seed=0)
        if spec.precision is Precision.INT8:
            try:
                module = pt2e_int8(
                    module,
                    tuple(warm_batch[name] for name in names),
                    [tuple(batch[name] for name in names) for batch in calibration],
                    dynamic_shapes=batch_dynamic_shapes(model.inputs),
                    dynamic_activations=options.get("quantization") == "dynamic",
                )
            except MeasurementError as exc:
                raise (_eager_failure(model, spec, module, warm_batch) or exc) from exc
        if options["channels_last"] == "true":
            module = module.to(memory_format=torch.channels_last)
        compiled = _compile(_autocast_wrapped(module, spec), spec)
        runner = _CompiledRunner(spec, compiled, names, freezing=options["freezing"] == "true")
        try:
            # Dynamo reads the *global* freezing flag while tracing (to treat weights as
            # constants); the per-compile options reach inductor only after that, so the
            # compiling call runs under the patched config.
            with inductor_config.patch(freezing=options["freezing"] == "true"):
                runner.synchronize()
                runner.run(runner.feed(warm_batch))
                runner.synchronize()
        except Exception as exc:
            runner.close()
            raise _compile_failure(model, spec, module, warm_batch, exc) from exc
        return runner
