"""PyTorch ``torch.compile`` backend (inductor): fp32, bf16, fp16 (CUDA), int8 (PT2E) and fp8
(torchao float8, Hopper).

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
* bf16 / fp16 with ``weights=cast``: the module cast to the reduced dtype before compiling (no
  autocast); floating inputs cast once, before timing.
* fp8 (CUDA, sm_90+, torchao): the module in bf16 with torchao's float8 dynamic-activation,
  float8-weight linear layers (``Float8DynamicActivationFloat8WeightConfig``), then compiled.
  Only Linear-heavy models are tried (the linear layers hold most of the weights): a
  convolutional network keeps its convolutions in bf16, so float8 buys it little.
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
    TORCH_OPTIONS,
    TorchRunner,
    channels_last_requested,
    own_module,
    reduced_dtype,
    torch_device,
    torch_options_refusal,
    weights_cast,
)
from accelscope.backends.quantize import (
    TORCHAO_INSTALL_HINT,
    batch_dynamic_shapes,
    pt2e_int8,
    torchao_installed,
)
from accelscope.errors import BadInputError, MeasurementError, OutOfMemoryError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.inputs import make_batch
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

    from accelscope.hardware.fingerprint import Environment

__all__ = [
    "FP8_MIN_CC",
    "LINEAR_HEAVY_SHARE",
    "CompileBackend",
    "cxx_compiler",
    "float8_refusal",
    "inductor_options",
    "linear_weight_share",
]

FP8_MIN_CC = (9, 0)
"""torchao's float8 inference kernels (row-wise scaled ``_scaled_mm``) target Hopper."""
LINEAR_HEAVY_SHARE = 0.5
"""A model is Linear-heavy when its ``nn.Linear`` layers hold at least this share of the weights."""

_DEFAULTS = {"channels_last": "false", "freezing": "true", "mode": "default"}


def _chosen(spec: RunSpec) -> dict[str, str]:
    """The spec's options over the defaults. float8 compiles without freezing unless asked:
    freezing folds parameters into constants, and torchao's float8 weights are tensor
    subclasses that inductor's constant folding does not handle (torchao compiles them
    unfrozen)."""
    defaults = {**_DEFAULTS, "freezing": "false"} if spec.precision is Precision.FP8 else _DEFAULTS
    return {**defaults, **dict(spec.options)}


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

    chosen = _chosen(spec)
    options: dict[str, Any] = dict(list_mode_options(chosen["mode"]))
    options["freezing"] = chosen["freezing"] == "true"
    return options


def linear_weight_share(module: Any) -> float:
    """The share of ``module``'s parameters (by element count) held by ``nn.Linear`` layers."""
    import torch

    total = sum(p.numel() for p in module.parameters())
    linear = sum(
        p.numel()
        for layer in module.modules()
        if isinstance(layer, torch.nn.Linear)
        for p in layer.parameters(recurse=False)
    )
    return linear / total if total else 0.0


def float8_refusal(model: LoadedModel, spec: RunSpec, env: Environment) -> str:
    """Why torchao float8 cannot run ``model`` under ``spec`` here (empty when it can): CUDA,
    sm_90+, torchao installed, a Linear-heavy PyTorch module."""
    import importlib.util

    if spec.device is not Device.CUDA:
        return "fp8 (torchao float8) runs on CUDA GPUs"
    gpu = next((g for g in env.gpus if g.index == spec.device_index), None)
    if gpu is None or gpu.cc_tuple is None or gpu.cc_tuple < FP8_MIN_CC:
        where = f"{gpu.name} is {gpu.sm}" if gpu is not None else "no such GPU"
        return f"float8 needs Hopper (sm_90) or newer; {where}"
    if importlib.util.find_spec("torchao") is None:
        return f"float8 needs torchao ({TORCHAO_INSTALL_HINT})"
    if model.module is None or model.format is not ModelFormat.TORCH:
        return "float8 quantizes PyTorch modules (zoo or factory models)"
    share = linear_weight_share(model.module)
    if share < LINEAR_HEAVY_SHARE:
        return (
            f"not Linear-heavy: linear layers hold {share:.0%} of the weights (float8 converts "
            f"linear layers only; tried from {LINEAR_HEAVY_SHARE:.0%})"
        )
    return ""


def _float8(module: Any) -> Any:
    """``module`` in bf16 with torchao float8 linear layers (dynamic activation scales)."""
    import torch

    try:
        from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quantize_
    except ImportError as exc:
        raise MeasurementError(f"float8 needs torchao's float8 configs: {exc}") from exc

    def fits(layer: torch.nn.Module, _fqn: str) -> bool:
        # float8 matmuls need both dimensions divisible by 16 (a 1000-class head is not); only
        # plain Linear layers: attention's out_proj (a Linear subclass) is read as a bare weight
        # by F.multi_head_attention_forward, outside the layer's forward
        return (
            type(layer) is torch.nn.Linear
            and layer.in_features % 16 == 0
            and layer.out_features % 16 == 0
        )

    module = module.to(torch.bfloat16)
    quantize_(module, Float8DynamicActivationFloat8WeightConfig(), filter_fn=fits)
    return module


