"""What one instrumented run of the script recorded, as typed data (the child writes it as JSON).

:class:`Profile` holds every committed step (warm-up included) with its exclusive phase times
and counters, the operator census of the last warm-up step, the device timeline where CUDA was
in use, facts about the loop (DataLoaders, threads, the main model) and how the run ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from accelscope.doctor.device_timeline import StepTimeline
from accelscope.doctor.kineto import NO_GPU_ACTIVITY
from accelscope.doctor.trace_quality import TraceQuality
from accelscope.serialise import load
from accelscope.validation import first_problem

__all__ = [
    "PHASES",
    "DeviceTraceRecord",
    "GpuMemory",
    "LoaderFacts",
    "OpSummary",
    "Profile",
    "RunFacts",
    "ScriptError",
    "Span",
    "Step",
    "TrainState",
]

PHASES: tuple[str, ...] = ("input", "copy", "forward", "backward", "optimizer", "sync")
"""The instrumented phases; a step's remainder is ``other``."""
COUNTERS: tuple[str, ...] = (
    "syncs",
    "copies",
    "pageable_copies",
    "copy_bytes",
    "forwards",
    "items",
)


def _f(data: dict[str, Any], key: str) -> float:
    return float(data[key])


@dataclass(frozen=True, kw_only=True)
class DeviceTraceRecord:
    """The GPU's own timeline of the steps profiled after the warm-up (torch.profiler, CPU +
    CUDA activities; :mod:`accelscope.doctor.inprocess.device_trace`), as the parent read it
    with :mod:`accelscope.doctor.kineto`: the one model of GPU time of a live run, diagnosed
    by the code that diagnoses ``doctor --trace``.

    Attributes:
        status: ``recorded``, ``injected`` (tests) or ``not recorded: why``/``not read: why``.
        steps: Steps profiled (added to the warm-up: never measured).
        profiled_s: Wall time of the profiled steps (the profiler's overhead included).
        stop_s: Collecting and exporting the trace, between the last profiled step and the
            first measured one (outside every step).
        timeline: Each profiled step split into its causes (empty when not read).
        device_name / step_source: From the trace.
        quality: The quality gate's flags, in words.
        gate: The quality gate's outcome over ``timeline`` (which steps are steady); records
            stored before it was kept held their steady steps only: all of them are steady.
    """

    status: str
    steps: int = 0
    profiled_s: float = 0.0
    stop_s: float = 0.0
    timeline: tuple[StepTimeline, ...] = ()
    device_name: str | None = None
    step_source: str = ""
    quality: tuple[str, ...] = ()
    gate: TraceQuality | None = None

    def __post_init__(self) -> None:
        if self.gate is None:
            steady = tuple(s.index for s in self.timeline)
            object.__setattr__(self, "gate", TraceQuality(flags=(), steady=steady, excluded=()))

    @property
    def usable(self) -> bool:
        """A timeline with at least one step of positive length."""
        return any(s.step_us > 0 for s in self.timeline)

    @property
    def quality_gate(self) -> TraceQuality:
        """:attr:`gate`, always set once built."""
        assert self.gate is not None
        return self.gate

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceTraceRecord:
        """Read back what :func:`accelscope.serialise.dump` stored."""
        name = data.get("device_name")
        gate = data.get("gate")
        return cls(
            status=str(data.get("status", "")),
            steps=int(data.get("steps", 0)),
            profiled_s=float(data.get("profiled_s", 0.0)),
            stop_s=float(data.get("stop_s", 0.0)),
            timeline=tuple(StepTimeline.from_dict(s) for s in data.get("timeline") or []),
            device_name=None if name is None else str(name),
            step_source=str(data.get("step_source", "")),
            quality=tuple(str(q) for q in data.get("quality") or []),
            gate=None if gate is None else load(TraceQuality, gate),
        )


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step: wall duration, exclusive seconds per phase, counters (see :data:`COUNTERS`)."""

    start_s: float
    duration_s: float
    phases_s: dict[str, float]
    counts: dict[str, int]

    def __post_init__(self) -> None:
        """The phases are exclusive parts of the step: each >= 0, their sum within it (the
        recorder's integer clock makes that exact; float seconds allow rounding only)."""
        if not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise ValueError(f"step duration {self.duration_s} s")
        if any(not (math.isfinite(v) and v >= 0) for v in self.phases_s.values()):
            raise ValueError(f"a phase outside [0, step]: {self.phases_s}")
        if math.fsum(self.phases_s.values()) > self.duration_s * (1 + 1e-9) + 1e-12:
            raise ValueError(
                f"phases sum to {math.fsum(self.phases_s.values())} s, over the step's "
                f"{self.duration_s} s"
            )

    @property
    def other_s(self) -> float:
        """The part of the step outside every instrumented phase (the script's own code);
        float rounding of a sum that equals the step reads 0, never below."""
        rest = self.duration_s - math.fsum(self.phases_s.values())
        return rest if rest > 0 else 0.0

    @property
    def items(self) -> int:
        """Samples the main model processed in this step (its forwards' batch sizes)."""
        return self.counts.get("items", 0)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        """Read back what :func:`accelscope.serialise.dump` stored (validates the phase and
        counter names)."""
        phases = {name: float(data["phases_s"][name]) for name in PHASES}
        counts = {name: int(data["counts"].get(name, 0)) for name in COUNTERS}
        return cls(  # a ``device`` record (CUDA events, before 2026-11-29) is not read
            start_s=_f(data, "start_s"),
            duration_s=_f(data, "duration_s"),
            phases_s=phases,
            counts=counts,
        )


@dataclass(frozen=True)
class Span:
    """One traced span (seconds from the first step's start); ``name`` is a phase or ``step``."""

    name: str
    start_s: float
    duration_s: float
    depth: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Span:
        """Read one span; stores written before spans were kept in seconds hold
        ``start_us``/``duration_us`` instead, still read (as seconds) so old runs still show."""
        if "start_s" in data:
            start, duration = _f(data, "start_s"), _f(data, "duration_s")
        else:
            start, duration = _f(data, "start_us") * 1e-6, _f(data, "duration_us") * 1e-6
        return cls(str(data["name"]), start, duration, int(data["depth"]))


@dataclass(frozen=True, kw_only=True)
class OpSummary:
    """The operator census of one warm-up step (see :mod:`.probe`)."""

    ops: int
    forward_ops: int
    op_time_s: float
    matmul_calls: int
    matmul_time_s: dict[str, float]
    matmul_flops: dict[str, float]
    devices: tuple[str, ...]
    autocast: dict[str, str]
    top_ops: tuple[dict[str, Any], ...] = ()
    forward_op_time_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class LoaderFacts:
    """A ``DataLoader`` the script built, with the settings it ended up with."""

    num_workers: int
    pin_memory: bool
    batch_size: int | None
    persistent_workers: bool
    prefetch_factor: int | None
    dataset: str = ""
    dataset_len: int | None = None
    iterable: bool = False


@dataclass(frozen=True, kw_only=True)
class TrainState:
    """What a training loop holds between steps, measured in its process at the end of the
    first ``optimizer.step()`` (bytes of the tensors themselves, ``Tensor.nbytes``).

    ``rss_before_first_step_bytes``: the process's resident memory when the main model's first
    forward began (model, data and libraries loaded; no activations, gradients or optimizer
    states yet); ``None``: not measured (psutil unavailable)."""

    optimizer: str
    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    rss_before_first_step_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def held_bytes(self) -> int:
        """Parameters + gradients + optimizer states: held through every step."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_state_bytes


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """Facts about the loop, read in the instrumented process."""

    torch: str
    torch_threads: int
    interop_threads: int
    loaders: tuple[LoaderFacts, ...] = ()
    main_model: dict[str, Any] = field(default_factory=dict)
    autocast: str | None = None
    cuda_initialized: bool = False
    optimizer_seen: bool = False
    backward_seen: bool = False
    worker_busy_cores: float | None = None
    """Cores the loop's child processes (DataLoader workers) kept busy over the measured steps
    (psutil, in the loop's process); ``None``: not measured."""
    train_state: TrainState | None = None
    """Bytes a training loop holds between steps; ``None``: no ``optimizer.step()`` seen."""


@dataclass(frozen=True, kw_only=True)
class GpuMemory:
    """The loop's CUDA memory, read at the end in the process that ran it (bytes; see
    :mod:`accelscope.doctor.inprocess.gpu_memory`).

    Attributes:
        device: ``cuda:0 NVIDIA H100 80GB HBM3``.
        allocated_peak_bytes: Peak held by tensors (``torch.cuda.max_memory_allocated``).
        reserved_peak_bytes: Peak held by the caching allocator, cache and fragmentation
            included (``max_memory_reserved``): what the device gave the process.
        total_bytes: The device's memory.
        alloc_retries: ``cudaMalloc`` failures after which the allocator freed its cache and
            retried (each one synchronises the device).
        ooms: Out-of-memory errors the allocator raised.
    """

    allocated_peak_bytes: int
    reserved_peak_bytes: int
    total_bytes: int
    device: str = ""
    alloc_retries: int = 0
    ooms: int = 0


@dataclass(frozen=True)
class ScriptError:
    """How the script failed: exception type, first line of its message, file:line."""

    type: str
    message: str
    where: str

    def describe(self) -> str:
        """``ValueError: bad shape (at train.py:42)``."""
        text = f"{self.type}: {self.message}" if self.message else self.type
        return f"{text} (at {self.where})" if self.where else text


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One instrumented run of the script (see the module doc).

    ``status``: ``done`` (reached warm-up + steps), ``ended`` (the script finished first),
    ``exited`` (``sys.exit`` with a non-zero code), ``error`` (it raised), ``stopped`` (the
    parent's timeout asked for what there was).
    """

    status: str
    mode: str | None
    warmup: int
    target_steps: int
    steps: tuple[Step, ...]
    spans: tuple[Span, ...] = ()
    probe: OpSummary | None = None
    op_overhead_s: float | None = None
    facts: RunFacts | None = None
    exit_code: int | None = None
    error: ScriptError | None = None
    whatif: dict[str, Any] = field(default_factory=dict)
    first_step_monotonic_s: float | None = None
    """``time.monotonic()`` at the first step's start in the process that ran the loop: places
    the steps on the parent's telemetry clock (``None``: not recorded)."""
    gpu_memory: GpuMemory | None = None
    gpu_memory_status: str = "not measured: no CUDA device"
    device_trace: DeviceTraceRecord | None = None
    """The GPU's own timeline of the profiled steps (CUDA runs of the diagnosis only)."""
    losses: tuple[tuple[int, float | None], ...] = ()
    """``(step index, loss)`` of each step whose loop called ``loss.backward()`` on a scalar
    (the last such call of the step; the loss before any what-if scaling); ``None``: the loss
    was not finite."""

    def measured_losses(self) -> dict[int, float | None]:
        """The losses of the measured steps (after the warm-up), by step index."""
        return {step: loss for step, loss in self.losses if step >= self.warmup}

    @property
    def measured(self) -> tuple[Step, ...]:
        """The steps after the warm-up."""
        return self.steps[self.warmup :]

    @property
    def device(self) -> str:
        """``cuda`` when the loop used CUDA, else ``cpu``: a device trace with GPU events says
        so; one with none (CUDA initialised, nothing run on it) says ``cpu``; without a trace,
        CUDA initialised in the process or an operator of the census on a CUDA tensor."""
        record = self.device_trace
        if record is not None and record.usable:
            return "cuda"
        if record is not None and record.status == NO_GPU_ACTIVITY:
            return "cpu"
        if self.facts is not None and self.facts.cuda_initialized:
            return "cuda"
        return "cuda" if self.probe is not None and "cuda" in self.probe.devices else "cpu"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        """Read the child's JSON; raises ``KeyError``/``ValueError``/``TypeError`` if malformed
        (a record its type refuses: a ``ValueError`` naming the field, on one line)."""
        try:
            return cls._read(data)
        except ValidationError as exc:
            where, problem, _ = first_problem(exc)
            field_path = ".".join(str(p) for p in where) or "the record"
            raise ValueError(f"{exc.title} {field_path}: {problem}") from None

    @classmethod
    def _read(cls, data: dict[str, Any]) -> Profile:
        error = data.get("error")
        probe = data.get("probe")
        facts = data.get("facts")
        overhead = data.get("op_overhead_s")
        origin = data.get("first_step_monotonic_s")
        gpu_memory = data.get("gpu_memory")
        device_trace = data.get("device_trace")
        return cls(
            status=str(data["status"]),
            mode=None if data.get("mode") is None else str(data["mode"]),
            warmup=int(data["warmup"]),
            target_steps=int(data["target_steps"]),
            steps=tuple(Step.from_dict(s) for s in data["steps"]),
            spans=tuple(Span.from_dict(s) for s in data.get("spans", [])),
            probe=None if probe is None else load(OpSummary, probe),
            op_overhead_s=None if overhead is None else float(overhead),
            facts=None if facts is None else load(RunFacts, facts),
            exit_code=None if data.get("exit_code") is None else int(data["exit_code"]),
            error=None
            if error is None
            else ScriptError(
                str(error.get("type", "")),
                str(error.get("message", "")),
                str(error.get("where", "")),
            ),
            whatif=dict(data.get("whatif") or {}),
            first_step_monotonic_s=None if origin is None else float(origin),
            gpu_memory=None if gpu_memory is None else load(GpuMemory, gpu_memory),
            gpu_memory_status=str(data.get("gpu_memory_status", "not measured: no CUDA device")),
            device_trace=None
            if not isinstance(device_trace, dict)
            else DeviceTraceRecord.from_dict(device_trace),
            losses=tuple(
                (int(step), _finite_or_none(loss)) for step, loss in data.get("losses") or []
            ),
        )


def _finite_or_none(value: Any) -> float | None:
    number = None if value is None else float(value)
    return number if number is not None and math.isfinite(number) else None
