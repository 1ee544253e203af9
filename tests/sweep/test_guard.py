"""The accuracy guard rejects outputs that overflowed: a NaN or infinite relative L2 error
compares False with any tolerance, so it must be caught before the comparisons (GPU-NOTES M6)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from accelscope.accuracy.fidelity import Fidelity
from accelscope.hardware.fingerprint import Environment
from accelscope.result import Accuracy, Status
from accelscope.sweep.guard import AccuracyRule, apply_guard
from accelscope.testing import fake_result


@pytest.mark.parametrize("rel_l2", [math.nan, math.inf])
@pytest.mark.parametrize("top1", [None, 1.0])
def test_non_finite_outputs_are_rejected(
    environment: Environment, rel_l2: float, top1: float | None
) -> None:
    fidelity = Fidelity(rel_l2=rel_l2, max_abs=math.inf, cosine=0.0, top1_agreement=top1)
    result = replace(fake_result(environment), accuracy=Accuracy(fidelity=fidelity))
    guarded = apply_guard(result, AccuracyRule(0.01))
    assert guarded.status is Status.REJECTED
    assert guarded.status_reason == (
        f"accuracy: relative L2 error is {rel_l2} (overflow or NaN outputs)"
    )


def test_finite_outputs_within_tolerance_pass(environment: Environment) -> None:
    fidelity = Fidelity(rel_l2=0.004, max_abs=0.1, cosine=1.0, top1_agreement=None)
    result = replace(fake_result(environment), accuracy=Accuracy(fidelity=fidelity))
    assert apply_guard(result, AccuracyRule(0.01)).status is Status.OK
