"""Strategy, guard and selection logic with a fake executor (no processes, deterministic).

Covers: accelscope.sweep.driver, accelscope.sweep.guard, accelscope.sweep.select,
accelscope.sweep.space."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from accelscope.accuracy.fidelity import Fidelity
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.record import Measurement
from accelscope.models.loading import load_model
from accelscope.result import Accuracy, Cause, Result, Status
from accelscope.spec import Precision, RunSpec, TensorSpec
from accelscope.sweep.driver import SweepPlan, run_sweep
from accelscope.sweep.executor import OneAtATime, WorkerOutcome
from accelscope.sweep.guard import AccuracyRule, apply_guard
from accelscope.sweep.select import select
from accelscope.sweep.space import SweepSpace
from accelscope.sweep.worker import InterleaveTask, WorkerTask
from accelscope.testing import fake_result

# items/s and top-1 agreement per (precision, batch): bf16/b4 is fastest but inaccurate.
TABLE = {
    ("fp32", 1): (100.0, 1.0),
    ("fp32", 2): (150.0, 1.0),
    ("fp32", 4): (180.0, 1.0),
    ("bf16", 1): (200.0, 0.999),
    ("bf16", 2): (320.0, 0.995),
    ("bf16", 4): (900.0, 0.90),
}


class FakeExecutor(OneAtATime):
    def __init__(self, environment: Environment) -> None:
        super().__init__()
        self.env = environment
        self.calls: list[tuple[str, float]] = []
        self.interleaved: list[tuple[str, ...]] = []

    def run(self, task: WorkerTask | InterleaveTask, on_progress: object = None) -> WorkerOutcome:
        if isinstance(task, InterleaveTask):  # the re-measure: TABLE's rates, 1 % jitter
            self.interleaved.append(tuple(s.label() for s in task.specs))
            blocks = {
                s.key: [
                    (1 + 0.01 * ((i + j) % 3 - 1)) / TABLE[(s.precision.value, s.batch_size)][0]
                    for i in range(2 * task.rounds)
                ]
                for j, s in enumerate(task.specs)
            }
            timings = {"keys": list(blocks), "block_s_per_item": list(blocks.values())}
            return WorkerOutcome(None, interleaved=timings)
        spec = task.spec
        rate, agreement = TABLE[(spec.precision.value, spec.batch_size)]
        per_call = spec.batch_size / rate
        count = max(5, int(task.timer.budget_s / per_call))
        self.calls.append((spec.label(), task.timer.budget_s))
        measurement = Measurement(
            samples_s=(per_call,) * count,
            items_per_call=spec.batch_size,
            first_call_s=per_call,
            budget_s=task.timer.budget_s,
        )
        fidelity = Fidelity(rel_l2=0.001, max_abs=0.01, cosine=0.9999, top1_agreement=agreement)
        result = Result(
            spec=spec,
            environment=self.env,
            status=Status.OK,
            measurement=measurement,
            accuracy=Accuracy(fidelity=fidelity),
        )
        return WorkerOutcome(result)


@pytest.fixture
def tiny(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "tiny.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(4, 3)\n")
    return load_model(f"{path}:make", inputs=(TensorSpec(name="x", shape=("N", 4)),))


def _plan(strategy: str, sla: float | None = None) -> SweepPlan:
    space = SweepSpace(
        backends=("eager",),
        precisions=(Precision.FP32, Precision.BF16),
        batch_sizes=(1, 2, 4),
        threads=(1,),
    )
    return SweepPlan(space=space, strategy=strategy, sla_p99_s=sla, accuracy_samples=8)


def test_grid_rejects_inaccurate_and_picks_fastest_accepted(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    stored: list[Result] = []
    executor = FakeExecutor(environment)
    outcome = run_sweep(
        _plan("grid"), tiny, environment, executor, sink=stored.append, workdir=tmp_path
    )
    by_label = {r.spec.label(): r for r in outcome.results}
    assert by_label["eager/bf16/b4/t1"].status is Status.REJECTED
    assert "top-1 agreement 90.00%" in by_label["eager/bf16/b4/t1"].status_reason
    assert outcome.selection.best_key == by_label["eager/bf16/b2/t1"].spec.key
    # the headline speedup comes from the interleaved re-measure of baseline and winner, with a CI
    assert executor.interleaved == [("eager/fp32/b4/t1", "eager/bf16/b2/t1")]
    confirmation = outcome.selection.confirmation
    assert confirmation is not None and confirmation.speedup is not None
    low, high = confirmation.speedup.low, confirmation.speedup.high
    assert low < 320 / 180 < high and high - low < 0.1
    assert "1.78x eager fp32 (95 % CI" in outcome.selection.verdict
    assert len(stored) == 6 and len(executor.calls) == 6


def test_sla_excludes_slow_calls(tiny, environment: Environment, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outcome = run_sweep(
        _plan("grid", sla=0.006),
        tiny,
        environment,
        FakeExecutor(environment),
        sink=lambda r: None,
        workdir=tmp_path,
    )
    best = next(r for r in outcome.results if r.spec.key == outcome.selection.best_key)
    assert best.measurement is not None and best.measurement.summary.p99_s <= 0.006
    assert best.spec.label() == "eager/bf16/b1/t1"  # b2 (6.25 ms per call) misses the SLA
    assert "within the 6 ms p99 SLA" in outcome.selection.verdict


def test_fast_strategy_screens_then_measures_contenders(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    grid_executor, fast_executor = FakeExecutor(environment), FakeExecutor(environment)
    grid = run_sweep(
        _plan("grid"), tiny, environment, grid_executor, sink=lambda r: None, workdir=tmp_path
    )
    fast = run_sweep(
        _plan("fast"), tiny, environment, fast_executor, sink=lambda r: None, workdir=tmp_path
    )
    assert fast.selection.best_key == grid.selection.best_key
    finals = [label for label, budget in fast_executor.calls if budget == 10.0]
    # bf16/b2 (320/s) leads; bf16/b1 (200/s) is > 15 % behind, so it is ruled out
    assert finals == ["eager/bf16/b2/t1"]
    # 6 screens of 1 s + 1 final of 10 s vs 6 x 10 s (first calls included)
    assert fast.measurement_time_s < 0.3 * grid.measurement_time_s


def test_guard_rules(environment: Environment) -> None:
    rule = AccuracyRule(0.01)
    result = fake_result(environment)  # top1_accuracy 0.97 vs reference 0.975: drop 0.5 %
    assert apply_guard(result, rule).status is Status.OK
    assert apply_guard(result, AccuracyRule(0.001)).status is Status.REJECTED
    assert select([result], None).best_key == result.spec.key


def test_unknown_backend_in_space_is_bad_input() -> None:
    from accelscope.errors import BadInputError

    with pytest.raises(BadInputError, match="unknown backend"):
        SweepSpace(backends=("tensorflow",))


def test_runspec_label_is_stable() -> None:
    spec = RunSpec(model="m", backend="eager", precision=Precision.BF16, batch_size=8, threads=2)
    assert spec.label() == "eager/bf16/b8/t2"


def test_contenders_are_those_the_screening_cannot_rule_out(environment: Environment) -> None:
    from accelscope.sweep.driver import _contenders

    results = []
    for batch, rate in zip((1, 2, 3, 4, 5, 6), (100.0, 95.0, 90.0, 50.0, 40.0, 30.0), strict=True):
        result = fake_result(environment, batch=batch)
        samples = (batch / rate,) * 10
        assert result.measurement is not None
        measurement = Measurement(samples_s=samples, items_per_call=batch, first_call_s=0.1)
        results.append(replace(result, measurement=measurement, accuracy=None))
    chosen = [r.spec.batch_size for r in _contenders(results, None)]
    assert chosen == [1, 2]  # 90/s is also within 15 %, but at most a third (2 of 6) go on


def _resumed_labels(
    tiny, environment: Environment, tmp_path: Path, changes: list[tuple[Status, Cause, str]]
) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """Resume a finished grid whose first results are replaced by ``changes`` (status, cause,
    reason): the labels measured again, and the changed ones in order."""
    first = run_sweep(
        _plan("grid"),
        tiny,
        environment,
        FakeExecutor(environment),
        sink=lambda r: None,
        workdir=tmp_path,
    )
    ok = [r for r in first.results if r.status is Status.OK]
    lost = [
        dataclasses.replace(ok[i], status=status, cause=cause, status_reason=reason)
        for i, (status, cause, reason) in enumerate(changes)
    ]
    executor = FakeExecutor(environment)
    changed = {r.spec.key for r in lost}
    prior = [*lost, *(r for r in first.results if r.spec.key not in changed)]
    run_sweep(
        _plan("grid"),
        tiny,
        environment,
        executor,
        sink=lambda r: None,
        workdir=tmp_path,
        prior=prior,
    )
    return sorted(label for label, _ in executor.calls), [r.spec.label() for r in lost]


def test_resume_measures_again_only_what_a_cluster_or_the_budget_lost(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from accelscope.sweep.driver import BUDGET_REASON, NO_NODE_REASON
    from accelscope.sweep.executor import NODE_LOST

    again, lost = _resumed_labels(
        tiny,
        environment,
        tmp_path,
        [
            (Status.FAILED, Cause.NODE_LOST, f"{NODE_LOST}its node died"),
            (Status.SKIPPED, Cause.NO_NODE, NO_NODE_REASON),
            (Status.SKIPPED, Cause.BUDGET, BUDGET_REASON),
            (Status.FAILED, Cause.CRASHED, "crashed: SIGSEGV"),
        ],
    )
    assert again == sorted(lost[:3])  # a real crash is not retried


def test_resume_follows_the_cause_not_the_words(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from accelscope.sweep.driver import BUDGET_REASON
    from accelscope.sweep.executor import NODE_LOST

    again, lost = _resumed_labels(
        tiny,
        environment,
        tmp_path,
        [
            (Status.FAILED, Cause.NODE_LOST, "the Ray task vanished"),  # lost: retried
            (Status.SKIPPED, Cause.BUDGET, "out of time"),  # budget: retried
            (Status.FAILED, Cause.CRASHED, f"{NODE_LOST}words only"),  # a crash: kept
            (Status.SKIPPED, Cause.PRESCREEN, BUDGET_REASON),  # ruled out: kept
        ],
    )
    assert again == sorted(lost[:2])


class FailingExecutor(FakeExecutor):
    """:class:`FakeExecutor` whose configurations at ``batch`` and above fail with ``cause``
    (``None``: an executor that gives none) and ``reason``."""

    def __init__(
        self, environment: Environment, batch: int, cause: Cause | None, reason: str
    ) -> None:
        super().__init__(environment)
        self.batch, self.cause, self.reason = batch, cause, reason

    def run(self, task: WorkerTask | InterleaveTask, on_progress: object = None) -> WorkerOutcome:
        if isinstance(task, WorkerTask) and task.spec.batch_size >= self.batch:
            self.calls.append((task.spec.label(), task.timer.budget_s))
            return WorkerOutcome(None, self.reason, cause=self.cause)
        return super().run(task, on_progress)


@pytest.mark.parametrize(
    ("cause", "reason", "ends_the_axis"),
    [
        (Cause.OUT_OF_MEMORY, "CUBLAS_STATUS_ALLOC_FAILED", True),  # the cause, whatever the words
        (Cause.ERROR, "ValueError: not out of memory at all", False),
        (Cause.CRASHED, "crashed: killed by SIGKILL", False),
        (Cause.TIMEOUT, "timeout: no result after 1 s", False),
    ],
)
def test_an_out_of_memory_cause_ends_the_larger_batches(
    tiny, environment: Environment, tmp_path: Path, cause: Cause, reason: str, ends_the_axis: bool
) -> None:  # type: ignore[no-untyped-def]
    executor = FailingExecutor(environment, 2, cause, reason)
    plan = replace(_plan("grid"), confirm_rounds=0)
    outcome = run_sweep(plan, tiny, environment, executor, sink=lambda r: None, workdir=tmp_path)
    by_label = {r.spec.label(): r for r in outcome.results}
    failed = by_label["eager/fp32/b2/t1"]
    assert (failed.status, failed.cause, failed.status_reason) == (Status.FAILED, cause, reason)
    larger = by_label["eager/fp32/b4/t1"]
    if ends_the_axis:
        assert (larger.status, larger.cause) == (Status.SKIPPED, Cause.OUT_OF_MEMORY)
        assert larger.status_reason == "skipped: batch 2 already ran out of memory"
        assert "eager/fp32/b4/t1" not in {label for label, _ in executor.calls}
    else:
        assert (larger.status, larger.cause) == (Status.FAILED, cause)


def test_a_failure_without_a_cause_is_recorded_as_an_error(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    executor = FailingExecutor(environment, 2, None, "out of memory, says a fake")
    plan = replace(_plan("grid"), confirm_rounds=0)
    outcome = run_sweep(plan, tiny, environment, executor, sink=lambda r: None, workdir=tmp_path)
    by_label = {r.spec.label(): r for r in outcome.results}
    assert by_label["eager/fp32/b2/t1"].cause is Cause.ERROR
    assert by_label["eager/fp32/b4/t1"].status is Status.FAILED  # measured: no OOM decided


def test_the_budget_skips_with_its_cause_and_resume_measures_them(
    tiny, environment: Environment, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from accelscope.sweep.driver import BUDGET_REASON

    plan = replace(_plan("grid"), total_budget_s=0.0, confirm_rounds=0)
    executor = FakeExecutor(environment)
    first = run_sweep(plan, tiny, environment, executor, sink=lambda r: None, workdir=tmp_path)
    assert executor.calls == []
    assert {(r.status, r.cause, r.status_reason) for r in first.results} == {
        (Status.SKIPPED, Cause.BUDGET, BUDGET_REASON)
    }
    executor = FakeExecutor(environment)
    run_sweep(
        _plan("grid"),
        tiny,
        environment,
        executor,
        sink=lambda r: None,
        workdir=tmp_path,
        prior=first.results,
    )
    assert len(executor.calls) == len(first.results)  # every one measured on resume
