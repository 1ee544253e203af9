"""The regression gate's decision from interleaved rounds of baseline and candidate processes."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest
from scipy import stats as scipy_stats

from accelscope.compare.gate import (
    EXIT_CODES,
    GateStatus,
    GateThresholds,
    ProcessFigures,
    decide,
    round_order,
)
from accelscope.errors import BadInputError
from accelscope.measurement.stats import paired_ratio, rounds_to_settle
from accelscope.serialise import dump


def _rounds(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    p99_factor: float = 1.5,
    candidate_p99_factor: float | None = None,
    accuracy: tuple[float, float] | None = None,
) -> list[ProcessFigures]:
    """Processes of complete rounds, in the order the gate runs them."""
    processes: list[ProcessFigures] = []
    values = {"baseline": baseline, "candidate": candidate}
    for index in range(len(baseline)):
        for side in round_order(index):
            median = values[side][index]
            factor = p99_factor
            if side == "candidate" and candidate_p99_factor is not None:
                factor = candidate_p99_factor
            processes.append(
                ProcessFigures(
                    side=side,
                    round_index=index,
                    median_s=median,
                    p99_s=median * factor,
                    samples=100,
                    peak_memory_bytes=1e9,
                    accuracy=None if accuracy is None else accuracy[0 if side == "baseline" else 1],
                )
            )
    return processes


BASE = [0.100, 0.103, 0.098, 0.101, 0.099, 0.102]
JITTER = [1.004, 0.997, 1.002, 0.996, 1.003, 0.998]


def test_exit_codes() -> None:
    assert EXIT_CODES == {GateStatus.PASS: 0, GateStatus.REGRESSION: 1, GateStatus.INCONCLUSIVE: 3}
    assert GateStatus.PASS.value == "pass"


def test_round_order_alternates() -> None:
    assert round_order(0) == ("baseline", "candidate")
    assert round_order(1) == ("candidate", "baseline")
    assert round_order(2) == ("baseline", "candidate")
    assert round_order(3) == ("candidate", "baseline")
    sequence = [side for index in range(4) for side in round_order(index)]
    assert sequence == ["baseline", "candidate", "candidate", "baseline"] * 2


def test_identical_rounds_pass() -> None:
    decision = decide(_rounds(BASE, BASE), GateThresholds())
    assert decision.status is GateStatus.PASS
    assert decision.exit_code == 0
    assert (decision.time.ratio, decision.time.low, decision.time.high) == (1.0, 1.0, 1.0)
    assert decision.rounds == 6
    assert decision.rounds_needed is None
    assert decision.reasons[0] == (
        "median time per item +0.0 % (95% CI +0.0 % to +0.0 %): within the 5.0% allowed"
    )


def test_tight_jitter_passes() -> None:
    candidate = [b * j for b, j in zip(BASE, JITTER, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds())
    assert decision.status is GateStatus.PASS
    assert decision.exit_code == 0
    assert decision.time.low < 1.0 < decision.time.high <= 1.05
    expected = paired_ratio(BASE, candidate)
    assert decision.time == expected


def test_consistent_slowdown_is_a_regression() -> None:
    candidate = [b * 1.2 * j for b, j in zip(BASE, JITTER, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds())
    assert decision.status is GateStatus.REGRESSION
    assert decision.exit_code == 1
    assert decision.time.ratio == pytest.approx(1.2, rel=0.01)
    assert decision.time.low > 1.05
    assert decision.reasons[0].endswith(": slower than the 5.0% allowed")
    assert decision.rounds_needed is None


def test_small_slowdown_with_large_jitter_is_inconclusive() -> None:
    wide = [1.15, 0.93, 1.12, 0.97, 1.10, 0.99]
    candidate = [b * 1.05 * j for b, j in zip(BASE, wide, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds())
    assert decision.status is GateStatus.INCONCLUSIVE
    assert decision.exit_code == 3
    assert decision.time.low < 1.05 < decision.time.high
    assert "straddles the 5.0% allowed" in decision.reasons[0]
    assert isinstance(decision.rounds_needed, int)
    assert decision.rounds_needed > decision.rounds
    logs = np.log(np.asarray(candidate) / np.asarray(BASE))
    gap = abs(float(np.mean(logs)) - math.log(1.05))
    sd = float(np.std(logs, ddof=1))
    assert decision.rounds_needed == rounds_to_settle(sd, gap)
    # at that many rounds the t interval is narrower than the gap
    n = decision.rounds_needed
    assert float(scipy_stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) < gap


def test_estimate_on_the_threshold_needs_unbounded_rounds() -> None:
    # the per-round ratios are 1.05 * e^(+-0.1): their geometric mean is the threshold itself
    spread = [math.exp(0.1), math.exp(-0.1)] * 3
    candidate = [b * 1.05 * s for b, s in zip(BASE, spread, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds())
    assert decision.status is GateStatus.INCONCLUSIVE
    assert decision.time.ratio == pytest.approx(1.05)
    assert decision.rounds_needed is None


def test_one_round_is_inconclusive_without_a_rounds_estimate() -> None:
    decision = decide(_rounds([0.1], [0.1]), GateThresholds())
    assert decision.status is GateStatus.INCONCLUSIVE
    assert decision.rounds == 1
    assert decision.time.low == 0.0 and decision.time.high == math.inf
    assert decision.rounds_needed is None
    assert "95% CI -100.0 % to inf" in decision.reasons[0]


def test_faster_candidate_passes() -> None:
    candidate = [b * 0.8 * j for b, j in zip(BASE, JITTER, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds())
    assert decision.status is GateStatus.PASS
    assert decision.time.high < 1.0
    assert decision.reasons[0].endswith(": faster")
    assert "faster" in decision.reasons[0]


def test_accuracy_drop_is_a_regression_even_when_time_passes() -> None:
    decision = decide(_rounds(BASE, BASE, accuracy=(0.90, 0.88)), GateThresholds())
    assert decision.status is GateStatus.REGRESSION
    assert decision.exit_code == 1
    assert decision.reasons[0].endswith("within the 5.0% allowed")
    assert decision.accuracy_baseline == 0.90 and decision.accuracy_candidate == 0.88
    assert decision.accuracy_drop == pytest.approx(0.02)
    assert decision.reasons[-1] == (
        "accuracy metric 0.9 -> 0.88 (drop +2.00%): more than the 0.50% allowed"
    )


def test_small_accuracy_drop_passes() -> None:
    decision = decide(_rounds(BASE, BASE, accuracy=(0.90, 0.898)), GateThresholds())
    assert decision.status is GateStatus.PASS
    assert decision.accuracy_drop == pytest.approx(0.002)
    assert decision.reasons[-1].endswith("within the 0.50% allowed")
    looser = decide(
        _rounds(BASE, BASE, accuracy=(0.90, 0.88)), GateThresholds(max_accuracy_drop=0.05)
    )
    assert looser.status is GateStatus.PASS


def test_no_accuracy_is_reported_as_not_measured() -> None:
    decision = decide(_rounds(BASE, BASE), GateThresholds())
    assert decision.accuracy_baseline is None and decision.accuracy_candidate is None
    assert decision.accuracy_drop is None
    assert any("not measured" in reason for reason in decision.reasons)
    assert decision.reasons[-1].startswith("accuracy: not measured")


def test_p99_is_reported_but_not_gated_by_default() -> None:
    processes = _rounds(BASE, BASE, candidate_p99_factor=1.5 * 1.3)
    decision = decide(processes, GateThresholds())
    assert decision.status is GateStatus.PASS
    assert decision.p99.ratio == pytest.approx(1.3)
    assert decision.reasons[1].endswith(": not gated")
    assert decision.reasons[1].startswith("p99 time per item +30.0 %")


def test_p99_slowdown_is_gated_when_asked() -> None:
    processes = _rounds(BASE, BASE, candidate_p99_factor=1.5 * 1.3)
    decision = decide(processes, GateThresholds(max_p99_slowdown=0.10))
    assert decision.status is GateStatus.REGRESSION
    assert decision.reasons[0].endswith("within the 5.0% allowed")
    assert decision.reasons[1].endswith("slower than the 10.0% allowed")
    lenient = decide(processes, GateThresholds(max_p99_slowdown=0.5))
    assert lenient.status is GateStatus.PASS
    assert lenient.reasons[1].endswith("within the 50.0% allowed")


def test_incomplete_last_round_is_ignored() -> None:
    candidate = [b * j for b, j in zip(BASE, JITTER, strict=True)]
    complete = _rounds(BASE[:3], candidate[:3])
    straggler = ProcessFigures(side="baseline", round_index=3, median_s=9.0, p99_s=9.0, samples=5)
    decision = decide([*complete, straggler], GateThresholds())
    assert decision.rounds == 3
    assert decision.time == decide(complete, GateThresholds()).time
    assert decision.time == paired_ratio(BASE[:3], candidate[:3])


def test_no_complete_round_is_bad_input() -> None:
    lone = ProcessFigures(side="baseline", round_index=0, median_s=0.1, p99_s=0.2, samples=10)
    with pytest.raises(BadInputError, match="at least one complete round"):
        decide([lone], GateThresholds())
    with pytest.raises(BadInputError, match="at least one complete round"):
        decide([], GateThresholds())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_slowdown": -0.01},
        {"max_slowdown": 1.0},
        {"max_accuracy_drop": 1.5},
        {"max_accuracy_drop": -0.1},
        {"max_p99_slowdown": -0.2},
        {"max_p99_slowdown": 1.0},
        {"confidence": 0.4},
        {"confidence": 1.0},
    ],
)
def test_threshold_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(BadInputError) as error:
        GateThresholds(**kwargs)
    message = str(error.value)
    assert "\n" not in message
    name = next(iter(kwargs))
    assert name.replace("_", "-") in message or name in message


def test_threshold_validation_message() -> None:
    with pytest.raises(BadInputError) as error:
        GateThresholds(max_slowdown=1.0)
    assert str(error.value) == "max-slowdown must be in 0..100 %, got 1.0"


def test_valid_thresholds() -> None:
    thresholds = GateThresholds(max_slowdown=0.0, max_accuracy_drop=0.0, max_p99_slowdown=0.99)
    assert thresholds.max_p99_slowdown == 0.99
    assert GateThresholds().confidence == 0.95
    assert GateThresholds(confidence=0.5).confidence == 0.5


def test_confidence_is_used_for_the_interval() -> None:
    candidate = [b * j for b, j in zip(BASE, JITTER, strict=True)]
    decision = decide(_rounds(BASE, candidate), GateThresholds(confidence=0.99))
    assert decision.time == paired_ratio(BASE, candidate, 0.99)
    assert decision.time.confidence == 0.99


def test_to_dict_is_json_serialisable() -> None:
    decision = decide(_rounds([0.1], [0.12], accuracy=(0.9, 0.9)), GateThresholds())
    data = decision.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text) == data
    assert data["status"] == "inconclusive"
    assert data["exit_code"] == 3
    assert data["time_per_item_p50"]["high"] is None  # one round: unbounded
    assert data["time_per_item_p50"]["ratio"] == pytest.approx(1.2)
    assert data["time_per_item_p99"]["high"] is None
    assert data["accuracy_drop"] == 0.0
    assert data["rounds"] == 1 and data["rounds_needed"] is None
    assert data["reasons"] == list(decision.reasons)

    full = decide(_rounds(BASE, BASE), GateThresholds()).to_dict()
    assert json.loads(json.dumps(full, allow_nan=False)) == full
    assert full["status"] == "pass" and full["exit_code"] == 0
    assert full["accuracy_baseline"] is None and full["accuracy_drop"] is None


def test_process_figures_stored_shape() -> None:
    process = ProcessFigures(
        side="candidate", round_index=2, median_s=0.1, p99_s=0.2, samples=7, accuracy=0.5
    )
    assert dump(process) == {
        "side": "candidate",
        "round_index": 2,
        "median_s": 0.1,
        "p99_s": 0.2,
        "samples": 7,
        "peak_memory_bytes": None,
        "accuracy": 0.5,
    }
