"""Measure a device's ceilings: search the fastest dense kernel per dtype, stream bandwidth,
the peak at each thread count, and the ISA peak they are a fraction of.

Collaborators are arguments (kernel builder, clock, stream kernel, CUDA interval), so the search
logic runs in tests on fake kernels and a fake clock.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.sync import IntervalTimer
from accelscope.measure.threads import available_cores, pinned_threads
from accelscope.roofline.bandwidth import measure_streams, stream_size
from accelscope.roofline.ceilings import DTYPES, Ceilings, KernelPeak, Theoretical
from accelscope.roofline.kernels import Kernel, build_kernel, neighbors, seeds
from accelscope.roofline.search import Candidate, SearchOutcome, best_first_search, measure_rate
from accelscope.roofline.theoretical import parse_topology, theoretical_cpu, theoretical_gpu

__all__ = ["NAIVE", "CeilingsPlan", "measure_ceilings"]

NAIVE = Candidate("mm", (4096, 4096, 4096))
"""The naive square matmul reported beside the searched peak (``torch._int_mm`` for int8)."""

Builder = Callable[[Candidate, str, str], Kernel | None]
Streams = Callable[[int, str], dict[str, float]]
Events = Callable[[str], None]


@dataclass(frozen=True)
class CeilingsPlan:
    """What to measure: device, total time budget (seconds), dtypes, thread counts (CPU; empty:
    1 and all usable cores), and the sampling time per kernel."""

    device: str = "cpu"
    budget_s: float = 180.0
    dtypes: tuple[str, ...] = DTYPES
    threads: tuple[int, ...] = ()
    min_time_s: float = 0.15

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise BadInputError(f"unknown device {self.device!r}; choose cpu or cuda")
        if self.budget_s <= 0:
            raise BadInputError("the ceilings budget must be positive")
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown:
            raise BadInputError(f"unknown dtype {unknown[0]!r}; choose from {', '.join(DTYPES)}")


def _read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cuda_tools(device: str) -> tuple[IntervalTimer | None, Callable[[], None] | None]:
    if device != "cuda":
        return None, None
    import torch

    if not torch.cuda.is_available():
        raise NotAvailableError("device 'cuda' not available: torch sees no CUDA device")
    from accelscope.hardware.sync import CudaEventInterval

    return CudaEventInterval(0), torch.cuda.synchronize


def _gpu_theoretical(env: Environment) -> tuple[str, Theoretical]:
    import torch

    props = torch.cuda.get_device_properties(0)
    name = str(props.name)
    capability = f"{props.major}.{props.minor}"
    return name, theoretical_gpu(
        name,
        capability,
        int(props.multi_processor_count),
        getattr(props, "clock_rate", None),
        getattr(props, "memory_clock_rate", None),
        getattr(props, "memory_bus_width", None),
    )


class _Evaluator:
    """Builds and times candidates for one dtype; remembers each one's library path."""

    def __init__(
        self,
        dtype: str,
        device: str,
        builder: Builder,
        clock: Callable[[], float],
        min_time_s: float,
        interval: IntervalTimer | None,
        sync: Callable[[], None] | None,
    ) -> None:
        self.dtype, self.device, self.builder, self.clock = dtype, device, builder, clock
        self.min_time_s, self.interval, self.sync = min_time_s, interval, sync
        self.paths: dict[Candidate, str] = {}

    def __call__(self, candidate: Candidate) -> float | None:
        kernel = self.builder(candidate, self.dtype, self.device)
        if kernel is None:
            return None
        self.paths[candidate] = kernel.path
        return measure_rate(
            kernel.fn,
            kernel.flops,
            clock=self.clock,
            min_time_s=self.min_time_s,
            interval=self.interval,
            sync=self.sync,
        )


def _top(outcome: SearchOutcome, count: int) -> list[Candidate]:
    ranked = sorted(
        (t for t in outcome.trials if t.flops_per_s), key=lambda t: -(t.flops_per_s or 0.0)
    )
    return [t.candidate for t in ranked[:count]]


