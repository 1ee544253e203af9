"""Sweep workers that answer without running a model, for sweeps on devices a test machine does
not have (with :class:`accelscope.testing.fake_gpus.FakeGpus`).

``RateTableExecutor`` is an :class:`~accelscope.sweep.executor.Executor` whose "workers" report
a measurement from a table of items/s per (precision, TF32) and the interleaved re-measure from
the same table; it records every task and checks that each measured task was handed an accuracy
set with reference outputs. ``FakeReferenceWorker`` is a sweep's reference runner: it does what
the reference worker does with the files (reads the accuracy set, writes it back with reference
outputs) with zeros for outputs, or fails with a given reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from accelscope.sweep.executor import OneAtATime, ProgressFn, WorkerOutcome

if TYPE_CHECKING:
    from accelscope.hardware.fingerprint import Environment
    from accelscope.sweep.worker import InterleaveTask, ReferenceTask, WorkerTask

__all__ = ["FakeReferenceWorker", "RateTableExecutor"]


class RateTableExecutor(OneAtATime):
    """Measurements from ``rates`` ((precision, tf32) -> items/s), reported as measured on
    ``environment``; ``tasks`` lists every task run, in order."""

    def __init__(
        self, environment: Environment, rates: Mapping[tuple[str, bool], float], samples: int = 8
    ) -> None:
        super().__init__()
        self.environment = environment
        self.rates = dict(rates)
        self.samples = samples
        self.tasks: list[WorkerTask | InterleaveTask] = []

    def _rate(self, precision: str, tf32: bool) -> float:
        return self.rates[(precision, tf32)]

    def run(
        self, task: WorkerTask | InterleaveTask, on_progress: ProgressFn | None = None
    ) -> WorkerOutcome:
        from accelscope.engine.accuracy_check import load_accuracy_check
        from accelscope.measurement.record import Measurement
        from accelscope.result import Result, Status
        from accelscope.sweep.worker import InterleaveTask

        self.tasks.append(task)
        if isinstance(task, InterleaveTask):
            blocks = {
                s.key: [1.0 / self._rate(s.precision.value, s.tf32)] * (2 * task.rounds)
                for s in task.specs
            }
            timings = {"keys": list(blocks), "block_s_per_item": list(blocks.values())}
            return WorkerOutcome(None, interleaved=timings)
        spec = task.spec
        if task.accuracy_path is None:
            return WorkerOutcome(None, "the worker was given no accuracy set")
        if load_accuracy_check(Path(task.accuracy_path)).reference_outputs is None:
            return WorkerOutcome(None, "the accuracy set has no reference outputs")
        per_call = spec.batch_size / self._rate(spec.precision.value, spec.tf32)
        measurement = Measurement(
            samples_s=(per_call,) * self.samples,
            items_per_call=spec.batch_size,
            first_call_s=per_call,
            budget_s=task.timer.budget_s,
        )
        result = Result(
            spec=spec, environment=self.environment, status=Status.OK, measurement=measurement
        )
        return WorkerOutcome(result)


class FakeReferenceWorker:
    """A sweep's ``reference_runner``: zeros of ``outputs`` columns as the reference outputs, or
    the outcome ``failure`` when given. ``tasks`` lists the tasks it was handed."""

    def __init__(self, outputs: int = 3, failure: str = "") -> None:
        self.outputs = outputs
        self.failure = failure
        self.tasks: list[ReferenceTask] = []

    def __call__(self, task: ReferenceTask) -> WorkerOutcome:
        import torch

        from accelscope.engine.accuracy_check import load_accuracy_check, save_accuracy_check

        self.tasks.append(task)
        if self.failure:
            return WorkerOutcome(None, self.failure)
        if task.task.accuracy_path is None:
            return WorkerOutcome(None, "the reference task has no accuracy set")
        check = load_accuracy_check(Path(task.task.accuracy_path))
        outputs = (torch.zeros(check.num_samples, self.outputs),)
        save_accuracy_check(replace(check, reference_outputs=outputs), Path(task.output_path))
        return WorkerOutcome(None, reference_path=task.output_path)
