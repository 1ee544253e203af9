"""Measure one configuration: prepare the runtime, time it, check accuracy, build a Result.

This is the unit every analysis builds on: ``measure`` runs it in-process, ``bench`` runs it in
an isolated worker process per configuration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from accelscope.accuracy.fidelity import compare_outputs
from accelscope.accuracy.metrics import metric_fn
from accelscope.backends.base import Backend, Runner
from accelscope.backends.registry import get_backend
from accelscope.errors import BadInputError, MeasurementError
from accelscope.hardware.fingerprint import Environment
from accelscope.measure.memory import MemoryProbe
from accelscope.measure.threads import pinned_threads
from accelscope.measure.timer import Clock, ProgressFn, Timer, TimerConfig
from accelscope.models.base import EvalData, LoadedModel, ModelFormat, Task
from accelscope.models.inputs import make_batch
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Device, Precision, RunSpec

if TYPE_CHECKING:
    import torch

__all__ = ["Reference", "compute_reference", "evaluate_metric", "measure_config", "reference_spec"]


@dataclass(frozen=True)
class Reference:
    """Reference (eager fp32) outputs on the measured batch, and its metric on the eval data."""

    outputs: list[torch.Tensor]
    metric_value: float | None = None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def evaluate_metric(runner: Runner, data: EvalData, batch_size: int) -> float:
    """The task metric of ``runner`` over ``data``, in chunks of ``batch_size`` (the last chunk
    padded by repeating rows, so fixed-batch runtimes work; padding is dropped before scoring)."""
    import torch

    total = data.num_samples
    logits: list[torch.Tensor] = []
    for start in range(0, total, batch_size):
        stop = min(start + batch_size, total)
        chunk: dict[str, torch.Tensor] = {}
        for name, values in data.inputs.items():
            part = values[start:stop]
            if stop - start < batch_size:
                repeat = part[-1:].expand(batch_size - (stop - start), *part.shape[1:])
                part = torch.cat([part, repeat])
            chunk[name] = part
        out = runner.outputs(runner.run(runner.feed(chunk)))[0]
        logits.append(out[: stop - start])
    return metric_fn(data.metric)(torch.cat(logits), data.labels)


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
    reference: Reference | None = None,
    seed: int = 0,
    clock: Clock = time.perf_counter,
    on_progress: ProgressFn | None = None,
) -> Result:
    """Measure ``model`` under ``spec`` with ``backend``.

    Raises ``NotAvailableError`` when the backend cannot run this here, ``BadInputError`` when
    the model fails on its very first call (wrong input spec), ``MeasurementError`` when it fails
    later or runs out of memory. ``reference`` adds fidelity and metric-drop to the accuracy.
    """
    backend.supports(model, spec, env).require(f"{spec.label()} for {model.ref}")
    memory_probe = MemoryProbe(cuda_device=0 if spec.device is Device.CUDA else None)
    with pinned_threads(spec.threads) as threads:
        memory_probe.begin()
        prepare_began = clock()
        runner = backend.prepare(model, spec)
        prepare_s = clock() - prepare_began
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
            accuracy = _accuracy(runner, model, spec, keep[0], reference)
        finally:
            runner.close()
    return Result(
        spec=spec,
        environment=env,
        status=Status.OK,
        measurement=measurement,
        memory=memory,
        threads=threads,
        accuracy=accuracy,
        prepare_s=prepare_s,
        warnings=tuple(measurement.warnings()),
    )


def _raise_run_failure(
    exc: Exception, model: LoadedModel, spec: RunSpec, *, first_call: bool
) -> NoReturn:
    import torch

    if isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower():
        raise MeasurementError(
            f"out of memory at batch {spec.batch_size} ({spec.label()})"
        ) from exc
    if first_call:
        shapes = ", ".join(s.to_text() for s in model.inputs)
        raise BadInputError(
            f"model {model.ref} failed on its first call with inputs {shapes} at batch "
            f"{spec.batch_size}: {type(exc).__name__}: {_first_line(exc)[:300]}"
        ) from exc
    raise MeasurementError(
        f"model {model.ref} failed during measurement: {type(exc).__name__}: {_first_line(exc)}"
    ) from exc


def _accuracy(
    runner: Runner, model: LoadedModel, spec: RunSpec, raw: Any, reference: Reference | None
) -> Accuracy | None:
    fidelity = None
    if reference is not None:
        fidelity = compare_outputs(
            runner.outputs(raw),
            reference.outputs,
            classifier=model.task is Task.CLASSIFICATION,
        )
    if model.eval_data is None:
        return None if fidelity is None else Accuracy(fidelity=fidelity)
    value = evaluate_metric(runner, model.eval_data, spec.batch_size)
    return Accuracy(
        fidelity=fidelity,
        metric_name=model.eval_data.metric,
        metric_value=value,
        reference_metric_value=value if reference is None else reference.metric_value,
        metric_source=model.eval_data.source,
    )


def reference_spec(model: LoadedModel, spec: RunSpec) -> RunSpec:
    """The reference configuration for ``spec``: fp32 on the model's native runtime."""
    backend = "onnxruntime" if model.format is ModelFormat.ONNX else "eager"
    return RunSpec(
        model=spec.model,
        backend=backend,
        precision=Precision.FP32,
        batch_size=spec.batch_size,
        threads=spec.threads,
        device=spec.device,
        model_digest=spec.model_digest,
    )


def compute_reference(
    model: LoadedModel, spec: RunSpec, env: Environment, seed: int = 0
) -> Reference:
    """Reference outputs on the same batch as ``spec`` (and the reference metric, if any)."""
    ref_spec = reference_spec(model, spec)
    backend = get_backend(ref_spec.backend)
    backend.supports(model, ref_spec, env).require(f"reference run {ref_spec.label()}")
    with pinned_threads(ref_spec.threads):
        runner = backend.prepare(model, ref_spec)
        try:
            feed = runner.feed(make_batch(model.inputs, ref_spec.batch_size, seed))
            outputs = runner.outputs(runner.run(feed))
            metric = (
                evaluate_metric(runner, model.eval_data, ref_spec.batch_size)
                if model.eval_data is not None
                else None
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's model can raise anything
            _raise_run_failure(exc, model, ref_spec, first_call=True)
        finally:
            runner.close()
    return Reference(outputs=outputs, metric_value=metric)
