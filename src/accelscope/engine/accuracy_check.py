"""The accuracy set a configuration is checked on: inputs, labels, reference outputs.

Reference outputs come from eager IEEE fp32 (or ONNX Runtime fp32 for ONNX models) on the same
inputs and device. A set is computed once per sweep and saved with ``torch.save`` (the reference
in the sweep's parent on the CPU; on a GPU in a worker process of its own, so the parent never
holds the device); workers read it back with ``torch.load(weights_only=True)`` (tensors only,
no code).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelscope.accuracy.metrics import metric_fn
from accelscope.backends.base import Batch, Runner
from accelscope.backends.registry import get_backend
from accelscope.errors import MeasurementError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.threads import pinned_threads
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.inputs import make_batch
from accelscope.spec import BATCH_DIM, Precision, RunSpec

if TYPE_CHECKING:
    import torch

__all__ = [
    "AccuracyCheck",
    "build_accuracy_check",
    "calibration_batches",
    "load_accuracy_check",
    "reference_spec",
    "run_chunked",
    "save_accuracy_check",
    "with_reference",
]

_ACCURACY_SEED_OFFSET = 7
_CALIBRATION_SEED = 1000


@dataclass(frozen=True, kw_only=True)
class AccuracyCheck:
    """Inputs (first dimension = samples), optional labels + metric, and reference outputs.

    ``reference_outputs`` is ``None`` until :func:`with_reference` fills it (and stays ``None``
    for the reference configuration itself).
    """

    inputs: dict[str, torch.Tensor]
    source: str
    labels: torch.Tensor | None = None
    metric: str | None = None
    reference_outputs: tuple[torch.Tensor, ...] | None = None
    reference_metric: float | None = None

    @property
    def num_samples(self) -> int:
        """Number of samples in the set."""
        return int(next(iter(self.inputs.values())).shape[0])


def _has_batch_dim(model: LoadedModel) -> bool:
    return any(BATCH_DIM in spec.shape for spec in model.inputs)


def build_accuracy_check(model: LoadedModel, samples: int, seed: int = 0) -> AccuracyCheck:
    """The model's eval data when it has some (all of it), else ``samples`` synthetic inputs
    drawn with a seed distinct from the timing batch's."""
    if model.eval_data is not None:
        data = model.eval_data
        return AccuracyCheck(
            inputs=dict(data.inputs), source=data.source, labels=data.labels, metric=data.metric
        )
    count = samples if _has_batch_dim(model) else 1
    inputs = make_batch(model.inputs, count, seed + _ACCURACY_SEED_OFFSET)
    return AccuracyCheck(inputs=inputs, source=f"{count} synthetic inputs (seed {seed})")


def calibration_batches(
    model: LoadedModel, batch_size: int, count: int = 4
) -> list[dict[str, torch.Tensor]]:
    """Batches for static quantization: real training-side samples when the model has them,
    else synthetic ones (never the accuracy set's inputs)."""
    calibration = model.eval_data.calibration if model.eval_data is not None else None
    if calibration is None:
        return [make_batch(model.inputs, batch_size, _CALIBRATION_SEED + i) for i in range(count)]
    total = int(next(iter(calibration.values())).shape[0])
    batches = []
    for start in range(0, min(total, batch_size * count), batch_size):
        if start + batch_size > total:
            break
        batches.append({k: v[start : start + batch_size] for k, v in calibration.items()})
    return batches


def run_chunked(runner: Runner, inputs: dict[str, torch.Tensor], batch_size: int) -> list[Any]:
    """Run ``inputs`` through ``runner`` in chunks of ``batch_size`` and concatenate each output
    along dim 0. The last chunk is padded by repeating rows (fixed-batch runtimes need full
    batches); padded rows are dropped."""
    import torch

    total = int(next(iter(inputs.values())).shape[0])
    pieces: list[list[torch.Tensor]] = []
    for start in range(0, total, batch_size):
        stop = min(start + batch_size, total)
        chunk: Batch = {}
        for name, values in inputs.items():
            part = values[start:stop]
            if stop - start < batch_size:
                pad = part[-1:].expand(batch_size - (stop - start), *part.shape[1:])
                part = torch.cat([part, pad])
            chunk[name] = part
        outputs = runner.outputs(runner.run(runner.feed(chunk)))
        pieces.append([out[: stop - start] for out in outputs])
    return [torch.cat([piece[i] for piece in pieces]) for i in range(len(pieces[0]))]


def reference_spec(model: LoadedModel, spec: RunSpec) -> RunSpec:
    """The reference configuration for ``spec``: IEEE fp32 (TF32 off) on the model's native
    runtime, on the same device."""
    backend = "onnxruntime" if model.format is ModelFormat.ONNX else "eager"
    return RunSpec(
        model=spec.model,
        backend=backend,
        precision=Precision.FP32,
        batch_size=spec.batch_size,
        threads=spec.threads,
        device=spec.device,
        model_digest=spec.model_digest,
        device_index=spec.device_index,
    )


def score(check: AccuracyCheck, outputs: Sequence[Any]) -> float | None:
    """The task metric of ``outputs`` (first output = logits) against the labels, if any."""
    if check.labels is None or check.metric is None:
        return None
    return metric_fn(check.metric)(outputs[0], check.labels)


def with_reference(
    check: AccuracyCheck, model: LoadedModel, spec: RunSpec, env: Environment
) -> AccuracyCheck:
    """``check`` with reference outputs (and reference metric) from the reference config."""
    ref_spec = reference_spec(model, spec)
    backend = get_backend(ref_spec.backend)
    backend.supports(model, ref_spec, env).require(f"reference run {ref_spec.label()}")
    with pinned_threads(ref_spec.threads):
        runner = backend.prepare(model, ref_spec)
        try:
            outputs = run_chunked(runner, check.inputs, ref_spec.batch_size)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            raise MeasurementError(f"reference run {ref_spec.label()} failed: {lines[0]}") from exc
        finally:
            runner.close()
    return replace(check, reference_outputs=tuple(outputs), reference_metric=score(check, outputs))


def save_accuracy_check(check: AccuracyCheck, path: Path) -> Path:
    """Write ``check`` as tensors and plain values (readable with ``weights_only=True``)."""
    import torch

    payload = {
        "inputs": check.inputs,
        "source": check.source,
        "labels": check.labels,
        "metric": check.metric,
        "reference_outputs": list(check.reference_outputs or []),
        "has_reference": check.reference_outputs is not None,
        "reference_metric": check.reference_metric,
    }
    torch.save(payload, path)
    return path


def load_accuracy_check(path: Path) -> AccuracyCheck:
    """Inverse of :func:`save_accuracy_check` (tensors only: no code can run)."""
    import torch

    payload = torch.load(path, map_location="cpu", weights_only=True)
    return AccuracyCheck(
        inputs=dict(payload["inputs"]),
        source=str(payload["source"]),
        labels=payload["labels"],
        metric=payload["metric"],
        reference_outputs=tuple(payload["reference_outputs"]) if payload["has_reference"] else None,
        reference_metric=payload["reference_metric"],
    )
