"""Measure a device's ceilings: search the fastest dense kernel per dtype, stream bandwidth,
the peak at each thread count, and the ISA peak they are a fraction of.

Every kernel call runs under one time budget (:attr:`CeilingsPlan.budget_s`, seconds, counted
from the start), in four phases:

1. memory bandwidth (copy, triad), skipped when extending cached ceilings;
2. a probe per dtype and library path (kernel family): a small call (a 256³ product, an
   8 x 32 x 14² convolution) whose size doubles while one call takes under
   :data:`PROBE_CALL_S`, so the rate is not all call overhead and a slow path costs one small
   call;
3. per dtype, a best-first search over kernel shapes in a share of what is left (all of it but
   :data:`SWEEP_SHARE` when a thread sweep follows). Each candidate's call time is predicted
   from its family's probe, scaled by operation count; a candidate whose measurement (its build
   call and :data:`MIN_REPS` timed calls) is predicted not to fit is skipped, never launched;
4. on CPU, the best kernels again at the other thread counts, in the rest of the budget.

A dtype is **not searched** when it is hopeless: its best probe is below
:data:`HOPELESS_FRACTION` of the best fp32 rate known (fp32's probe; its search, which runs
first; the cached ceilings being extended), or not even its cheapest search kernel fits in its
share. Its ceiling is then the probe's measured figure, marked ``probe`` in its
:class:`KernelPeak`, and the reason is kept in :attr:`Ceilings.not_searched` and the notes.

The bound: no call starts once the deadline has passed, and one that starts before it is
predicted (from a probe, or the call before) to end by it. So the budget is overrun by at most
one call, the one that ran longer than predicted (with its operand allocation). The only call
made regardless is the measurement's very first probe call, so that there is always a figure.

Collaborators are arguments (kernel builder, clock, stream kernel, CUDA interval), so the search
logic runs in tests on fake kernels and a fake clock.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accelscope.errors import BadInputError, NotAvailableError
from accelscope.hardware.fingerprint import Environment
from accelscope.hardware.sync import IntervalTimer
from accelscope.hardware.tf32 import tf32_mode
from accelscope.measurement.threads import available_cores, pinned_threads
from accelscope.roofline.bandwidth import measure_streams, stream_size
from accelscope.roofline.ceilings import CPU_DTYPES, DTYPES, Ceilings, KernelPeak, Theoretical
from accelscope.roofline.kernel_search import (
    Candidate,
    Deadline,
    SearchOutcome,
    best_first_search,
    fastest_call_s,
)
from accelscope.roofline.kernels import (
    Kernel,
    build_kernel,
    families,
    kernel_flops,
    neighbors,
    probe_ladder,
    seeds,
)
from accelscope.roofline.theoretical import parse_topology, theoretical_cpu, theoretical_gpu

__all__ = [
    "FAMILY_FRACTION",
    "HOPELESS_FRACTION",
    "MIN_REPS",
    "NAIVE",
    "PROBE_CALL_S",
    "PROBE_SAMPLE_S",
    "SWEEP_SHARE",
    "CeilingsPlan",
    "Probe",
    "device_dtypes",
    "measure_ceilings",
]

NAIVE = Candidate("mm", (4096, 4096, 4096))
"""The naive square matmul reported beside the searched peak (``torch._int_mm`` for int8)."""

HOPELESS_FRACTION = 0.25
"""A dtype whose best probe is below this fraction of fp32's best probe is not searched: a
reduced-precision path exists to beat fp32, and one four times slower will not, so its probe
figure is ceiling enough and the budget goes to the dtypes that matter."""

FAMILY_FRACTION = 0.1
"""Within a dtype, a family (library path) below this fraction of the dtype's best probe is
left out of its search (``torch._int_mm`` beside oneDNN's int8 linear on CPU, ~0.01x)."""

PROBE_CALL_S = 0.02
"""A probe grows its call until one takes at least this long (seconds)."""

PROBE_REPS = 2
"""Timed calls per probe step (after the build call), more until :data:`PROBE_SAMPLE_S`."""

PROBE_SAMPLE_S = 0.05
"""Seconds of timed calls per probe step: on a busy machine a short call often waits for a
scheduler slice, and the fastest of several is the one that did not."""

MIN_REPS = 3
"""Timed calls per search candidate (after the build call), more until ``min_time_s``."""

SWEEP_SHARE = 0.15
"""Share of the budget kept for the peaks at the other thread counts (CPU)."""

Builder = Callable[[Candidate, str, str], Kernel | None]
Streams = Callable[[int, str], dict[str, float]]
Events = Callable[[str], None]
Numerics = Callable[[str], AbstractContextManager[object]]
"""The fp32 math a dtype's kernels run under (on CUDA: TF32 on for ``tf32`` only)."""


def device_dtypes(device: str) -> tuple[str, ...]:
    """The dtypes a device has, in display order: a CPU has no TF32."""
    return CPU_DTYPES if device == "cpu" else DTYPES


@dataclass(frozen=True, kw_only=True)
class CeilingsPlan:
    """What to measure: device (``cpu``/``cuda``) and CUDA ordinal, total time budget (seconds),
    dtypes (empty: every dtype of the device), thread counts (CPU; empty: 1 and all usable
    cores), and the sampling time per kernel (seconds)."""

    device: str = "cpu"
    budget_s: float = 180.0
    dtypes: tuple[str, ...] = ()
    threads: tuple[int, ...] = ()
    min_time_s: float = 0.15
    device_index: int = 0

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise BadInputError(f"unknown device {self.device!r}; choose cpu or cuda")
        if self.budget_s <= 0:
            raise BadInputError("the ceilings budget must be positive")
        known = device_dtypes(self.device)
        if not self.dtypes:
            object.__setattr__(self, "dtypes", known)
        if self.device == "cpu" and "tf32" in self.dtypes:
            raise BadInputError("dtype 'tf32' is a CUDA tensor-core mode; a CPU has no TF32")
        unknown = [d for d in self.dtypes if d not in known]
        if unknown:
            raise BadInputError(f"unknown dtype {unknown[0]!r}; choose from {', '.join(known)}")
        if self.device_index < 0 or (self.device == "cpu" and self.device_index):
            raise BadInputError(f"device index {self.device_index} is not a CUDA ordinal here")

    @property
    def torch_device(self) -> str:
        """The device as torch names it: ``cpu`` or ``cuda:N``."""
        return "cpu" if self.device == "cpu" else f"cuda:{self.device_index}"


@dataclass(frozen=True)
class Probe:
    """A family's probe: the largest ladder shape measured, its fastest call (seconds), rate
    (FLOP/s) and library path."""

    candidate: Candidate
    call_s: float
    flops_per_s: float
    path: str

    def predict_call_s(self, candidate: Candidate) -> float:
        """Seconds of one call of ``candidate``: the probe's call scaled by operation count."""
        return self.call_s * kernel_flops(candidate) / kernel_flops(self.candidate)

    def describe(self) -> str:
        """``linear 512x512x512, F.linear`` for messages."""
        return f"{self.candidate.family} {'x'.join(map(str, self.candidate.shape))}, {self.path}"


def _read_cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cuda_tools(plan: CeilingsPlan) -> tuple[IntervalTimer | None, Callable[[], None] | None]:
    if plan.device != "cuda":
        return None, None
    import torch

    if not torch.cuda.is_available():
        raise NotAvailableError("device 'cuda' not available: torch sees no CUDA device")
    from accelscope.hardware.sync import CudaEventInterval, device_synchronizer
    from accelscope.spec import Device

    index = plan.device_index
    return CudaEventInterval(index), device_synchronizer(Device.CUDA, index)


def _property(props: Any, name: str) -> int | None:
    """An integer device property, ``None`` when this torch/CUDA does not report it (CUDA 13
    removed ``clock_rate``, ``memory_clock_rate`` and ``memory_bus_width``)."""
    value = getattr(props, name, None)
    try:
        return int(value) if value else None
    except (TypeError, ValueError):
        return None


def _gpu_theoretical(index: int) -> tuple[str, Theoretical]:
    import torch

    props = torch.cuda.get_device_properties(index)
    name = str(props.name)
    capability = f"{props.major}.{props.minor}"
    return name, theoretical_gpu(
        name,
        capability,
        _property(props, "multi_processor_count"),
        _property(props, "clock_rate"),
        _property(props, "memory_clock_rate"),
        _property(props, "memory_bus_width"),
    )


def _gpu_l2_bytes(index: int) -> int | None:
    """The GPU's L2 cache in bytes (``None`` when not reported)."""
    import torch

    return _property(torch.cuda.get_device_properties(index), "L2_cache_size")


def _numerics(device: str) -> Numerics:
    """On CUDA, TF32 allowed for ``tf32`` and forbidden for every other dtype (so ``fp32`` is
    IEEE fp32, also in cuDNN convolutions); nothing to set on a CPU."""
    if device == "cpu":
        return lambda dtype: nullcontext()
    return lambda dtype: tf32_mode(dtype == "tf32")


def _rate_text(flops_per_s: float, dtype: str) -> str:
    """``11.0 GFLOP/s`` (``GOP/s`` for int8)."""
    return f"{flops_per_s / 1e9:,.1f} G{'OP' if dtype == 'int8' else 'FLOP'}/s"


@dataclass(frozen=True)
class _Timed:
    call_s: float
    flops_per_s: float
    path: str


class _Runner:
    """Builds and times kernels on one device; every call waits on :attr:`deadline`."""

    def __init__(
        self,
        device: str,
        builder: Builder,
        clock: Callable[[], float],
        interval: IntervalTimer | None,
        sync: Callable[[], None] | None,
        numerics: Numerics | None = None,
    ) -> None:
        self.device, self.builder, self.clock = device, builder, clock
        self.interval, self.sync = interval, sync
        self.numerics = numerics or _numerics(device)
        self.deadline = Deadline.never(clock)
        self.kernels = 0
        """Kernels built and timed so far."""
        self.started = False
        """Whether any kernel was launched yet (the first one runs regardless of the deadline)."""

    def run(
        self,
        candidate: Candidate,
        dtype: str,
        *,
        predicted_call_s: float | None,
        reps: int,
        min_time_s: float,
        build_as_fallback: bool = False,
    ) -> _Timed | None:
        """Build ``candidate`` (the builder makes one call) and time ``reps`` more calls (more
        until ``min_time_s``), each only if predicted to end by the deadline. ``None`` when it
        does not run here, or when no timed call fitted (unless ``build_as_fallback``: then the
        build, allocation included, stands in for a call: a pessimistic figure). The build and
        every call run under the dtype's fp32 math (:data:`Numerics`)."""
        with self.numerics(dtype):
            began = self.clock()
            kernel = self.builder(candidate, dtype, self.device)
            build_s = self.clock() - began
            self.started = True
            if kernel is None:
                return None
            self.kernels += 1
            fastest = fastest_call_s(
                kernel.fn,
                clock=self.clock,
                min_time_s=min_time_s,
                min_reps=reps,
                warmup=0,  # the builder's call was the warm-up
                sync=self.sync,
                interval=self.interval,
                deadline=self.deadline,
                predicted_call_s=build_s if predicted_call_s is None else predicted_call_s,
            )
        if fastest is None and build_as_fallback:
            fastest = build_s
        if not fastest or fastest <= 0:
            return None
        return _Timed(fastest, kernel.flops / fastest, kernel.path)


def _probe(runner: _Runner, dtype: str, device: str) -> tuple[dict[str, Probe], bool]:
    """Each family's probe (see the module docstring), and whether the deadline cut a family
    off before its first call. A step is launched only if predicted to fit: from the step
    before, or for a family's first step from the dtype's family probed before it; the dtype's
    very first step, with nothing to predict it, only while the deadline has not passed."""
    found: dict[str, Probe] = {}
    cut = False
    for family in families(dtype, device):
        probe: Probe | None = None
        for candidate in probe_ladder(family):
            if probe is not None and probe.call_s >= PROBE_CALL_S:
                break  # long enough: call overhead no longer dominates
            known = probe or (list(found.values())[-1] if found else None)
            predicted = None if known is None else known.predict_call_s(candidate)
            if predicted is None:
                fits = not runner.started or runner.deadline.left_s() > 0
            else:
                sampled_s = max(PROBE_REPS * predicted, PROBE_SAMPLE_S)
                fits = runner.deadline.allows(predicted + sampled_s)
            if not fits:
                cut = cut or probe is None
                break
            timed = runner.run(
                candidate,
                dtype,
                predicted_call_s=predicted,
                reps=PROBE_REPS,
                min_time_s=PROBE_SAMPLE_S,
                build_as_fallback=True,
            )
            if timed is None:
                break  # this family does not run here (or not at this size)
            probe = Probe(candidate, timed.call_s, timed.flops_per_s, timed.path)
        if probe is not None:
            found[family] = probe
    return found, cut


class _Evaluator:
    """Measures one dtype's search candidates; predicts each one's call from its family's probe
    (``slowdown`` times slower: fewer threads than the probe ran on). Families without a probe
    are not tried."""

    def __init__(
        self,
        runner: _Runner,
        dtype: str,
        probes: dict[str, Probe],
        min_time_s: float,
        slowdown: float = 1.0,
    ) -> None:
        self.runner, self.dtype, self.probes = runner, dtype, probes
        self.min_time_s, self.slowdown = min_time_s, slowdown
        self.paths: dict[Candidate, str] = {p.candidate: p.path for p in probes.values()}

    def call_s(self, candidate: Candidate) -> float | None:
        """Predicted seconds of one call of ``candidate``."""
        probe = self.probes.get(candidate.family)
        return None if probe is None else probe.predict_call_s(candidate) * self.slowdown

    def cost_s(self, candidate: Candidate) -> float | None:
        """Predicted seconds to measure ``candidate``: the build call, then :data:`MIN_REPS`
        calls or ``min_time_s``, whichever is longer."""
        call = self.call_s(candidate)
        return None if call is None else call + max(MIN_REPS * call, self.min_time_s)

    def affordable(self, candidate: Candidate) -> bool:
        """Whether measuring ``candidate`` is predicted to end by the deadline."""
        cost = self.cost_s(candidate)
        return cost is not None and self.runner.deadline.allows(cost)

    def __call__(self, candidate: Candidate) -> float | None:
        if not self.affordable(candidate):
            return None  # never launch what is predicted not to fit
        timed = self.runner.run(
            candidate,
            self.dtype,
            predicted_call_s=self.call_s(candidate),
            reps=MIN_REPS,
            min_time_s=self.min_time_s,
        )
        if timed is None:
            return None
        self.paths[candidate] = timed.path
        return timed.flops_per_s


def _top(outcome: SearchOutcome, count: int) -> list[Candidate]:
    ranked = sorted(
        (t for t in outcome.trials if t.flops_per_s), key=lambda t: -(t.flops_per_s or 0.0)
    )
    return [t.candidate for t in ranked[:count]]


def _neighbors_within(
    candidate: Candidate, *, dtype: str, device: str, kept: dict[str, Probe]
) -> list[Candidate]:
    """:func:`neighbors` in the ``kept`` families only."""
    return [n for n in neighbors(candidate, dtype, device) if n.family in kept]


def _kept(probes: dict[str, Probe], dtype: str) -> tuple[dict[str, Probe], list[str]]:
    """The families worth searching (within :data:`FAMILY_FRACTION` of the dtype's best
    probe), and a note for each one left out."""
    best = max(probes.values(), key=lambda p: p.flops_per_s)
    kept, notes = {}, []
    for family, probe in probes.items():
        if probe.flops_per_s >= FAMILY_FRACTION * best.flops_per_s:
            kept[family] = probe
            continue
        notes.append(
            f"{dtype}: {family} ({probe.path}) left out of the search: probe "
            f"{_rate_text(probe.flops_per_s, dtype)} = "
            f"{probe.flops_per_s / best.flops_per_s:.2f}x the best {dtype} path ({best.path})"
        )
    return kept, notes


def _emulated_hint(dtype: str, device: str, ideal: Theoretical) -> str:
    """`` (no native bf16 unit in this CPU's ISA: emulated)`` when the ISA peak knows fp32 but
    has no unit for ``dtype``."""
    if device == "cpu" and "fp32" in ideal.flops_per_s and dtype not in ideal.flops_per_s:
        return f" (no native {dtype} unit in this CPU's ISA: emulated)"
    return ""


def _bandwidth(
    plan: CeilingsPlan,
    env: Environment,
    streams: Streams | None,
    clock: Callable[[], float],
    interval: IntervalTimer | None,
    sync: Callable[[], None] | None,
    notes: list[str],
) -> dict[str, float]:
    """Bytes/s per stream kernel, sampled for at most 2 % of the budget (0.5 s) each."""
    if streams is not None:
        return streams(0, plan.torch_device)
    size = stream_size(
        env.cpu.l3_cache_bytes if plan.device == "cpu" else _gpu_l2_bytes(plan.device_index),
        _available_memory(plan),
    )
    notes.append(f"bandwidth buffers: {size.note}")
    return measure_streams(
        size.elements,
        device=plan.torch_device,
        clock=clock,
        min_time_s=min(0.5, 0.02 * plan.budget_s),
        interval=interval,
        sync=sync,
    )


class _Session:
    """One measurement's runner and what it has found so far, per dtype."""

    def __init__(
        self,
        plan: CeilingsPlan,
        runner: _Runner,
        threads: Sequence[int],
        ideal: Theoretical,
        say: Events,
        notes: list[str],
    ) -> None:
        self.plan, self.runner, self.ideal, self.say, self.notes = plan, runner, ideal, say, notes
        self.full = max(threads) if threads else 0
        self.peaks: dict[str, KernelPeak] = {}
        self.by_threads: dict[int, dict[str, float]] = {t: {} for t in threads}
        self.naive: dict[str, float] = {}
        self.probes: dict[str, dict[str, Probe]] = {}
        self.best_probes: dict[str, float] = {}
        self.not_searched: dict[str, str] = {}
        self.covered: list[str] = []
        """The plan's dtypes with a conclusion (searched, stopped, or not running here)."""
        self.outcomes: dict[str, tuple[SearchOutcome, dict[str, Probe]]] = {}

    def probe(self, dtype: str) -> None:
        """Probe ``dtype``'s families (see :func:`_probe`) and record the conclusion."""
        self.say(f"probing {dtype}: one small call per library path")
        self.probes[dtype], cut = _probe(self.runner, dtype, self.plan.device)
        if dtype not in self.plan.dtypes:
            return  # fp32 probed as the reference only
        if self.probes[dtype]:
            self.best_probes[dtype] = max(p.flops_per_s for p in self.probes[dtype].values())
        elif cut:
            self.notes.append(f"{dtype}: not measured: the budget ran out before its probe")
            return
        else:
            self.notes.append(f"{dtype}: no kernel runs here; no peak measured")
        self.covered.append(dtype)

    def best_probe(self, dtype: str) -> Probe:
        return max(self.probes[dtype].values(), key=lambda p: p.flops_per_s)

    def hopeless(self, dtype: str, reference: float | None) -> str | None:
        """Why ``dtype`` is not worth a search next to fp32's ``reference`` rate (FLOP/s), or
        ``None`` when it is."""
        best = self.best_probe(dtype)
        if dtype == "fp32" or not reference or best.flops_per_s >= HOPELESS_FRACTION * reference:
            return None
        return (
            f"{dtype} not searched: probe {_rate_text(best.flops_per_s, dtype)} = "
            f"{best.flops_per_s / reference:.2f}x fp32 ({_rate_text(reference, 'fp32')}) here"
            f"{_emulated_hint(dtype, self.plan.device, self.ideal)}; its ceiling is this probe "
            f"figure ({best.describe()})"
        )

    def stop(self, dtype: str, reason: str) -> None:
        """Record ``dtype`` as not searched: its ceiling is its best probe's figure."""
        self.say(reason)
        self.notes.append(reason)
        self.not_searched[dtype] = reason
        probe = self.best_probe(dtype)
        shape = probe.candidate
        self.peaks[dtype] = KernelPeak(
            family=shape.family,
            shape=shape.shape,
            threads=self.full,
            flops_per_s=probe.flops_per_s,
            path=probe.path,
            probe=True,
        )
        if self.full:
            self.by_threads[self.full][dtype] = probe.flops_per_s

    def search(self, dtype: str, share_s: float, window: Deadline) -> float | None:
        """Search ``dtype``'s peak in ``share_s`` seconds (by ``window``); its rate (FLOP/s),
        or ``None`` when not even its cheapest kernel fits (then it is stopped)."""
        kept, dropped = _kept(self.probes[dtype], dtype)
        self.notes.extend(dropped)
        self.runner.deadline = window.within(share_s)
        evaluate = _Evaluator(self.runner, dtype, kept, self.plan.min_time_s)
        candidates = sorted(
            (s for s in seeds(dtype, self.plan.device) if s.family in kept),
            key=lambda c: (evaluate.cost_s(c) or 0.0, c),
        )
        if not any(evaluate.affordable(c) for c in candidates):
            best = self.best_probe(dtype)
            cheapest = (
                f"its cheapest search kernel ({candidates[0].family} "
                f"{'x'.join(map(str, candidates[0].shape))}) would take "
                f"{evaluate.cost_s(candidates[0]) or 0.0:,.1f} s to measure"
                if candidates
                else "no search kernel can be predicted"
            )
            self.stop(
                dtype,
                f"{dtype} not searched: probe {_rate_text(best.flops_per_s, dtype)} "
                f"({best.describe()}); {cheapest}, more than the {share_s:,.1f} s left for "
                f"{dtype}; its ceiling is this probe figure",
            )
            return None
        self.say(f"searching {dtype} matrix peak ({share_s:.0f} s)")
        outcome = best_first_search(
            candidates,
            functools.partial(_neighbors_within, dtype=dtype, device=self.plan.device, kept=kept),
            evaluate,
            budget_s=share_s,
            clock=self.runner.clock,
            affordable=evaluate.affordable,
            known={p.candidate: p.flops_per_s for p in kept.values()},
        )
        top = outcome.best
        if top is None or not top.flops_per_s:
            return None  # cannot happen: the probes are known trials
        rate = top.flops_per_s
        path = evaluate.paths.get(top.candidate, "")
        self.peaks[dtype] = KernelPeak(
            family=top.candidate.family,
            shape=top.candidate.shape,
            threads=self.full,
            flops_per_s=rate,
            path=path,
        )
        if outcome.stop_reason == "budget":
            self.notes.append(
                f"{dtype}: search stopped by the time budget after {len(outcome.trials)} "
                f"kernels ({len(outcome.skipped)} predicted not to fit were not launched)"
            )
        naive_kernel = Candidate("int_mm", NAIVE.shape) if dtype == "int8" else NAIVE
        naive = next((t.flops_per_s for t in outcome.trials if t.candidate == naive_kernel), None)
        if naive is None and evaluate.affordable(naive_kernel):
            naive = evaluate(naive_kernel)
        if naive:
            self.naive[dtype] = naive
        self.outcomes[dtype] = (outcome, kept)
        if self.full:
            self.by_threads[self.full][dtype] = rate
        return rate

    def sweep(self, count: int, deadline: Deadline) -> None:
        """Each searched dtype's top kernels again at ``count`` threads, by ``deadline``."""
        self.runner.deadline = deadline
        with pinned_threads(count):
            for dtype, (outcome, kept) in self.outcomes.items():
                self.say(f"{dtype} peak at {count} thread(s)")
                slowdown = self.full / count
                evaluate = _Evaluator(self.runner, dtype, kept, self.plan.min_time_s, slowdown)
                rates = [evaluate(c) for c in _top(outcome, 3) if evaluate.affordable(c)]
                found = [r for r in rates if r]
                if found:
                    self.by_threads[count][dtype] = max(found)
                    continue
                self.notes.append(
                    f"{dtype} at {count} thread(s): not measured (its best kernels were "
                    f"predicted not to fit in the {max(deadline.left_s(), 0.0):,.1f} s left); "
                    f"the {self.full}-thread peak stands in"
                )


def _fp32_known(extend: Ceilings | None) -> list[float]:
    """What cached ceilings already know of fp32's rate (FLOP/s): peak and probe."""
    if extend is None:
        return []
    known = (extend.matmul_flops_per_s.get("fp32"), extend.probe_flops_per_s.get("fp32"))
    return [r for r in known if r]


def measure_ceilings(
    plan: CeilingsPlan,
    env: Environment,
    *,
    builder: Builder = build_kernel,
    clock: Callable[[], float] = time.perf_counter,
    streams: Streams | None = None,
    events: Events | None = None,
    theoretical: Theoretical | None = None,
    extend: Ceilings | None = None,
) -> Ceilings:
    """Measure ``plan``'s dtypes on its device (see the module docstring).

    fp32 is probed (and searched first, when asked for) because it is the reference: a dtype
    is hopeless next to the best fp32 rate known, from its probe, its search or ``extend``
    (then fp32 is not probed unless asked for).
    With ``extend`` (cached ceilings of this device), the bandwidth is not measured again: the
    result is ``extend`` with ``plan.dtypes`` measured and added (or replaced).
    """
    say = events or (lambda message: None)
    interval, sync = _cuda_tools(plan) if builder is build_kernel else (None, None)
    began = clock()
    deadline = Deadline(clock, began + plan.budget_s)
    cores = available_cores()
    threads = sorted(set(plan.threads or (1, cores))) if plan.device == "cpu" else []
    full = max(threads) if threads else 0
    notes: list[str] = []
    if plan.device == "cpu":
        device_name = env.cpu.model_name
        ideal = theoretical or theoretical_cpu(
            env.cpu, parse_topology(_read_cpuinfo()), full or cores
        )
    else:
        gpu = next((g for g in env.gpus if g.index == plan.device_index), None)
        device_name = gpu.name if gpu is not None else plan.torch_device
        ideal = theoretical or _gpu_theoretical(plan.device_index)[1]

    def pinned(count: int) -> AbstractContextManager[object]:
        return pinned_threads(count) if count else nullcontext()

    if extend is None:
        say("memory bandwidth (copy, triad)")
        with pinned(full):
            detail = _bandwidth(plan, env, streams, clock, interval, sync, notes)
    else:
        detail = dict(extend.bandwidth_detail_bytes_per_s)

    runner = _Runner(plan.torch_device, builder, clock, interval, sync, _numerics(plan.device))
    sweep = len(threads) > 1
    window = Deadline(clock, began + plan.budget_s * ((1 - SWEEP_SHARE) if sweep else 1.0))
    runner.deadline = window
    session = _Session(plan, runner, threads, ideal, say, notes)
    with pinned(full):
        known_fp32 = _fp32_known(extend)
        reference_probe = () if known_fp32 else ("fp32",)  # else the cache has the reference
        for dtype in dict.fromkeys((*reference_probe, *plan.dtypes)):
            session.probe(dtype)
        fp32_rates = [p.flops_per_s for p in session.probes.get("fp32", {}).values()]
        reference = max([*fp32_rates, *known_fp32], default=None)
        order = sorted(session.best_probes, key=lambda d: d != "fp32")  # fp32 first
        for index, dtype in enumerate(order):
            reason = session.hopeless(dtype, reference)
            if reason is not None:
                session.stop(dtype, reason)
                continue
            pending = [d for d in order[index:] if session.hopeless(d, reference) is None]
            rate = session.search(dtype, max(window.left_s(), 0.0) / len(pending), window)
            if dtype == "fp32" and rate:
                reference = max(reference or 0.0, rate)
    for count in threads:
        if count != full:
            session.sweep(count, deadline)
    if plan.device == "cpu":
        notes += _smt_notes(session.peaks, ideal, full or cores)
    notes += _above_isa_notes(session.peaks, ideal, plan.device)
    peaks = {d: session.peaks[d] for d in DTYPES if d in session.peaks}  # display order
    found = Ceilings(
        device=plan.device,
        device_index=plan.device_index,
        fp32_math="ieee",
        device_name=device_name,
        environment_fingerprint=env.fingerprint(),
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        threads=full,
        matmul_flops_per_s={d: p.flops_per_s for d, p in peaks.items()},
        bandwidth_bytes_per_s=max(detail.values()),
        bandwidth_detail_bytes_per_s=detail,
        theoretical=ideal,
        peaks=peaks,
        by_threads={
            t: {d: r[d] for d in DTYPES if d in r} for t, r in session.by_threads.items() if r
        },
        naive_flops_per_s=session.naive,
        trials=runner.kernels,
        search_s=clock() - began,
        notes=tuple(notes),
        measured_dtypes=tuple(session.covered),
        probe_flops_per_s=session.best_probes,
        not_searched=session.not_searched,
    )
    return found if extend is None else _extended(extend, found)


def _about(note: str, dtypes: set[str]) -> bool:
    """Whether ``note`` is about one of ``dtypes`` (dtype notes start with the dtype)."""
    return note.split(" ", 1)[0].rstrip(":") in dtypes


def _extended(base: Ceilings, new: Ceilings) -> Ceilings:
    """``base`` (cached) with ``new``'s dtypes added or replaced; ``base``'s bandwidth and other
    dtypes are kept, times and kernel counts add up."""
    redone = set(new.measured_dtypes)

    def merged(old: dict[str, float], fresh: dict[str, float]) -> dict[str, float]:
        return {**{d: v for d, v in old.items() if d not in redone}, **fresh}

    by_threads = {t: merged(r, new.by_threads.get(t, {})) for t, r in base.by_threads.items()}
    by_threads.update({t: r for t, r in new.by_threads.items() if t not in by_threads})
    return new.model_copy(
        update={
            "matmul_flops_per_s": merged(base.matmul_flops_per_s, new.matmul_flops_per_s),
            "bandwidth_bytes_per_s": base.bandwidth_bytes_per_s,
            "peaks": {**{d: p for d, p in base.peaks.items() if d not in redone}, **new.peaks},
            "by_threads": {t: r for t, r in by_threads.items() if r},
            "naive_flops_per_s": merged(base.naive_flops_per_s, new.naive_flops_per_s),
            "trials": base.trials + new.trials,
            "search_s": base.search_s + new.search_s,
            "notes": tuple(
                dict.fromkeys([*(n for n in base.notes if not _about(n, redone)), *new.notes])
            ),
            "measured_dtypes": tuple(d for d in DTYPES if d in base.measured_dtypes or d in redone),
            "probe_flops_per_s": merged(base.probe_flops_per_s, new.probe_flops_per_s),
            "not_searched": {
                **{d: r for d, r in base.not_searched.items() if d not in redone},
                **new.not_searched,
            },
        }
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


def _above_isa_notes(
    peaks: dict[str, KernelPeak], ideal: Theoretical, device: str = "cpu"
) -> list[str]:
    """Why a measured peak can exceed the ISA (or datasheet) peak: the peak assumes a clock the
    chip may beat (turbo on a CPU, boost above the datasheet's clock on a GPU), and a 3x3
    convolution may use Winograd, doing fewer multiplies than the direct count its FLOPs are
    credited with."""
    notes = []
    what = "ISA peak" if device == "cpu" else "datasheet peak"
    for dtype, found in sorted(peaks.items()):
        limit = ideal.flops_per_s.get(dtype)
        if not limit or found.flops_per_s <= limit:
            continue
        implied = found.flops_per_s / limit
        reason = (
            "the cores ran above the clock the ISA peak assumes (turbo), by at least "
            f"{implied:.2f}x"
            if device == "cpu"
            else f"the SMs ran above the clock the datasheet assumes, by at least {implied:.2f}x"
        )
        if found.family.startswith("conv3x3"):
            reason += (
                ", or the 3x3 convolution ran a Winograd algorithm (fewer multiplies than the "
            )
            reason += "direct count); model convolutions can do the same, so it stays the ceiling"
        notes.append(
            f"{dtype} measured {found.flops_per_s / 1e9:,.0f} GFLOP/s > {what} "
            f"{limit / 1e9:,.0f} GFLOP/s: {reason}"
        )
    return notes


def _available_memory(plan: CeilingsPlan) -> int | None:
    if plan.device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(plan.device_index)
        return int(free)
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - psutil raises assorted errors on odd kernels
        return None


def dtypes_text(dtypes: Sequence[str]) -> str:
    """``fp32, bf16`` for messages."""
    return ", ".join(dtypes)