class _CompiledRunner(TorchRunner):
    """Runs a compiled callable on prepared inputs under ``no_grad`` (freezing requires it)."""

    def __init__(
        self,
        spec: RunSpec,
        compiled: Callable[..., Any],
        input_names: tuple[str, ...],
        freezing: bool = False,
    ) -> None:
        import torch

        super().__init__(spec)
        self._compiled: Callable[..., Any] | None = compiled
        self._freezing = freezing
        self._names = input_names
        self._channels_last = channels_last_requested(spec)
        if spec.precision is Precision.FP8:
            self._input_dtype = torch.bfloat16  # the float8 model's activations are bf16
        # CUDA graphs (reduce-overhead) reuse their output buffers: each call starts a new
        # step, so the previous call's outputs are not read after they are overwritten
        self._graphs = dict(spec.options).get("mode") == "reduce-overhead" and (
            spec.device is Device.CUDA
        )

    def feed(self, batch: Batch) -> Any:
        return self.place([batch[name] for name in self._names], channels_last=self._channels_last)

    def run(self, feed: Any) -> Any:
        import torch

        if self._compiled is None:
            raise MeasurementError("this runner was closed")
        from torch._inductor import config as inductor_config

        if self._graphs:
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
        # no_grad rather than inference_mode: inductor freezing requires grad mode off, and
        # inference tensors fed to a graph compiled outside inference_mode force recompiles.
        with torch.no_grad():
            if inductor_config.freezing == self._freezing:
                return self._compiled(*self.arrive(feed))
            # Dynamo reads the *global* freezing flag when it traces, so a recompile (a new
            # batch size, say) must see the flag this runner was prepared with.
            with inductor_config.patch(freezing=self._freezing):
                return self._compiled(*self.arrive(feed))

    def close(self) -> None:
        self._compiled = None
        super().close()


def _autocast_wrapped(module: torch.nn.Module, spec: RunSpec) -> Callable[..., Any]:
    """``module`` as a callable running under autocast for bf16/fp16 (itself for fp32, int8,
    fp8, and for weights cast to bf16/fp16 already)."""
    import torch

    dtype = reduced_dtype(spec)
    if dtype is None or weights_cast(spec):
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

    # a cast (or float8) module takes its own floating dtype: feed it that, so a dtype
    # mismatch is not mistaken for a wrong input spec
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), None)
    tensors = [batch[name].to(torch_device(spec)) for name in model.input_names]
    if dtype is not None and spec.precision is not Precision.INT8:
        tensors = [t.to(dtype) if t.is_floating_point() else t for t in tensors]
    try:
        with torch.no_grad():
            module(*tensors)
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
        return OutOfMemoryError(f"out of memory at batch {spec.batch_size} ({spec.label()})")
    return _eager_failure(model, spec, module, batch) or MeasurementError(
        f"torch.compile of {model.ref} failed ({spec.label()}): "
        f"{type(exc).__name__}: {exception_line(exc)}"
    )


class CompileBackend(Backend):
    """``torch.compile`` with inductor; int8 through PT2E static quantization (torchao)."""

    name = "compile"
    description = "torch.compile (inductor; bf16/fp16 autocast, int8 PT2E static quantization)"
    formats = frozenset({ModelFormat.TORCH, ModelFormat.EXPORTED})
    precisions = frozenset(
        {Precision.FP32, Precision.BF16, Precision.FP16, Precision.INT8, Precision.FP8}
    )
    devices = frozenset({Device.CPU, Device.CUDA})
    cuda_precisions = frozenset({Precision.FP8})
    options: ClassVar[dict[str, tuple[str, ...]]] = {
        **TORCH_OPTIONS,
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
        refusal = torch_options_refusal(spec)
        if not refusal and spec.precision is Precision.FP8:
            refusal = float8_refusal(model, spec, env)
        if refusal:
            return Availability(False, refusal)
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
        options = _chosen(spec)
        static_int8 = options.get("quantization", "static") == "static"
        if spec.precision is Precision.INT8 and static_int8 and not calibration:
            raise MeasurementError("int8 static quantization needs calibration data")
        # the caller's module stays where it is: a copy moves (and may turn channels-last, be
        # cast or converted to float8)
        changes = (
            options["channels_last"] == "true"
            or weights_cast(spec)
            or spec.precision is Precision.FP8
        )
        module = own_module(model.module, torch_device(spec), copy_always=changes)
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
        dtype = reduced_dtype(spec)
        if dtype is not None and weights_cast(spec):
            module = module.to(dtype)
        if spec.precision is Precision.FP8:
            module = _float8(module)
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
