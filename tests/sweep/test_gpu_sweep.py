"""A bench sweep on a (fake) GPU: the TF32 axis, the device ordinal in every configuration, and
a parent process that never touches the GPU: its fp32 reference runs in a worker of its own.

Covers: accelscope.sweep.driver, accelscope.sweep.worker, accelscope.sweep.space,
accelscope.hardware.tf32."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.eager import TorchRunner
from accelscope.engine.accuracy_check import (
    build_accuracy_check,
    load_accuracy_check,
    save_accuracy_check,
    with_reference,
)
from accelscope.errors import BadInputError, MeasurementError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.tf32 import read_fp32_math
from accelscope.measurement.timer import TimerConfig
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.loading import load_model
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.sweep.driver import SweepPlan, run_sweep
from accelscope.sweep.executor import LocalExecutor
from accelscope.sweep.select import baseline_for
from accelscope.sweep.space import SweepSpace, expand
from accelscope.sweep.worker import InterleaveTask, ReferenceTask, WorkerTask
from accelscope.testing.fake_gpus import H100_SXM, T4, FakeGpus
from accelscope.testing.fake_workers import FakeReferenceWorker, RateTableExecutor

RATES = {("fp32", False): 100.0, ("fp32", True): 300.0, ("bf16", False): 500.0}


@pytest.fixture
def tiny(tmp_path: Path) -> LoadedModel:
    path = tmp_path / "tiny.py"
    path.write_text(  # seeded: the same weights in every process
        "import torch\ndef make():\n    torch.manual_seed(0)\n    return torch.nn.Linear(4, 3)\n"
    )
    return load_model(f"{path}:make", inputs=(TensorSpec(name="x", shape=("N", 4)),))


def gpu_plan(tf32: tuple[bool, ...] = (False, True), index: int = 0) -> SweepPlan:
    space = SweepSpace(
        backends=("eager",),
        precisions=(Precision.FP32, Precision.BF16),
        batch_sizes=(4,),
        threads=(1,),
        device=Device.CUDA,
        device_index=index,
        tf32=tf32,
    )
    return SweepPlan(
        space=space, accuracy_samples=8, timer=TimerConfig(budget_s=1.0), confirm_rounds=2
    )


def test_the_parent_of_a_gpu_sweep_never_touches_the_gpu(tiny: LoadedModel, tmp_path: Path) -> None:
    with FakeGpus([H100_SXM, H100_SXM]) as gpus:
        env = collect_environment()
        executor, reference = RateTableExecutor(env, RATES), FakeReferenceWorker()
        outcome = run_sweep(
            gpu_plan(index=1),
            tiny,
            env,
            executor,
            sink=lambda result: None,
            workdir=tmp_path,
            reference_runner=reference,
        )
    assert not gpus.touched_device, gpus.calls  # device facts read, nothing else
    [task] = reference.tasks
    assert task.spec.backend == "eager" and task.spec.precision is Precision.FP32
    assert task.spec.device is Device.CUDA and task.spec.device_index == 1 and not task.spec.tf32
    labels = sorted(r.spec.label() for r in outcome.results)
    assert labels == [
        "eager/bf16/b4/t1/cuda:1",
        "eager/fp32/b4/t1/cuda:1",
        "eager/tf32/b4/t1/cuda:1",
    ]
    measured = [t for t in executor.tasks if isinstance(t, WorkerTask)]
    assert all(t.accuracy_path == task.output_path for t in measured)
    best = next(r for r in outcome.results if r.spec.key == outcome.selection.best_key)
    assert best.spec.precision is Precision.BF16
    assert outcome.selection.baseline_key == next(
        r.spec.key for r in outcome.results if r.spec.label() == "eager/fp32/b4/t1/cuda:1"
    )


def test_a_failed_reference_worker_is_a_measurement_error(
    tiny: LoadedModel, environment: Environment, tmp_path: Path
) -> None:
    reference = FakeReferenceWorker(failure="crashed: killed by SIGSEGV")
    with pytest.raises(MeasurementError, match=r"reference run eager/fp32/b4/t1: crashed"):
        run_sweep(
            gpu_plan(tf32=(False,)),
            tiny,
            environment,
            RateTableExecutor(environment, RATES),
            sink=lambda result: None,
            workdir=tmp_path,
            reference_runner=reference,
        )


def test_without_that_gpu_here_the_reference_runs_on_this_cpu(
    tiny: LoadedModel, environment: Environment, tmp_path: Path
) -> None:
    """A cluster's GPU nodes driven from a machine without that GPU (here: ordinal 1 on a
    one-GPU machine): the reference is computed on this CPU, as before."""
    from accelscope.sweep.driver import NodeTarget

    plan = replace(
        gpu_plan(tf32=(False,), index=1),
        nodes=(NodeTarget(node_type="gpu", environment=environment),),
    )
    reference = FakeReferenceWorker()
    with FakeGpus([H100_SXM]) as gpus:
        run_sweep(
            plan,
            tiny,
            environment,
            RateTableExecutor(environment, RATES),
            sink=lambda result: None,
            workdir=tmp_path,
            reference_runner=reference,
        )
    assert reference.tasks == [] and not gpus.touched_device


def test_the_tf32_axis_crosses_fp32_only(tiny: LoadedModel, environment: Environment) -> None:
    found = expand(gpu_plan().space, tiny, environment)
    assert [(c.spec.precision_label, c.runnable) for c in found] == [
        ("fp32", True),
        ("tf32", True),
        ("bf16", True),
    ]
    tf32_only = expand(gpu_plan(tf32=(True,)).space, tiny, environment)
    assert [c.spec.precision_label for c in tf32_only] == ["fp32", "tf32", "bf16"]  # + baseline
    t4 = replace(
        environment, gpus=(replace(environment.gpus[0], name=T4.name, compute_capability="7.5"),)
    )
    [_, tf32, _] = expand(gpu_plan().space, tiny, t4)
    assert not tf32.runnable and "compute capability 8.0+" in tf32.skip_reason
    with pytest.raises(BadInputError, match="--tf32 on needs --device cuda"):
        SweepSpace(tf32=(True,))


def test_the_speedup_baseline_is_ieee_fp32() -> None:
    from accelscope.testing import fake_result, fixed_environment

    base = fake_result(fixed_environment())
    ieee = replace(base, spec=replace(base.spec, precision=Precision.FP32, options=()))
    tf32 = replace(ieee, spec=replace(ieee.spec, tf32=True, batch_size=64))
    assert baseline_for([tf32, ieee]) is ieee


def test_reference_tasks_cross_the_process_boundary(environment: Environment) -> None:
    spec = RunSpec(
        model="m",
        backend="eager",
        precision=Precision.FP32,
        batch_size=2,
        threads=1,
        device=Device.CUDA,
        device_index=3,
    )
    task = ReferenceTask(
        task=WorkerTask(
            spec=spec,
            model_ref="m",
            environment=environment,
            timer=TimerConfig(),
            accuracy_path="a",
        ),
        output_path="b",
    )
    assert ReferenceTask.from_json(task.to_json()) == task


def test_a_reference_worker_computes_what_this_process_would(
    tiny: LoadedModel, environment: Environment, tmp_path: Path
) -> None:
    """The real worker process (on the CPU here): same outputs as the reference run in process."""
    cpu = replace(environment, gpus=())
    check = build_accuracy_check(tiny, 8)
    inputs = save_accuracy_check(check, tmp_path / "inputs.pt")
    spec = RunSpec(
        model=tiny.ref, backend="eager", precision=Precision.FP32, batch_size=4, threads=1
    )
    task = ReferenceTask(
        task=WorkerTask(
            spec=spec,
            model_ref=tiny.ref,
            environment=cpu,
            timer=TimerConfig(),
            inputs=tiny.inputs,
            accuracy_path=str(inputs),
        ),
        output_path=str(tmp_path / "accuracy.pt"),
    )
    outcome = LocalExecutor(timeout_s=120).run(task)
    assert outcome.reference_path == task.output_path, outcome.failure
    from_worker = load_accuracy_check(Path(task.output_path))
    here = with_reference(check, tiny, spec, cpu)
    assert from_worker.reference_outputs is not None and here.reference_outputs is not None
    torch.testing.assert_close(from_worker.reference_outputs[0], here.reference_outputs[0])


class _MathProbeRunner(TorchRunner):
    """Records the fp32 math in force at each call."""

    seen: ClassVar[list[tuple[bool, bool | None]]] = []

    def feed(self, batch: Batch) -> Any:
        return batch

    def run(self, feed: Any) -> Any:
        _MathProbeRunner.seen.append((self.spec.tf32, read_fp32_math().tf32))
        return feed


class _MathProbeBackend(Backend):
    name = "math-probe"
    formats = frozenset({ModelFormat.TORCH})
    precisions = frozenset({Precision.FP32})
    tf32_control = True

    def available(self, env: Environment) -> Availability:
        return Availability(True)

    def prepare(
        self, model: LoadedModel, spec: RunSpec, calibration: Sequence[Batch] = ()
    ) -> Runner:
        return _MathProbeRunner(spec)


def test_interleaved_configurations_each_run_under_their_own_fp32_math(
    tiny: LoadedModel, environment: Environment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IEEE fp32 and TF32 re-measured alternately in one worker: each block runs under its
    configuration's TF32 setting, not under whichever runner was prepared last."""
    from accelscope.backends import registry
    from accelscope.hardware.tf32 import Fp32Math, restore_fp32_math
    from accelscope.sweep.worker import _run_interleaved

    monkeypatch.setitem(registry._REGISTRY, "math-probe", _MathProbeBackend())
    _MathProbeRunner.seen = []
    ieee = RunSpec(
        model=tiny.ref, backend="math-probe", precision=Precision.FP32, batch_size=2, threads=1
    )
    task = WorkerTask(
        spec=ieee,
        model_ref=tiny.ref,
        environment=environment,
        timer=TimerConfig(),
        inputs=tiny.inputs,
    )
    sent: list[tuple[Any, ...]] = []

    class Pipe:
        def send(self, message: tuple[Any, ...]) -> None:
            sent.append(message)

    try:
        _run_interleaved(
            InterleaveTask(
                task=task, specs=(ieee, replace(ieee, tf32=True)), rounds=2, block_s=0.001
            ),
            Pipe(),
        )
    finally:
        restore_fp32_math(Fp32Math(matmul="ieee", conv="tf32"))
    assert sent[-1][0] == "interleaved"
    assert {wanted for wanted, _ in _MathProbeRunner.seen} == {False, True}
    assert all(wanted == found for wanted, found in _MathProbeRunner.seen)
