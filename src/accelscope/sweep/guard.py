"""The accuracy guard: accept or reject a measured configuration against the fp32 reference.

The rule depends on what the model's outputs mean, and is always shown with its threshold:
- a task metric (eval data): metric drop <= tolerance (absolute, e.g. 1 % = 0.01);
- a classifier or language model without labels: 1 - top-1 agreement <= tolerance;
- anything else: relative L2 error of the outputs <= tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from accelscope.result import Result, Status

__all__ = ["AccuracyRule", "apply_guard"]


@dataclass(frozen=True)
class AccuracyRule:
    """Largest accepted accuracy loss, as a fraction (0.01 = 1 %)."""

    max_drop: float = 0.01

    def describe(self) -> str:
        """The rule in words, with its threshold."""
        return (
            f"accepted when the task-metric drop, else 1 - top-1 agreement, else the relative L2 "
            f"error vs eager fp32 is <= {self.max_drop:.2%}"
        )

    def verdict(self, result: Result) -> str:
        """Empty when ``result`` passes, else the reason it is rejected."""
        accuracy = result.accuracy
        if accuracy is None:
            return ""
        drop = accuracy.metric_drop
        if drop is not None:
            if drop > self.max_drop:
                return (
                    f"accuracy: {accuracy.metric_name} dropped {drop:.2%} "
                    f"(> {self.max_drop:.2%}) to {accuracy.metric_value:.2%}"
                )
            return ""
        fidelity = accuracy.fidelity
        if fidelity is None:
            return ""
        if not math.isfinite(fidelity.rel_l2):
            # an fp16/fp8 overflow gives inf or NaN outputs, and NaN compares False with any
            # tolerance: it would pass every check below
            return f"accuracy: relative L2 error is {fidelity.rel_l2} (overflow or NaN outputs)"
        if fidelity.top1_agreement is not None:
            loss = 1.0 - fidelity.top1_agreement
            if loss > self.max_drop:
                return (
                    f"accuracy: top-1 agreement {fidelity.top1_agreement:.2%} "
                    f"< {1 - self.max_drop:.2%}"
                )
            return ""
        if fidelity.rel_l2 > self.max_drop:
            return f"accuracy: relative L2 error {fidelity.rel_l2:.2%} > {self.max_drop:.2%}"
        return ""


def apply_guard(result: Result, rule: AccuracyRule) -> Result:
    """``result`` unchanged when accepted (or not ok), else marked rejected with the reason."""
    if result.status is not Status.OK:
        return result
    reason = rule.verdict(result)
    return replace(result, status=Status.REJECTED, status_reason=reason) if reason else result
