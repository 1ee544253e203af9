"""Post-training int8 quantization through PT2E (``torch.export``) and torchao's x86 quantizer.

The flow is the one inductor's int8 CPU kernels are written for: export the model to an ATen
graph, annotate it with :class:`X86InductorQuantizer` (int8 activations and weights for
convolutions and linear layers, per-channel weight scales), insert observers
(``prepare_pt2e``), run calibration batches through it to record activation ranges (static
scheme only), and fold the observers into quantize/dequantize pairs (``convert_pt2e``). The
result is a ``GraphModule`` still in float32 arithmetic; ``torch.compile`` with inductor
*freezing* then fuses each dequantize -> conv/linear -> quantize chain into one oneDNN int8
kernel (VNNI/AMX on recent x86).
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accelscope.errors import MeasurementError, NotAvailableError, exception_line
from accelscope.spec import BATCH_DIM, TensorSpec

if TYPE_CHECKING:
    import torch

__all__ = [
    "TORCHAO_INSTALL_HINT",
    "batch_dynamic_shapes",
    "pt2e_int8",
    "torchao_installed",
]

TORCHAO_INSTALL_HINT = "pip install 'accelscope[torchao]' -c constraints.txt"
"""How to install the optional torchao dependency."""


def torchao_installed() -> bool:
    """True when ``torchao`` can be imported (checked without importing it)."""
    return importlib.util.find_spec("torchao") is not None


def _pt2e_api() -> tuple[Any, Any, Any, Any]:
    """``(prepare_pt2e, convert_pt2e, X86InductorQuantizer, default_config)`` from torchao."""
    # torchao logs a failed load for every CUDA-only extension on a CPU build, and torch a
    # deprecation notice for one of torchao's pytree registrations; quiet both while importing.
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer,
            get_default_x86_inductor_quantization_config,
        )
    except ImportError as exc:
        raise NotAvailableError(
            f"int8 quantization not available: torchao cannot be imported ({exc}); "
            f"{TORCHAO_INSTALL_HINT}"
        ) from exc
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    return (
        prepare_pt2e,
        convert_pt2e,
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )


def batch_dynamic_shapes(specs: tuple[TensorSpec, ...]) -> tuple[dict[int, Any], ...]:
    """``torch.export`` dynamic shapes marking each input's batch dimension ``Dim.AUTO``.

    ``AUTO`` lets export keep the batch symbolic where the model allows it (so calibration
    batches of another size still run) and quietly specialise it where the model does not.
    """
    from torch.export import Dim

    return tuple(
        {index: Dim.AUTO for index, dim in enumerate(spec.shape) if dim == BATCH_DIM}
        for spec in specs
    )


def pt2e_int8(
    module: torch.nn.Module,
    example_args: tuple[torch.Tensor, ...],
    calibration: Sequence[tuple[torch.Tensor, ...]],
    *,
    dynamic_shapes: tuple[dict[int, Any], ...] | None = None,
    dynamic_activations: bool = False,
) -> torch.fx.GraphModule:
    """``module`` quantized to int8 (weights and activations) as a PT2E ``GraphModule``.

    ``example_args`` trace the model; every tuple in ``calibration`` is one batch of positional
    inputs run through the observed model to fix the activation scales (static scheme). With
    ``dynamic_activations`` each call computes its activation scales from the batch itself
    (min/max at run time), so no calibration is needed; meant for linear-heavy models.
    Raises ``MeasurementError`` when the model cannot be exported or a calibration batch fails,
    ``NotAvailableError`` when torchao is missing.
    """
    import torch

    prepare_pt2e, convert_pt2e, quantizer_cls, default_config = _pt2e_api()
    if not calibration and not dynamic_activations:
        raise MeasurementError("int8 static quantization needs calibration data")
    quantizer = quantizer_cls()
    quantizer.set_global(default_config(is_dynamic=dynamic_activations))
    observed: torch.fx.GraphModule | None = None
    failures: list[str] = []
    # Strict (dynamo) export first: it gives every call of a reused module (ResNet's one
    # ``self.relu`` per block) its own source partition. Non-strict export groups them, and the
    # quantizer's conv+add+relu fusion matching then raises ("Input partition has more than
    # one output node", pytorch/ao#4478). Non-strict is the fallback for models dynamo rejects.
    for strict in (True, False):
        mode = "strict" if strict else "non-strict"
        try:
            with torch.no_grad():
                exported = torch.export.export(
                    module, example_args, dynamic_shapes=dynamic_shapes, strict=strict
                )
        except Exception as exc:  # noqa: BLE001 - export fails in many ways on user models
            failures.append(f"{mode} export: {type(exc).__name__}: {exception_line(exc)}")
            continue
        try:
            with warnings.catch_warnings():
                # One notice per op left in float ("The input of maxpool2d is not quantized").
                warnings.filterwarnings("ignore", "The input of .* is not quantized")
                observed = prepare_pt2e(exported.module(), quantizer)
            break
        except Exception as exc:  # noqa: BLE001 - the quantizer rejects some graphs
            failures.append(f"{mode} quantizer: {type(exc).__name__}: {exception_line(exc)}")
    if observed is None:
        raise MeasurementError(
            "int8 quantization needs a torch.export-able model the x86 quantizer can annotate; "
            + "; ".join(failures)
        )
    with torch.no_grad():
        for number, args in enumerate(calibration or (example_args,), start=1):
            try:
                observed(*args)
            except Exception as exc:
                shapes = ", ".join(str(tuple(arg.shape)) for arg in args)
                raise MeasurementError(
                    f"int8 calibration batch {number} (shapes {shapes}) failed: "
                    f"{type(exc).__name__}: {exception_line(exc)}"
                ) from exc
    converted: torch.fx.GraphModule = convert_pt2e(observed)
    if not any(
        node.op == "call_function" and str(node.target).startswith("quantized_decomposed.")
        for node in converted.graph.nodes
    ):
        raise MeasurementError(
            "the x86 int8 quantizer found no convolution or linear layer to quantize (it matches "
            "nn.Module calls, which a loaded torch.export program no longer records)"
        )
    return converted
