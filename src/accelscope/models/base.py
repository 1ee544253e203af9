"""Model-side types: what a loaded model is, what the zoo declares, eval data and metric."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from accelscope.spec import TensorSpec

if TYPE_CHECKING:
    import torch

__all__ = ["EvalData", "LoadedModel", "ModelFormat", "Task", "ZooEntry"]


class ModelFormat(StrEnum):
    """How a model is held: a live ``nn.Module``, a ``torch.export`` program, an ONNX file."""

    TORCH = "torch"
    EXPORTED = "exported"
    ONNX = "onnx"


class Task(StrEnum):
    """What a model's output means; decides which fidelity checks apply."""

    CLASSIFICATION = "classification"
    ENCODER = "encoder"
    LANGUAGE_MODEL = "language_model"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class EvalData:
    """Held-out evaluation inputs with labels, for a real task metric.

    ``inputs`` maps input name to a tensor whose first dimension indexes samples; ``labels`` has
    one class index per sample. ``metric`` names the metric (``top1_accuracy``); ``source`` says
    where the data came from (e.g. "scikit-learn load_digits, 20 % held out").
    ``calibration`` holds real samples from the *training* side (never the held-out ones) for
    static quantization, or ``None`` to calibrate on synthetic inputs.
    """

    inputs: dict[str, torch.Tensor]
    labels: torch.Tensor
    metric: str
    source: str
    calibration: dict[str, torch.Tensor] | None = None

    @property
    def num_samples(self) -> int:
        """Number of labelled samples."""
        return int(self.labels.shape[0])


@dataclass(frozen=True, kw_only=True)
class ZooEntry:
    """A built-in model: constructed in code, never downloaded.

    ``build`` returns the model in eval mode with deterministic (seeded) weights.
    ``eval_data`` (optional) returns held-out data for ``metric``. ``requires`` lists the
    importable packages the entry needs beyond torch (``transformers``), with the extra to install.
    """

    name: str
    description: str
    task: Task
    inputs: tuple[TensorSpec, ...]
    build: Callable[[], torch.nn.Module]
    eval_data: Callable[[], EvalData] | None = None
    requires: tuple[str, ...] = ()
    default_batch_size: int = 8
    aliases: tuple[str, ...] = ()


@dataclass(kw_only=True)
class LoadedModel:
    """A model ready for a backend: one of ``module`` (TORCH/EXPORTED) or ``onnx_path`` (ONNX).

    ``digest`` identifies the exact content (file hash, or zoo name + version) and goes into
    ``RunSpec.model_digest``. ``inputs`` is the full input spec with a symbolic batch dimension.
    """

    ref: str
    format: ModelFormat
    inputs: tuple[TensorSpec, ...]
    digest: str
    task: Task = Task.UNKNOWN
    module: torch.nn.Module | None = None
    onnx_path: Path | None = None
    eval_data: EvalData | None = None
    description: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input names in call order."""
        return tuple(spec.name for spec in self.inputs)
