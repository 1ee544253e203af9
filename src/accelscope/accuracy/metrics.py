"""Task metrics computed from model outputs and labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from accelscope.errors import BadInputError

if TYPE_CHECKING:
    import torch

__all__ = ["METRICS", "metric_fn", "top1_accuracy"]


def top1_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Share (0..1) of rows whose arg-max equals the label."""
    if logits.shape[0] != labels.shape[0]:
        raise ValueError(f"{logits.shape[0]} predictions for {labels.shape[0]} labels")
    return float((logits.argmax(dim=-1) == labels).double().mean())


METRICS: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
    "top1_accuracy": top1_accuracy,
}


def metric_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], float]:
    """The metric called ``name``."""
    if name not in METRICS:
        raise BadInputError(f"unknown metric {name!r}; choose one of: {', '.join(METRICS)}")
    return METRICS[name]
