"""The typed Python API behind the CLI: load, measure, store. Returns data; never prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from accelscope.backends.registry import get_backend
from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.engine.accuracy_check import (
    AccuracyCheck,
    build_accuracy_check,
    calibration_batches,
    reference_spec,
    with_reference,
)
from accelscope.engine.configuration import measure_config
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.gpu import check_device
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import ProgressFn, TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.loading import load_model
from accelscope.result import Result
from accelscope.spec import BATCH_DIM, Device, DeviceRef, Precision, RunSpec, TensorSpec
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = ["DEFAULT_BATCH_SIZE", "MeasureOutcome", "MeasureRequest", "measure", "resolve_batches"]

DEFAULT_BATCH_SIZE = 8


@dataclass(frozen=True, kw_only=True)
class MeasureRequest:
    """What ``accelscope measure`` should do. Empty ``batch_sizes`` means the default (8, or
    the model's fixed batch); ``threads=None`` means every core this process may use.
    ``device_index`` is the CUDA ordinal (``--device cuda:1``); ``tf32`` lets fp32 use TF32
    tensor cores on CUDA (off: IEEE fp32)."""

    model: str
    backend: str = "eager"
    precision: Precision = Precision.FP32
    batch_sizes: tuple[int, ...] = ()
    threads: int | None = None
    device: Device = Device.CPU
    device_index: int = 0
    tf32: bool = False
    options: tuple[tuple[str, str], ...] = ()
    inputs: tuple[TensorSpec, ...] | None = None
    weights: Path | None = None
    trust_model_code: bool = False
    timer: TimerConfig = field(default_factory=TimerConfig)
    seed: int = 0


@dataclass(frozen=True)
class MeasureOutcome:
    """Results of one ``measure`` call and where they were stored (``run_id`` None: no store)."""

    results: tuple[Result, ...]
    run_id: str | None
    store_path: Path | None
    model: LoadedModel


ConfigStarted = Callable[[RunSpec], None]


def resolve_batches(model: LoadedModel, requested: tuple[int, ...]) -> tuple[int, ...]:
    """Batch sizes to run: a model whose inputs have no batch dimension runs at its own size."""
    if any(BATCH_DIM in spec.shape for spec in model.inputs):
        return requested or (DEFAULT_BATCH_SIZE,)
    first = model.inputs[0].shape
    fixed = int(first[0]) if first else 1
    if requested and requested != (fixed,):
        raise BadInputError(
            f"model {model.ref} has a fixed batch of {fixed} (no dynamic batch dimension); "
            f"--batch {','.join(map(str, requested))} cannot be used"
        )
    return (fixed,)


def measure(
    request: MeasureRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    environment: Environment | None = None,
    on_config: ConfigStarted | None = None,
    on_progress: ProgressFn | None = None,
    command_line: str | None = None,
) -> MeasureOutcome:
    """Load the model, measure each batch size in this process, commit each result at once.

    Everything is validated (model, backend, precision, device, store path) before anything is
    measured or written; the run record is created with its first result, so a bad input leaves
    the store untouched. Ctrl-C keeps what was measured and raises ``InterruptedRunError``.
    """
    env = environment or collect_environment()
    check_device(DeviceRef(request.device, request.device_index), env.gpus)
    backend = get_backend(request.backend)
    threads = request.threads if request.threads is not None else available_cores()
    if threads <= 0:
        raise BadInputError(f"threads must be a positive integer, got {threads}")
    if request.precision not in backend.precisions:
        supported = ", ".join(p.value for p in Precision if p in backend.precisions)
        raise BadInputError(
            f"backend {backend.name!r} supports precisions {supported}, "
            f"not {request.precision.value}"
        )
    check_paths(store_path)
    model = load_model(
        request.model,
        inputs=request.inputs,
        weights=request.weights,
        trust_model_code=request.trust_model_code,
    )
    specs = [
        RunSpec(
            model=model.ref,
            backend=backend.name,
            precision=request.precision,
            batch_size=batch,
            threads=threads,
            device=request.device,
            model_digest=model.digest,
            options=request.options,
            device_index=request.device_index,
            tf32=request.tf32,
        )
        for batch in resolve_batches(model, request.batch_sizes)
    ]
    for spec in specs:
        backend.supports(model, spec, env).require(f"{spec.label()} for {model.ref}")
    results: list[Result] = []
    run = CommandRun(
        "measure",
        model.ref,
        env,
        {},
        store_path=store_path,
        command_line=command_line,
    )
    with run:
        for spec in specs:
            if on_config is not None:
                on_config(spec)
            check: AccuracyCheck | None = None
            is_reference = reference_spec(model, spec) == spec
            if model.eval_data is not None or not is_reference:
                check = build_accuracy_check(model, spec.batch_size, request.seed)
                if not is_reference:
                    check = with_reference(check, model, spec, env)
            result = measure_config(
                model,
                spec,
                backend,
                env,
                timer_config=request.timer,
                accuracy=check,
                calibration=calibration_batches(model, spec.batch_size),
                seed=request.seed,
                on_progress=on_progress,
            )
            results.append(result)
            run.add_result(result)
    return MeasureOutcome(
        results=tuple(results),
        run_id=run.run_id,
        store_path=run.stored_path,
        model=model,
    )
