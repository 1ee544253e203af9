"""Run a model three ways for its roofline: timed (un-profiled), counted (dispatch mode), and
profiled (``torch.profiler``), then join counts and times per operator.

Only PyTorch eager is profiled per operator: a compiled or exported runtime fuses operators into
kernels that no longer map to aten calls, so their FLOPs and bytes could not be attributed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelscope.backends.base import Backend
from accelscope.backends.eager import EagerBackend
from accelscope.errors import NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.measurement.threads import pinned_threads
from accelscope.measurement.timer import Timer, TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.inputs import make_batch
from accelscope.roofline.analysis import RooflineAnalysis, build_profile
from accelscope.roofline.ceilings import Ceilings
from accelscope.roofline.counting import count_ops
from accelscope.roofline.timing import match_event_times, per_call_times, profile_events
from accelscope.spec import Device, Precision, RunSpec

__all__ = ["PROFILED_BACKENDS", "profile_model"]

PROFILED_BACKENDS = ("eager",)


def _backend(name: str) -> Backend:
    if name != "eager":
        raise NotAvailableError(
            f"backend {name!r} not available for roofline: only eager is profiled per operator "
            "(compiled and exported runtimes fuse operators into kernels that do not map to aten "
            "calls); use `accelscope bench` to time it"
        )
    return EagerBackend()


def profile_model(
    model: LoadedModel,
    ceilings: Ceilings,
    env: Environment,
    *,
    backend: str = "eager",
    precision: Precision = Precision.FP32,
    batch_size: int = 8,
    threads: int = 1,
    device: Device = Device.CPU,
    timer: TimerConfig | None = None,
    iterations: int = 3,
    seed: int = 0,
    on_phase: Callable[[str], None] | None = None,
    device_index: int = 0,
    tf32: bool = False,
) -> RooflineAnalysis:
    """The roofline of one batch of ``model`` under ``precision`` on ``device`` (``cuda``: the
    GPU of ordinal ``device_index``; ``tf32``: fp32 may use TF32 tensor cores, and fp32
    operators are held to the tf32 roof)."""
    say = on_phase or (lambda phase: None)
    runtime = _backend(backend)
    spec = RunSpec(
        model=model.ref,
        backend=backend,
        precision=precision,
        batch_size=batch_size,
        threads=threads,
        device=device,
        model_digest=model.digest,
        device_index=device_index,
        tf32=tf32,
    )
    runtime.supports(model, spec, env).require(f"backend {backend!r} with {precision.value}")
    runner = runtime.prepare(model, spec)
    try:
        feed = runner.feed(make_batch(model.inputs, batch_size, seed))

        def call() -> Any:
            return runner.run(feed)

        with pinned_threads(threads):
            say("timing the model (un-profiled)")
            measurement = Timer(
                call,
                items_per_call=batch_size,
                config=timer or TimerConfig(),
                interval=runner.interval(),
            ).measure()
            say("counting FLOPs and bytes per operator")
            records, _ = count_ops(call)
            say("profiling operator times")
            call()
            events = profile_events(
                call, iterations, cuda=device is Device.CUDA, sync=runner.synchronize
            )
    finally:
        runner.close()
    names = [r.name for r in records]
    matched = match_event_times(names * iterations, events, device=device is Device.CUDA)
    times = per_call_times(names, matched, iterations)
    notes = measurement.warnings()
    if tf32:
        notes.append("TF32 on: fp32 operators are held to the tf32 roof")
    return build_profile(
        model=model.ref,
        backend=backend,
        precision=spec.precision_label,
        batch_size=batch_size,
        device=device.value,
        threads=threads if device is Device.CPU else 0,
        ceilings=ceilings,
        records=records,
        times_s=times,
        measured_time_s=measurement.summary.median_s,
        measured_ci_rel=measurement.summary.median_ci_rel,
        notes=[f"model time: {measurement.stop_explanation()}", *notes],
        tf32=tf32,
    )
