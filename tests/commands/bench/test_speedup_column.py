"""bench's speedup column and verdict under the one rule for ratios across processes: a ratio
of two sweep figures (one worker process each) is shown as "not a claim"; the configurations
re-measured alternately with the baseline in one worker show that paired ratio with its CI.

Covers: accelscope.sweep.select, accelscope.sweep.confirm, accelscope.commands.bench.view."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from accelscope.commands.bench.view import bench_view
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.stats import RatioBasis
from accelscope.result import Result
from accelscope.spec import Precision
from accelscope.sweep.confirm import confirmation_from_blocks
from accelscope.sweep.select import baseline_for, select, speedup_cells, speedup_note
from accelscope.testing import fake_result


def _result(environment: Environment, backend: str, precision: Precision, call_s: float) -> Result:
    base = fake_result(environment, batch=8)
    assert base.measurement is not None
    return dataclasses.replace(
        base,
        spec=dataclasses.replace(base.spec, backend=backend, precision=precision, options=()),
        measurement=dataclasses.replace(base.measurement, samples_s=(call_s,) * 20),
    )


@pytest.fixture
def sweep(environment: Environment) -> list[Result]:
    """eager fp32 at 8 ms per call; in their own processes onnxruntime int8 at 1 ms (8x) and
    compile int8 at 1.1 ms: the baseline ran slower in its process than it does beside them."""
    return [
        _result(environment, "eager", Precision.FP32, 0.008),
        _result(environment, "onnxruntime", Precision.INT8, 0.001),
        _result(environment, "compile", Precision.INT8, 0.0011),
    ]


def _blocks(per_item_s: float, rounds: int, phase: int = 0, wobble: float = 0.02) -> list[float]:
    return [per_item_s * (1 + wobble * ((i + phase) % 3 - 1)) for i in range(2 * rounds)]


def _text(renderable: object) -> str:
    console = Console(width=240, record=True)
    console.print(renderable)
    return console.export_text()


def test_without_a_remeasure_no_speedup_is_a_claim(sweep: list[Result]) -> None:
    baseline = baseline_for(sweep)
    assert baseline is sweep[0]
    cells = speedup_cells(sweep, baseline, None)
    assert cells[sweep[0].spec.key].text() == "1.00x"
    assert cells[sweep[1].spec.key].text() == "~8.0x (not a claim)"
    assert not cells[sweep[1].spec.key].claim
    evidence = cells[sweep[1].spec.key].evidence
    assert evidence is not None and evidence.counts_text == "1 vs 1 runs"
    selection = select(sweep, None)
    assert "~8.0x eager fp32 (separate processes, one run each: not a claim)" in selection.verdict
    out = _text(bench_view(sweep, {"": selection}, title="bench"))
    assert "~8.0x (not a claim)" in out and "~7.3x (not a claim)" in out
    assert "~N.Nx (not a claim) = separate processes, one run each" in out
    assert "8.00x" not in out


def test_the_remeasured_configurations_show_the_interleaved_ratio(sweep: list[Result]) -> None:
    base, best, second = (r.spec.key for r in sweep)
    blocks = {  # beside each other in one worker: ~3.7x, not the sweep's 8x
        base: _blocks(3.7e-3 / 8, 6),
        best: _blocks(1.0e-3 / 8, 6, phase=1),
        second: _blocks(1.1e-3 / 8, 6, phase=2),
    }
    confirmation = confirmation_from_blocks(
        blocks, best_key=best, baseline_key=base, runner_up_key=second
    )
    assert confirmation.speedup is not None
    cells = speedup_cells(sweep, sweep[0], confirmation)
    winner = cells[best]
    assert winner.interleaved and winner.claim
    assert winner.evidence is not None and winner.evidence.basis is RatioBasis.ROUNDS
    estimate = winner.evidence.estimate
    assert estimate is not None
    # the same figure and interval as the verdict's (confirmation.speedup), from the same blocks
    assert winner.ratio == pytest.approx(confirmation.speedup.ratio, rel=1e-12)
    assert estimate.low == pytest.approx(confirmation.speedup.low, rel=1e-12)
    assert estimate.high == pytest.approx(confirmation.speedup.high, rel=1e-12)
    assert winner.ratio == pytest.approx(3.7, rel=0.01)
    assert cells[second].interleaved and cells[second].claim
    selection = select(sweep, None, confirmation)
    assert confirmation.speedup.describe("eager fp32") in selection.verdict
    out = _text(bench_view(sweep, {"": selection}, title="bench"))
    wide = max(estimate.high / winner.ratio - 1, 1 - estimate.low / winner.ratio)
    assert 0.01 < wide < 0.1
    assert winner.text() == f"{winner.ratio:.2f}x \u00b1{wide * 100:.0f}%"
    assert winner.text(interval=True) == (
        f"{winner.ratio:.2f}x (95 % CI {estimate.low:.2f}\u2013{estimate.high:.2f})"
    )
    assert winner.text() in out
    assert "not a claim" not in out
    assert "measured alternately with the baseline in one worker (6 interleaved rounds" in out
    assert "~8.0x" not in out and "8.00x" not in out


def test_one_interleaved_round_is_not_a_claim(sweep: list[Result]) -> None:
    base, best = sweep[0].spec.key, sweep[1].spec.key
    blocks = {base: _blocks(3.7e-3 / 8, 1), best: _blocks(1.0e-3 / 8, 1)}
    confirmation = confirmation_from_blocks(
        blocks, best_key=best, baseline_key=base, runner_up_key=None
    )
    cell = speedup_cells(sweep, sweep[0], confirmation)[best]
    assert cell.interleaved and not cell.claim
    assert cell.text() == "~3.7x (not a claim)"
    verdict = select(sweep, None, confirmation).verdict
    assert "~3.7x eager fp32 (1 interleaved round: not a claim)" in verdict
    # the third configuration was not re-measured: its ratio still crosses processes
    assert not speedup_cells(sweep, sweep[0], confirmation)[sweep[2].spec.key].interleaved


def test_the_note_says_only_what_the_column_holds() -> None:
    assert speedup_note([]) == ""
