"""Measure one configuration: prepare the runtime, time it, check accuracy, build a Result.

This is the unit every analysis builds on: ``measure`` runs it in-process, ``bench`` runs it in
an isolated worker process per configuration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from accelscope.accuracy.fidelity import compare_outputs
from accelscope.backends.base import Backend, Batch, Runner
from accelscope.engine.accuracy_check import AccuracyCheck, run_chunked, score
from accelscope.engine.energy import energy_of_config
from accelscope.errors import BadInputError, MeasurementError, OutOfMemoryError, exception_line
from accelscope.hardware.energy import EnergyMeter
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.memory import MemoryProbe
from accelscope.measurement.threads import pinned_threads
from accelscope.measurement.timer import Clock, ProgressFn, Timer, TimerConfig
from accelscope.models.base import LoadedModel, Task
from accelscope.models.inputs import make_batch
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Device, RunSpec

__all__ = ["measure_config"]

_CLASSIFIER_TASKS = (Task.CLASSIFICATION, Task.LANGUAGE_MODEL)


def _timed_call(runner: Runner, feed: Any, keep: list[Any]) -> Callable[[], object]:
    def call() -> object:
        keep[0] = runner.run(feed)
        return None

    return call


def measure_config(
    model: LoadedModel,
    spec: RunSpec,
    backend: Backend,
    env: Environment,
    *,
    timer_config: TimerConfig | None = None,
    accuracy: AccuracyCheck | None = None,
    calibration: Sequence[Batch] = (),
    seed: int = 0,
    clock: Clock = time.perf_counter,
    on_progress: ProgressFn | None = None,
    energy_meter: EnergyMeter | None = None,
) -> Result:
    """Measure ``model`` under ``spec`` with ``backend``.

    Raises ``NotAvailableError`` when the backend cannot run this here, ``BadInputError`` when
    the model fails on its very first call (wrong input spec), ``MeasurementError`` when it fails
    later or runs out of memory. With ``accuracy``, the configuration's outputs on that set are
    compared with the reference outputs and scored with the task metric.

    After timing, the call runs back to back in an energy window of its own (GPU: the NVML
    energy counter, :mod:`accelscope.engine.energy`; ``energy_meter`` a seam); the result's
    ``energy`` is its joules per item, or "not measured: why" (CPU runs cost nothing there).

    The result's environment is ``env`` with its numerics (TF32, ``cudnn.benchmark``) read
    while the runner is prepared, so it records what fp32 meant in this measurement; the
    runner's notes (an fp32 that is not IEEE fp32, say) join its warnings.
    """
    backend.supports(model, spec, env).require(f"{spec.label()} for {model.ref}")
    memory_probe = MemoryProbe(
        cuda_device=spec.device_index if spec.device is Device.CUDA else None
    )
    with pinned_threads(spec.threads) as threads:
        memory_probe.begin()
        prepare_began = clock()
        runner = backend.prepare(model, spec, calibration)
        prepare_s = clock() - prepare_began
        measured_env = env.with_numerics()
        notes = runner.notes()
        try:
            feed = runner.feed(make_batch(model.inputs, spec.batch_size, seed))
            keep: list[Any] = [None]
            timer = Timer(
                _timed_call(runner, feed, keep),
                items_per_call=spec.batch_size,
                config=timer_config,
                clock=clock,
                interval=runner.interval(),
                on_progress=on_progress,
            )
            try:
                measurement = timer.measure()
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
                _raise_run_failure(exc, model, spec, first_call=keep[0] is None)
            memory = memory_probe.end()
            energy = energy_of_config(_timed_call(runner, feed, keep), spec, env, energy_meter)
            checked = _accuracy(runner, model, spec, accuracy) if accuracy is not None else None
        finally:
            runner.close()
    return Result(
        spec=spec,
        environment=measured_env,
        status=Status.OK,
        measurement=measurement,
        memory=memory,
        threads=threads,
        accuracy=checked,
        prepare_s=prepare_s,
        energy=energy,
        warnings=(*measurement.warnings(), *notes),
    )


def _raise_run_failure(
    exc: BaseException, model: LoadedModel, spec: RunSpec, *, first_call: bool
) -> NoReturn:
    import torch

    if isinstance(exc, MemoryError | torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        raise OutOfMemoryError(
            f"out of memory at batch {spec.batch_size} ({spec.label()})"
        ) from exc
    if first_call:
        shapes = ", ".join(s.to_text() for s in model.inputs)
        raise BadInputError(
            f"model {model.ref} failed on its first call with inputs {shapes} at batch "
            f"{spec.batch_size}: {type(exc).__name__}: {exception_line(exc)[:300]}"
        ) from exc
    raise MeasurementError(
        f"model {model.ref} failed during measurement: {type(exc).__name__}: {exception_line(exc)}"
    ) from exc


def _accuracy(runner: Runner, model: LoadedModel, spec: RunSpec, check: AccuracyCheck) -> Accuracy:
    try:
        outputs = run_chunked(runner, check.inputs, spec.batch_size)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - the runtime can raise anything
        _raise_run_failure(exc, model, spec, first_call=False)
    fidelity = None
    if check.reference_outputs is not None:
        fidelity = compare_outputs(
            outputs,
            list(check.reference_outputs),
            classifier=model.task in _CLASSIFIER_TASKS,
        )
    value = score(check, outputs)
    return Accuracy(
        fidelity=fidelity,
        metric_name=check.metric,
        metric_value=value,
        reference_metric_value=value if check.reference_outputs is None else check.reference_metric,
        metric_source=check.source,
    )
