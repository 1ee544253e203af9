"""``accelscope ceilings`` and ``accelscope roofline``: validate, measure or load the cached
ceilings, profile the model, store the run, write the HTML report. Returns data; never prints.

A command measures only the ceilings it needs: ``ceilings`` every dtype, ``roofline`` the memory
roof and the compute roofs of its precision (fp32, plus bf16 or fp16). Cached ceilings that lack
a needed dtype are extended (that dtype measured and added), not measured again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from accelscope.commands._lifecycle import CommandRun, check_paths
from accelscope.commands.roofline.html import render_roofline_report
from accelscope.errors import BadInputError, NotAvailableError
from accelscope.hardware.fingerprint import Environment, collect_environment
from accelscope.hardware.gpu import check_device
from accelscope.measurement.threads import available_cores
from accelscope.measurement.timer import TimerConfig
from accelscope.models.loading import load_model
from accelscope.roofline.analysis import RooflineAnalysis
from accelscope.roofline.cache import cache_path, load_cached, save_cached
from accelscope.roofline.ceilings import Ceilings
from accelscope.roofline.measure_ceilings import CeilingsPlan, device_dtypes, measure_ceilings
from accelscope.roofline.model_profile import PROFILED_BACKENDS, profile_model
from accelscope.spec import Device, DeviceRef, Precision, TensorSpec
from accelscope.store.sqlite import DEFAULT_STORE_PATH

__all__ = [
    "CeilingsOutcome",
    "CeilingsRequest",
    "RooflineOutcome",
    "RooflineRequest",
    "ceiling_dtypes",
    "ceilings",
    "roofline",
]

Events = Callable[[str], None]
Measure = Callable[..., Ceilings]
_PRECISIONS = (Precision.FP32, Precision.BF16, Precision.FP16)


@dataclass(frozen=True)
class CeilingsRequest:
    """Which device to measure (and its CUDA ordinal), whether to ignore the cache (re-measure
    ``dtypes`` from scratch), the time budget of a measurement (seconds), and the dtypes whose
    compute roofs are needed (empty: every dtype of the device; on CUDA fp32 is IEEE fp32 and
    tf32 its own row)."""

    device: Device = Device.CPU
    refresh: bool = False
    budget_s: float = 180.0
    dtypes: tuple[str, ...] = ()
    device_index: int = 0


@dataclass(frozen=True, kw_only=True)
class CeilingsOutcome:
    """The ceilings, whether they all came from the cache, the cache file, the stored run, and
    the dtypes measured now (empty when cached); ``extended``: they were added to cached ones."""

    ceilings: Ceilings
    cached: bool
    cache_path: Path
    run_id: str | None
    store_path: Path | None
    measured_dtypes: tuple[str, ...] = ()
    extended: bool = False


@dataclass(frozen=True, kw_only=True)
class RooflineRequest:
    """What ``accelscope roofline`` should profile."""

    model: str
    backend: str = "eager"
    precision: Precision = Precision.FP32
    batch_size: int = 8
    threads: int | None = None
    device: Device = Device.CPU
    device_index: int = 0
    tf32: bool = False
    report_path: Path | None = None
    measure_budget_s: float = 10.0
    ceilings_budget_s: float = 180.0
    refresh_ceilings: bool = False
    iterations: int = 3
    inputs: tuple[TensorSpec, ...] | None = None
    weights: Path | None = None
    trust_model_code: bool = False


@dataclass(frozen=True, kw_only=True)
class RooflineOutcome:
    """The profile, where it was stored and written, and the ceilings used."""

    profile: RooflineAnalysis
    ceilings: CeilingsOutcome
    run_id: str | None
    store_path: Path | None
    report_path: Path | None


def ceiling_dtypes(precision: Precision, tf32: bool = False) -> tuple[str, ...]:
    """The compute roofs a roofline at ``precision`` needs: fp32 (the roof of every operator
    that autocast leaves in fp32, and of dtypes without their own), tf32 when fp32 may use
    TF32 tensor cores, and the precision's own."""
    return tuple(dict.fromkeys(("fp32", *(("tf32",) if tf32 else ()), precision.value)))


def _check_device(device: Device, env: Environment, index: int = 0) -> None:
    check_device(DeviceRef(device, index), env.gpus)


def _cache_dir(store_path: Path | None) -> Path:
    return (store_path or DEFAULT_STORE_PATH).parent / "ceilings"


def _store_ceilings(
    store_path: Path,
    found: Ceilings,
    env: Environment,
    request: CeilingsRequest,
    command_line: str | None,
) -> str | None:
    settings = {
        "device": request.device.value,
        "device_index": request.device_index,
        "budget_s": request.budget_s,
        "dtypes": list(request.dtypes),
    }
    run = CommandRun(
        "ceilings",
        found.device_name,
        env,
        settings,
        store_path=store_path,
        command_line=command_line,
    )
    with run:
        run.add_document("ceilings", found.model_dump(mode="json"))
    return run.run_id


