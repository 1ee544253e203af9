"""The sweep a user gets by default on a GPU: ``bench MODEL --device cuda`` with no backend,
precision, option, batch or TF32 flags.

What a GPU engineer would try, each as a measured row (the probes and the accuracy guard decide,
as on the CPU; what cannot run here is listed with why):

* eager IEEE fp32 as written: the baseline every speedup is against;
* TF32 as its own labelled precision, with ``cudnn.benchmark``;
* eager bf16 and fp16 with the weights cast (no per-call autocast casts), ``cudnn.benchmark``;
* ``compile`` bf16 and fp16 with the weights cast; CUDA graphs (``mode=reduce-overhead``) at
  small batches, where launch overhead dominates (``GRAPH_MAX_BATCH``); the compile time per
  shape is the row's ``prepare_s``, never inside its throughput;
* torchao float8 under ``compile`` (Linear-heavy models on sm_90+ with torchao installed);
* ``channels_last`` wherever an input is 4-D (convolutions run NHWC on tensor cores);
* each row twice: inputs resident on the device (MLPerf's ``start_from_device``) and with each
  batch's copy from pinned host memory inside the timed call (``inputs=pinned``), the row's twin;
* a batch axis up to what memory allows (:data:`DEFAULT_GPU_BATCHES`), each batch checked
  against the device's free memory before it runs (:mod:`accelscope.sweep.memory_fit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from accelscope.models.base import LoadedModel
from accelscope.spec import Precision

__all__ = [
    "DEFAULT_GPU_BATCHES",
    "GRAPH_MAX_BATCH",
    "PINNED",
    "GpuRow",
    "default_gpu_rows",
    "has_conv_inputs",
]

DEFAULT_GPU_BATCHES = (8, 64, 256, 512)
"""Launch-bound, the usual serving batch, and two throughput batches (MLPerf's offline H100/H200
ResNet-50 runs use batches in the thousands; 256-512 is where eager PyTorch saturates)."""
GRAPH_MAX_BATCH = 32
"""CUDA graphs up to this batch: above it a step's kernels are long enough that launch overhead
is a small share, and graph capture costs memory for little."""
PINNED = ("inputs", "pinned")
"""The option of a row's twin that includes the host-to-device copy of each batch."""


@dataclass(frozen=True, kw_only=True)
class GpuRow:
    """One configuration of the default GPU sweep at one batch size."""

    backend: str
    precision: Precision
    tf32: bool = False
    options: tuple[tuple[str, str], ...] = ()


def has_conv_inputs(model: LoadedModel) -> bool:
    """True when some input is 4-D (an image batch): channels-last applies."""
    return any(len(spec.shape) == 4 for spec in model.inputs)


def default_gpu_rows(model: LoadedModel, batch_size: int) -> list[GpuRow]:
    """The default GPU configurations at ``batch_size``, each followed by its pinned twin."""
    layout = (("channels_last", "true"),) if has_conv_inputs(model) else ()
    tuned = (("cudnn_benchmark", "true"), *layout)
    cast = ("weights", "cast")
    mode = ("mode", "reduce-overhead" if batch_size <= GRAPH_MAX_BATCH else "default")
    rows = [
        GpuRow(backend="eager", precision=Precision.FP32),
        GpuRow(backend="eager", precision=Precision.FP32, tf32=True, options=tuned),
        GpuRow(backend="eager", precision=Precision.BF16, options=(*tuned, cast)),
        GpuRow(backend="eager", precision=Precision.FP16, options=(*tuned, cast)),
        GpuRow(backend="compile", precision=Precision.BF16, options=(*layout, cast, mode)),
        GpuRow(backend="compile", precision=Precision.FP16, options=(*layout, cast, mode)),
        GpuRow(backend="compile", precision=Precision.FP8, options=(mode,)),
    ]
    twins = [
        GpuRow(
            backend=row.backend,
            precision=row.precision,
            tf32=row.tf32,
            options=(*row.options, PINNED),
        )
        for row in rows
    ]
    return [row for pair in zip(rows, twins, strict=True) for row in pair]
