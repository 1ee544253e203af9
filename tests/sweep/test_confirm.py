"""The interleaved re-measure behind the headline speedup: its statistics (exact, from scripted
blocks), the verdicts it allows, and one real run in a worker process."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.stats import paired_ratio_ci
from accelscope.measurement.timer import TimerConfig
from accelscope.models.loading import load_model
from accelscope.serialise import dump, load
from accelscope.spec import Precision, RunSpec, TensorSpec
from accelscope.sweep.confirm import Confirmation, confirmation_from_blocks
from accelscope.sweep.executor import LocalExecutor
from accelscope.sweep.select import select
from accelscope.sweep.worker import InterleaveTask, WorkerTask
from accelscope.testing import fake_result


def test_paired_ratio_ci_is_the_t_interval_of_log_ratios() -> None:
    reference = [2.0, 2.2, 1.9, 2.1]
    candidate = [1.0, 1.0, 1.0, 1.05]
    logs = [math.log(r / c) for r, c in zip(reference, candidate, strict=True)]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    half = stats.t.ppf(0.975, 3) * sd / 2
    ratio, low, high = paired_ratio_ci(reference, candidate)
    assert ratio == pytest.approx(math.exp(mean))
    assert (low, high) == (
        pytest.approx(math.exp(mean - half)),
        pytest.approx(math.exp(mean + half)),
    )
    assert paired_ratio_ci([2.0], [1.0]) == (2.0, 0.0, math.inf)
    with pytest.raises(ValueError):
        paired_ratio_ci([1.0], [])


def _blocks(per_item_s: float, jitter: float, rounds: int = 6, phase: int = 0) -> list[float]:
    return [per_item_s * (1 + jitter * ((i + phase) % 3 - 1)) for i in range(2 * rounds)]


def test_a_clear_winner_is_confirmed_with_its_interval() -> None:
    blocks = {
        "base": _blocks(3e-3, 0.01),
        "best": _blocks(1e-3, 0.01, phase=1),
        "second": _blocks(1.3e-3, 0.01, phase=2),
    }
    confirmation = confirmation_from_blocks(
        blocks, best_key="best", baseline_key="base", runner_up_key="second"
    )
    assert confirmation.speedup is not None and confirmation.lead is not None
    assert confirmation.speedup.low < 3.0 < confirmation.speedup.high
    assert confirmation.speedup.rounds == 6 and confirmation.ranked
    assert confirmation.lead.ratio == pytest.approx(1.3, rel=0.02)
    again = load(Confirmation, dump(confirmation))
    assert again == confirmation


def test_a_runner_up_measured_faster_swaps_with_the_winner() -> None:
    blocks = {
        "base": _blocks(3e-3, 0.01),
        "best": _blocks(1.2e-3, 0.01, phase=1),
        "second": _blocks(1.0e-3, 0.01, phase=2),
    }
    confirmation = confirmation_from_blocks(
        blocks, best_key="best", baseline_key="base", runner_up_key="second"
    )
    assert confirmation.best_key == "second" and confirmation.runner_up_key == "best"
    assert confirmation.speedup is not None and confirmation.speedup.candidate_key == "second"


def test_top_two_within_noise_are_not_ranked(environment) -> None:  # type: ignore[no-untyped-def]
    base, best, second = (fake_result(environment, batch=b) for b in (1, 2, 4))
    blocks = {
        base.spec.key: _blocks(3e-3, 0.01),
        best.spec.key: _blocks(1.0e-3, 0.2, phase=1),
        second.spec.key: _blocks(1.01e-3, 0.2, phase=2),
    }
    confirmation = confirmation_from_blocks(
        blocks, best_key=best.spec.key, baseline_key=base.spec.key, runner_up_key=second.spec.key
    )
    assert not confirmation.ranked
    verdict = select([base, best, second], None, confirmation).verdict
    assert "Not ranked against eager/bf16/b4/t2" in verdict
    assert "either is as fast here" in verdict and "95 % CI" in verdict


def test_a_failed_remeasure_is_said_not_hidden(environment) -> None:  # type: ignore[no-untyped-def]
    results = [fake_result(environment, batch=b) for b in (1, 2)]
    failed = Confirmation(best_key=results[1].spec.key, baseline_key=None, error="it crashed")
    assert "(No interleaved re-measure: it crashed.)" in select(results, None, failed).verdict


def test_real_interleaved_blocks_in_one_worker(tmp_path: Path) -> None:
    path = tmp_path / "tiny.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(64, 8)\n")
    ref = f"{path}:make"
    inputs = (TensorSpec(name="x", shape=("N", 64)),)
    model = load_model(ref, inputs=inputs)
    specs = tuple(
        RunSpec(
            model=ref,
            backend=backend,
            precision=Precision.FP32,
            batch_size=4,
            threads=1,
            model_digest=model.digest,
        )
        for backend in ("eager", "onnxruntime")
    )
    env = collect_environment()
    task = InterleaveTask(
        task=WorkerTask(
            spec=specs[0], model_ref=ref, environment=env, timer=TimerConfig(), inputs=inputs
        ),
        specs=specs,
        rounds=3,
        block_s=0.02,
    )
    outcome = LocalExecutor(timeout_s=120).run(task)
    assert outcome.interleaved is not None, outcome.failure
    assert outcome.interleaved["keys"] == [s.key for s in specs]
    for blocks in outcome.interleaved["block_s_per_item"]:
        assert len(blocks) == 6 and all(b > 0 for b in blocks)
    blocks = dict(
        zip(outcome.interleaved["keys"], outcome.interleaved["block_s_per_item"], strict=True)
    )
    confirmation = confirmation_from_blocks(
        blocks, best_key=specs[1].key, baseline_key=specs[0].key, runner_up_key=None
    )
    assert confirmation.speedup is not None and confirmation.speedup.rounds == 3