def measure_ceilings(
    plan: CeilingsPlan,
    env: Environment,
    *,
    builder: Builder = build_kernel,
    clock: Callable[[], float] = time.perf_counter,
    streams: Streams | None = None,
    events: Events | None = None,
    theoretical: Theoretical | None = None,
) -> Ceilings:
    """Measure ``plan``'s device; see the module docstring."""
    say = events or (lambda message: None)
    interval, sync = _cuda_tools(plan.device) if builder is build_kernel else (None, None)
    began = clock()
    cores = available_cores()
    threads = sorted(set(plan.threads or (1, cores))) if plan.device == "cpu" else []
    full = max(threads) if threads else 0
    notes: list[str] = []

    say("memory bandwidth (copy, triad)")
    if streams is None:
        size = stream_size(
            env.cpu.l3_cache_bytes if plan.device == "cpu" else 64 << 20,
            _available_memory(plan.device),
        )
        notes.append(f"bandwidth buffers: {size.note}")

        def streams(elements: int, device: str) -> dict[str, float]:
            return measure_streams(
                elements, device=device, clock=clock, interval=interval, sync=sync
            )

        elements = size.elements
    else:
        elements = 0
    with pinned_threads(full) if full else _nothing():
        detail = streams(elements, plan.device)
    bandwidth = max(detail.values())

    peaks: dict[str, KernelPeak] = {}
    by_threads: dict[int, dict[str, float]] = {t: {} for t in threads}
    naive: dict[str, float] = {}
    trials = 0
    outcomes: dict[str, tuple[SearchOutcome, _Evaluator]] = {}
    for index, dtype in enumerate(plan.dtypes):
        left = plan.budget_s * 0.85 - (clock() - began)
        share = max(left / (len(plan.dtypes) - index), 0.0)
        say(f"searching {dtype} matrix peak ({share:.0f} s)")
        evaluate = _Evaluator(dtype, plan.device, builder, clock, plan.min_time_s, interval, sync)
        with pinned_threads(full) if full else _nothing():
            outcome = best_first_search(
                seeds(dtype, plan.device),
                functools.partial(neighbors, dtype=dtype, device=plan.device),
                evaluate,
                budget_s=share,
                clock=clock,
            )
            trials += len(outcome.trials)
            if outcome.best is None or not outcome.best.flops_per_s:
                notes.append(f"{dtype}: no kernel runs here; no peak measured")
                continue
            rate = outcome.best.flops_per_s
            best = outcome.best.candidate
            peaks[dtype] = KernelPeak(
                best.family, best.shape, full, rate, evaluate.paths.get(best, "")
            )
            if outcome.stop_reason == "budget":
                notes.append(
                    f"{dtype}: search stopped by the time budget after "
                    f"{len(outcome.trials)} kernels"
                )
            naive_kernel = Candidate("int_mm", NAIVE.shape) if dtype == "int8" else NAIVE
            measured_naive = next(
                (t.flops_per_s for t in outcome.trials if t.candidate == naive_kernel), None
            )
            if measured_naive is None:
                measured_naive = evaluate(naive_kernel)
            if measured_naive:
                naive[dtype] = measured_naive
        outcomes[dtype] = (outcome, evaluate)
        if full:
            by_threads[full][dtype] = rate
    for count in threads:
        if count == full:
            continue
        with pinned_threads(count):
            for dtype, (outcome, evaluate) in outcomes.items():
                say(f"{dtype} peak at {count} thread(s)")
                rates = [evaluate(c) for c in _top(outcome, 3)]
                found = [r for r in rates if r]
                if found:
                    by_threads[count][dtype] = max(found)
    if plan.device == "cpu":
        topology = parse_topology(_read_cpuinfo())
        ideal = theoretical or theoretical_cpu(env.cpu, topology, full or cores)
        device_name = env.cpu.model_name
        notes += _smt_notes(peaks, ideal, full or cores)
        notes += _above_isa_notes(peaks, ideal)
    else:
        device_name = env.gpus[0].name if env.gpus else "cuda"
        ideal = theoretical or _gpu_theoretical(env)[1]
    return Ceilings(
        device=plan.device,
        device_name=device_name,
        environment_fingerprint=env.fingerprint(),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        threads=full,
        matmul_flops_per_s={d: p.flops_per_s for d, p in peaks.items()},
        bandwidth_bytes_per_s=bandwidth,
        bandwidth_detail_bytes_per_s=detail,
        theoretical=ideal,
        peaks=peaks,
        by_threads={t: r for t, r in by_threads.items() if r},
        naive_flops_per_s=naive,
        trials=trials,
        search_s=clock() - began,
        notes=tuple(notes),
    )


def _smt_notes(peaks: dict[str, KernelPeak], ideal: Theoretical, cores: int) -> list[str]:
    """What the measured fp32 rate says about the cores: above 1.5 x one core's ISA peak means
    the threads ran on distinct physical cores (not hyperthreads of one)."""
    measured = peaks.get("fp32")
    ideal_fp32 = ideal.flops_per_s.get("fp32")
    if measured is None or not ideal_fp32 or cores < 2:
        return []
    one_core = ideal_fp32 / cores
    if measured.flops_per_s > 1.5 * one_core:
        return [
            f"fp32 measured {measured.flops_per_s / 1e9:,.0f} GFLOP/s > 1.5 x one core's "
            f"ISA peak ({one_core / 1e9:,.0f} GFLOP/s): the {cores} threads ran on distinct "
            "physical cores, not hyperthreads of one"
        ]
    return []


def _above_isa_notes(peaks: dict[str, KernelPeak], ideal: Theoretical) -> list[str]:
    """Why a measured peak can exceed the ISA peak: the ISA peak uses the nominal clock (the
    core may run faster), and a 3x3 convolution may use Winograd, doing fewer multiplies than
    the direct count its FLOPs are credited with."""
    notes = []
    for dtype, found in sorted(peaks.items()):
        limit = ideal.flops_per_s.get(dtype)
        if not limit or found.flops_per_s <= limit:
            continue
        implied = found.flops_per_s / limit
        reason = (
            "the cores ran above the clock the ISA peak assumes (turbo), by at least "
            f"{implied:.2f}x"
        )
        if found.family.startswith("conv3x3"):
            reason += (
                ", or the 3x3 convolution ran a Winograd algorithm (fewer multiplies than the "
            )
            reason += "direct count); model convolutions can do the same, so it stays the ceiling"
        notes.append(
            f"{dtype} measured {found.flops_per_s / 1e9:,.0f} GFLOP/s > ISA peak "
            f"{limit / 1e9:,.0f} GFLOP/s: {reason}"
        )
    return notes


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _available_memory(device: str) -> int | None:
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free)
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - psutil raises assorted errors on odd kernels
        return None


def dtypes_text(dtypes: Sequence[str]) -> str:
    """``fp32, bf16`` for messages."""
    return ", ".join(dtypes)
