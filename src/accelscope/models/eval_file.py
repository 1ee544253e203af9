"""User evaluation data from a ``.npz`` file: a real task metric for the user's own model.

The file holds one array per model input (named like the input; first dimension = samples), an
integer ``labels`` array, and optionally ``calibration_<input>`` arrays of training-side
samples for int8 calibration. It is read with ``allow_pickle=False``: no code can run.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from accelscope.errors import ModelLoadError
from accelscope.models.base import EvalData
from accelscope.spec import TensorSpec

__all__ = ["load_eval_file"]


def load_eval_file(path: Path, inputs: tuple[TensorSpec, ...], metric: str) -> EvalData:
    """Read and validate ``path`` against the model's ``inputs`` (``metric`` is checked by the
    caller, which owns the metric registry)."""
    import numpy as np
    import torch

    if not path.is_file():
        raise ModelLoadError(f"eval data file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelLoadError(
            f"{path} is not a readable .npz file (without pickles): {exc}"
        ) from exc
    if "labels" not in arrays:
        raise ModelLoadError(f"{path} has no 'labels' array")
    labels = arrays["labels"]
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ModelLoadError(f"{path}: 'labels' must be a 1-D integer array (class indices)")
    samples = int(labels.shape[0])
    tensors = {}
    for spec in inputs:
        if spec.name not in arrays:
            raise ModelLoadError(f"{path} has no array for input {spec.name!r}")
        array = arrays[spec.name]
        expected = spec.concrete_shape(samples)
        if tuple(array.shape) != expected:
            raise ModelLoadError(
                f"{path}: input {spec.name!r} has shape {tuple(array.shape)}, expected {expected}"
            )
        tensors[spec.name] = torch.from_numpy(np.ascontiguousarray(array)).to(
            getattr(torch, spec.dtype)
        )
    calibration = {
        spec.name: torch.from_numpy(np.ascontiguousarray(arrays[f"calibration_{spec.name}"])).to(
            getattr(torch, spec.dtype)
        )
        for spec in inputs
        if f"calibration_{spec.name}" in arrays
    }
    return EvalData(
        inputs=tensors,
        labels=torch.from_numpy(labels.astype(np.int64)),
        metric=metric,
        source=f"{path.name} ({samples} samples)",
        calibration=calibration if len(calibration) == len(inputs) else None,
    )