def ceilings(
    request: CeilingsRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    cache_dir: Path | None = None,
    environment: Environment | None = None,
    events: Events | None = None,
    measure: Measure = measure_ceilings,
    command_line: str | None = None,
) -> CeilingsOutcome:
    """The device's ceilings for ``request.dtypes``: from the fingerprint cache unless
    ``refresh``; the dtypes the cache lacks are measured and added to it; without a cache (or
    with ``refresh``) they are measured with the bandwidth. What was measured is cached and
    stored as a ``ceilings`` run (the whole, extended document)."""
    if request.budget_s <= 0:
        raise BadInputError("the ceilings budget must be positive")
    env = environment or collect_environment()
    _check_device(request.device, env, request.device_index)
    check_paths(store_path)
    wanted = request.dtypes or device_dtypes(request.device.value)
    if request.device is Device.CPU and "tf32" in wanted:
        raise BadInputError("dtype 'tf32' is a CUDA tensor-core mode; a CPU has no TF32")
    threads = available_cores() if request.device is Device.CPU else 0
    path = cache_path(
        cache_dir or _cache_dir(store_path),
        env.fingerprint(),
        request.device.value,
        threads,
        request.device_index,
    )
    cached = None if request.refresh else load_cached(path)
    if cached is not None:
        wanted = cached.missing(wanted)
        if not wanted:
            return CeilingsOutcome(
                ceilings=cached, cached=True, cache_path=path, run_id=None, store_path=None
            )
    plan = CeilingsPlan(
        device=request.device.value,
        budget_s=request.budget_s,
        dtypes=wanted,
        device_index=request.device_index,
    )
    if cached is None:
        found = measure(plan, env, events=events)
    else:
        found = measure(plan, env, events=events, extend=cached)
    save_cached(found, path)
    run_id = (
        _store_ceilings(store_path, found, env, replace(request, dtypes=wanted), command_line)
        if store_path is not None
        else None
    )
    return CeilingsOutcome(
        ceilings=found,
        cached=False,
        cache_path=path,
        run_id=run_id,
        store_path=store_path if run_id else None,
        measured_dtypes=wanted,
        extended=cached is not None,
    )


def _validate(request: RooflineRequest, env: Environment) -> int:
    if request.backend not in PROFILED_BACKENDS:
        raise NotAvailableError(
            f"backend {request.backend!r} not available for roofline: only "
            f"{', '.join(PROFILED_BACKENDS)} is profiled per operator (compiled and exported "
            "runtimes fuse operators into kernels that do not map to aten calls)"
        )
    if request.precision not in _PRECISIONS:
        raise NotAvailableError(
            f"precision {request.precision.value!r} not available for roofline: the eager "
            "backend runs fp32, bf16 (autocast) and fp16 (CUDA autocast)"
        )
    if request.batch_size <= 0:
        raise BadInputError(f"batch size must be a positive integer, got {request.batch_size}")
    if request.threads is not None and request.threads <= 0:
        raise BadInputError(f"threads must be a positive integer, got {request.threads}")
    if request.measure_budget_s <= 0 or request.iterations <= 0:
        raise BadInputError("the measure budget and profiler iterations must be positive")
    _check_device(request.device, env, request.device_index)
    if request.tf32 and request.device is not Device.CUDA:
        raise BadInputError("--tf32 on needs --device cuda: TF32 is a mode of NVIDIA tensor cores")
    return request.threads or available_cores()


def roofline(
    request: RooflineRequest,
    *,
    store_path: Path | None = DEFAULT_STORE_PATH,
    cache_dir: Path | None = None,
    environment: Environment | None = None,
    events: Events | None = None,
    measure: Measure = measure_ceilings,
    profiler: Callable[..., RooflineAnalysis] = profile_model,
    command_line: str | None = None,
) -> RooflineOutcome:
    """Profile ``request.model`` against the device's ceilings; store and report it."""
    env = environment or collect_environment()
    threads = _validate(request, env)
    check_paths(store_path, request.report_path)
    model = load_model(
        request.model,
        inputs=request.inputs,
        weights=request.weights,
        trust_model_code=request.trust_model_code,
    )
    found = ceilings(
        CeilingsRequest(
            request.device,
            request.refresh_ceilings,
            request.ceilings_budget_s,
            ceiling_dtypes(request.precision, request.tf32),
            request.device_index,
        ),
        store_path=store_path,
        cache_dir=cache_dir,
        environment=env,
        events=events,
        measure=measure,
        command_line=command_line,
    )
    profile = profiler(
        model,
        found.ceilings,
        env,
        backend=request.backend,
        precision=request.precision,
        batch_size=request.batch_size,
        threads=threads,
        device=request.device,
        timer=TimerConfig(budget_s=request.measure_budget_s),
        iterations=request.iterations,
        on_phase=events,
        device_index=request.device_index,
        tf32=request.tf32,
    )
    settings = {
        "backend": request.backend,
        "precision": request.precision.value,
        "batch_size": request.batch_size,
        "threads": threads,
        "device": request.device.value,
        "device_index": request.device_index,
        "tf32": request.tf32,
    }
    run = CommandRun(
        "roofline",
        model.ref,
        env,
        settings,
        store_path=store_path,
        command_line=command_line,
    )
    with run:
        run.add_document("roofline", profile.document().model_dump(mode="json"))
    report_path = run.write_report(render_roofline_report(profile), request.report_path)
    return RooflineOutcome(
        profile=profile,
        ceilings=found,
        run_id=run.run_id,
        store_path=run.stored_path,
        report_path=report_path,
    )
