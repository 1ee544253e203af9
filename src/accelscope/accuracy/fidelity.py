"""Output fidelity against reference outputs (eager fp32 on the same inputs)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["Fidelity", "compare_outputs"]


@dataclass(frozen=True)
class Fidelity:
    """How far outputs are from the reference, over all output tensors together.

    ``rel_l2`` = ||out - ref|| / ||ref||; ``cosine`` is the cosine similarity of the flattened
    outputs; ``top1_agreement`` (classifiers only: last dim = classes) is the share of rows whose
    arg-max matches the reference, or ``None``.
    """

    rel_l2: float
    max_abs: float
    cosine: float
    top1_agreement: float | None


def compare_outputs(
    outputs: list[torch.Tensor], reference: list[torch.Tensor], *, classifier: bool = False
) -> Fidelity:
    """Compare output tensors with reference tensors of the same shapes (float32, CPU)."""
    import torch

    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs vs {len(reference)} reference outputs")
    for got, want in zip(outputs, reference, strict=True):
        if got.shape != want.shape:
            raise ValueError(f"output shape {tuple(got.shape)} != reference {tuple(want.shape)}")
    out = torch.cat([t.reshape(-1).double() for t in outputs])
    ref = torch.cat([t.reshape(-1).double() for t in reference])
    ref_norm = float(torch.linalg.vector_norm(ref))
    diff_norm = float(torch.linalg.vector_norm(out - ref))
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    max_abs = float((out - ref).abs().max()) if out.numel() else 0.0
    denominator = float(torch.linalg.vector_norm(out)) * ref_norm
    cosine = float(torch.dot(out, ref)) / denominator if denominator > 0 else 1.0
    agreement: float | None = None
    if classifier and outputs[0].dim() >= 2:
        got_top = outputs[0].reshape(-1, outputs[0].shape[-1]).argmax(dim=-1)
        want_top = reference[0].reshape(-1, reference[0].shape[-1]).argmax(dim=-1)
        agreement = float((got_top == want_top).double().mean())
    return Fidelity(rel_l2=rel_l2, max_abs=max_abs, cosine=cosine, top1_agreement=agreement)
