"""``plan train``: a decoder's training run sized and priced on accelerators not at hand.

The request names a local Hugging Face ``config.json`` and the recipe (optimizer, precision,
micro-batch x sequence, activation checkpointing, sharding over data-parallel devices, tensor
parallel degree), the devices and the token budget. The plan gives the memory per device
(:mod:`accelscope.plan.train_memory`) under every sharding the device count allows, whether the
chosen one fits each datasheet and its largest micro-batch, and the time and $ of the budget per
accelerator (:mod:`accelscope.plan.train_time`: FLOPs over peak x an MFU fitted on MLPerf
Training, with its 80 % interval). With a deadline, the cheapest option that meets it at the
interval's slow end; with a budget, the fastest whose $ stays within it. Nothing is stored: it
is an estimate.

With ``--fleet AUDIT_RUN`` each priced option whose step fits is also set against the audited
fleet's idle GPUs of its family (:func:`accelscope.audit.recover.train_buy_or_recover`): the UTC
hours with enough idle GPUs at once for the synchronous run, the GPU-hours a day they offer, the
days on recovered capacity alone, and within ``--deadline`` what is recovered, what is rented
and the $ of each path.

The user's own step narrows its family's MFU interval: ``--measured-step S --measured-on PART``,
or ``--measured-run RUN``, a stored ``doctor`` run of the training loop (its median measured
step, on the GPU the loop ran on unless ``--measured-on`` names the part).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from accelscope.audit.recover import FleetClass, TrainRecovery, train_buy_or_recover
from accelscope.commands.plan.llm import resolve_accelerators
from accelscope.errors import BadInputError, exception_line
from accelscope.plan.accelerators import AcceleratorSpec, load_accelerators
from accelscope.plan.catalog import load_catalog
from accelscope.plan.llm_memory import ModelShape, load_model_config, shape_from_config
from accelscope.plan.projection.llm_serving import usd_per_device_hour
from accelscope.plan.projection.validation import COVERAGE
from accelscope.plan.train_memory import (
    Optimizer,
    Precision,
    Sharding,
    TrainMemory,
    TrainSetup,
    estimate_train_memory,
    max_micro_batch,
)
from accelscope.plan.train_time import (
    MeasuredStep,
    TrainCalibration,
    TrainTime,
    flops_per_token,
    project_train_time,
    shipped_training_calibration,
    tightened_training,
)
from accelscope.report.format import format_bytes, format_seconds, money_usd

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "SHARDINGS",
    "MemoryBreakdown",
    "TrainOption",
    "TrainPlan",
    "TrainRequest",
    "plan_train",
    "train_view",
]

OPTIMIZERS: dict[str, Optimizer] = {
    "sgd": "sgd",
    "adamw": "adamw",
    "adafactor": "adafactor",
    "adam8bit": "adam8bit",
}
PRECISIONS: dict[str, tuple[Precision, str]] = {
    "fp32": ("fp32", "fp32"),
    "bf16-mixed": ("bf16_mixed", "bf16"),
    "fp8": ("fp8_mixed", "fp8"),
}
"""``--precision`` -> the memory model's recipe and the dtype whose peak the time runs at."""
SHARDINGS: dict[str, Sharding] = {
    "ddp": "ddp",
    "zero1": "zero1",
    "zero2": "zero2",
    "zero3": "zero3",
    "fsdp": "zero3",
}
"""``--sharding`` -> the memory model's stage (FSDP full shard is ZeRO-3)."""
MAX_DEVICES = 16384
"""The most devices a deadline may ask of one accelerator class (the published table's largest
system has 11,616)."""
_DECODER_ARCHITECTURES = ("ForCausalLM", "LMHeadModel")
_NOT_DECODERS = frozenset(
    [
        "bert",
        "roberta",
        "distilbert",
        "albert",
        "electra",
        "deberta",
        "deberta-v2",
        "vit",
        "swin",
        "convnext",
        "beit",
        "deit",
        "clip",
        "t5",
        "bart",
        "whisper",
    ]
)
"""Encoders and encoder-decoders a config may name without ``architectures``."""


@dataclass(frozen=True, kw_only=True)
class TrainRequest:
    """``plan train``: the config, the recipe, the devices and budget, the accelerators (empty:
    every GPU, TPU and NPU datasheet)."""

    config: Path
    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    micro_batch: int = 1
    seq_len: int = 4096
    checkpointing: bool = True
    sharding: str = "fsdp"
    tp: int = 1
    devices: int = 8
    tokens: float = 1e9
    deadline_s: float | None = None
    budget_usd: float | None = None
    accelerators: tuple[str, ...] = ()
    catalog_files: tuple[Path, ...] = ()
    fleet_run: str | None = None
    """A stored ``audit`` run (id, prefix or ``latest``): buy or recover against its idle GPUs."""
    store_path: Path | None = None
    """The results store ``fleet_run`` is read from."""
    measured_step_s: float | None = None
    """The user's measured step of this configuration (micro-batch, sequence length, tp) on
    ``measured_on``: its MFU narrows that family's interval."""
    measured_on: str | None = None
    """The accelerator (a datasheet's name) the step was measured on."""
    measured_devices: int | None = None
    """Devices the measured step ran on (``devices`` when not given; 1 for ``measured_run``)."""
    measured_run: str | None = None
    """A stored ``doctor`` run of this configuration's training step (id, prefix or
    ``latest``, read from ``store_path``): its median measured step, on ``measured_on`` when
    given, else on the GPU the loop ran on."""


@dataclass(frozen=True, kw_only=True)
class MemoryBreakdown:
    """Bytes per device of one sharding at the step's peak phase; the parts sum to the total."""

    sharding: str
    dp: int
    weights_bytes: float
    """Compute weights and master weights, with autocast's casts or gathered layers where the
    peak phase holds them."""
    gradient_bytes: float
    optimizer_bytes: float
    """Optimizer states, and the step's temporaries in the optimizer phase."""
    activation_bytes: float
    overhead_bytes: float
    total_bytes: float
    peak_phase: str

    def __post_init__(self) -> None:
        parts = (
            self.weights_bytes,
            self.gradient_bytes,
            self.optimizer_bytes,
            self.activation_bytes,
            self.overhead_bytes,
        )
        if any(not (math.isfinite(p) and p >= 0) for p in parts):
            raise ValueError(f"{self.sharding}: a memory part is negative or not finite")
        if not math.isclose(math.fsum(parts), self.total_bytes, rel_tol=1e-9, abs_tol=1.0):
            raise ValueError(f"{self.sharding}: parts {math.fsum(parts)} != {self.total_bytes}")

    @classmethod
    def of(cls, memory: TrainMemory, sharding: str) -> MemoryBreakdown:
        """The breakdown of ``memory`` at its peak phase (module ``train_memory``'s phases)."""
        phase = memory.peak_phase
        copies = memory.weight_copies_bytes if phase != "optimizer" else 0.0
        if phase == "backward":
            activations = memory.activation_bytes + memory.backward_transient_bytes
        elif phase == "late_backward":
            activations = memory.late_activation_bytes
        else:
            activations = 0.0
        return cls(
            sharding=sharding,
            dp=memory.setup.dp,
            weights_bytes=memory.weights_bytes + memory.master_bytes + copies,
            gradient_bytes=memory.gradient_bytes if phase != "backward" else 0.0,
            optimizer_bytes=memory.optimizer_state_bytes
            + (memory.optimizer_workspace_bytes if phase == "optimizer" else 0.0),
            activation_bytes=activations,
            overhead_bytes=memory.overhead_bytes,
            total_bytes=memory.total_bytes,
            peak_phase=phase,
        )


@dataclass(frozen=True, kw_only=True)
class TrainOption:
    """One accelerator: memory fit of the chosen recipe, time and $ of the budget."""

    accelerator: str
    family: str
    memory_bytes: float
    fits: bool | None
    """``None``: the recipe cannot run there (``why``)."""
    total_bytes: float | None
    max_micro_batch: int | None
    time_s: float | None
    time_low_s: float | None
    time_high_s: float | None
    mfu: float | None
    mfu_low: float | None
    mfu_high: float | None
    usd_per_device_hour: float | None
    priced_by: str | None
    usd: float | None
    usd_low: float | None
    usd_high: float | None
    basis: str
    deadline_devices: int | None = None
    """Fewest devices whose slow end meets the deadline and whose step fits (``None``: none up
    to :data:`MAX_DEVICES`, or no deadline)."""
    deadline_usd: float | None = None
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class TrainPlan:
    """``plan train``: the model, the recipe, memory per sharding, one option per accelerator,
    and the choices a deadline or a budget make."""

    config: str
    params: float
    flops_per_token: float
    tokens: float
    devices: int
    tp: int
    dp: int
    seq_len: int
    micro_batch: int
    optimizer: str
    precision: str
    checkpointing: bool
    sharding: str
    memory: tuple[MemoryBreakdown, ...]
    """Per sharding the device count allows (ZeRO needs dp >= 2), at ``memory``'s fixed
    overhead of a GPU."""
    options: tuple[TrainOption, ...]
    coverage: float
    deadline_s: float | None
    budget_usd: float | None
    cheapest_in_deadline: str | None
    fastest_in_budget: str | None
    assumptions: tuple[str, ...]
    mode: Literal["train"] = "train"
    fleet_run: str | None = None
    """The audit run the options were set against (``--fleet``)."""
    measured_mfu: float | None = None
    """The MFU of the user's measured step (``--measured-step``), on its part's peak."""
    recovery: tuple[TrainRecovery, ...] = ()
    """Per priced option whose step fits and whose family the fleet has: buy or recover."""


def _decoder_shape(config: dict[str, Any], origin: str) -> ModelShape:
    """The shape of a decoder-only config; anything else is one line."""
    model_type = str(config.get("model_type", "")).lower()
    architectures = config.get("architectures") or []
    names = [str(a) for a in architectures] if isinstance(architectures, list) else []
    if model_type in _NOT_DECODERS or (
        names and not any(n.endswith(_DECODER_ARCHITECTURES) for n in names)
    ):
        raise BadInputError(
            f"config {origin}: model_type {model_type or '?'!r} "
            f"({', '.join(names) or 'no architectures'}) is not a decoder-only language model; "
            "plan train sizes decoders"
        )
    shape = shape_from_config(config, origin)
    if shape.experts or shape.mla or not shape.gated_mlp:
        raise BadInputError(
            f"config {origin}: plan train models dense Llama-style decoders (gated MLP, no MoE, "
            f"no MLA); model_type {shape.model_type!r} is not one"
        )
    return shape


def _setup(request: TrainRequest, shape: ModelShape, sharding: Sharding, fp8: bool) -> TrainSetup:
    return TrainSetup(
        shape=shape,
        optimizer=OPTIMIZERS[request.optimizer],
        precision=PRECISIONS[request.precision][0],
        micro_batch=request.micro_batch,
        seq_len=request.seq_len,
        checkpointing=request.checkpointing,
        sharding=sharding,
        dp=request.devices // request.tp,
        tp=request.tp,
        fp8_supported=fp8,
    )


def _check(request: TrainRequest) -> None:
    for flag, value, known in (
        ("--optimizer", request.optimizer, OPTIMIZERS),
        ("--precision", request.precision, PRECISIONS),
        ("--sharding", request.sharding, SHARDINGS),
    ):
        if value not in known:
            raise BadInputError(f"{flag} {value!r} unknown; choose one of {', '.join(known)}")
    for flag, count in (
        ("--micro-batch", request.micro_batch),
        ("--seq-len", request.seq_len),
        ("--tp", request.tp),
        ("--devices", request.devices),
    ):
        if count < 1:
            raise BadInputError(f"{flag} must be at least 1, got {count}")
    if request.devices % request.tp:
        raise BadInputError(f"--devices {request.devices} is not a multiple of --tp {request.tp}")
    if SHARDINGS[request.sharding] != "ddp" and request.devices // request.tp < 2:
        raise BadInputError(
            f"--sharding {request.sharding} shards over data-parallel devices: give --devices "
            f"at least 2 x --tp (got {request.devices} devices, tp {request.tp})"
        )
    for flag, amount in (("--deadline", request.deadline_s), ("--budget-usd", request.budget_usd)):
        if amount is not None and not (math.isfinite(amount) and amount > 0):
            raise BadInputError(f"{flag} must be positive, got {amount}")
    if not (math.isfinite(request.tokens) and request.tokens > 0):
        raise BadInputError(f"--tokens must be positive, got {request.tokens}")
    if request.measured_run is not None and request.measured_step_s is not None:
        raise BadInputError("--measured-step and --measured-run: give one measured step")
    given = (request.measured_step_s is not None, request.measured_on is not None)
    if request.measured_run is None and any(given) and not all(given):
        raise BadInputError("--measured-step and --measured-on go together: the step, and where")
    no_step = request.measured_step_s is None and request.measured_run is None
    if request.measured_devices is not None and no_step:
        raise BadInputError("--measured-devices needs --measured-step or --measured-run")
    if request.measured_step_s is not None and not (
        math.isfinite(request.measured_step_s) and request.measured_step_s > 0
    ):
        raise BadInputError(f"--measured-step must be positive, got {request.measured_step_s}")
    measured_devices = _measured_devices(request)
    if measured_devices < 1 or measured_devices % request.tp:
        raise BadInputError(
            f"--measured-devices {measured_devices} is not a positive multiple of --tp {request.tp}"
        )


def _measured_devices(request: TrainRequest) -> int:
    if request.measured_devices is not None:
        return request.measured_devices
    return 1 if request.measured_run is not None else request.devices


@dataclass(frozen=True)
class RunStep:
    """A stored ``doctor`` run's training step: its median over the measured steps, and the
    device the loop ran on (``None``: the CPU, or a loop that never used CUDA)."""

    run_id: str
    step_s: float
    steps: int
    device: str | None
    device_memory_bytes: int | None


def step_of_run(run: str, store_path: Path | None) -> RunStep:
    """The training step of the stored doctor run ``run`` (id, prefix or ``latest``: the newest
    doctor run); a run of another kind, a loop that took no optimizer step, or one with no
    measured step is one line."""
    from accelscope.commands.plan.workflow import run_of_kind
    from accelscope.doctor.profile import Profile
    from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore

    path = store_path or DEFAULT_STORE_PATH
    if not path.exists():
        raise BadInputError(f"no results store at {path}: cannot read run {run}")
    with ResultStore(path) as store:
        record = run_of_kind(
            store,
            run,
            "doctor",
            flag="--measured-run",
            what="a doctor run of a training step",
            first="run accelscope doctor on your training script first",
        )
    diagnosis = record.documents_of("diagnosis")
    try:
        profile = Profile.from_dict(diagnosis[-1]["profile"])
    except (IndexError, KeyError, ValueError, TypeError) as exc:
        raise BadInputError(
            f"--measured-run {run}: run {record.id}: unreadable doctor documents "
            f"({exception_line(exc, named=True)})"
        ) from None
    facts = profile.facts
    if facts is None or not (facts.backward_seen and facts.optimizer_seen):
        raise BadInputError(
            f"--measured-run {run}: run {record.id}'s loop took no optimizer step (no "
            "loss.backward() and optimizer.step() seen): not a training step"
        )
    steps = profile.measured
    if not steps:
        raise BadInputError(f"--measured-run {run}: run {record.id} measured no step")
    memory = profile.gpu_memory
    device = memory.device.split(" ", 1)[1].strip() if memory and " " in memory.device else None
    return RunStep(
        run_id=record.id,
        step_s=statistics.median(s.duration_s for s in steps),
        steps=len(steps),
        device=device or None,
        device_memory_bytes=memory.total_bytes if memory else None,
    )


def _measured_part(request: TrainRequest, run: RunStep | None) -> AcceleratorSpec:
    """The datasheet of the part the step ran on: ``--measured-on``, else the run's device."""
    if request.measured_on is not None:
        [spec, *more] = resolve_accelerators((request.measured_on,), load_accelerators())
        if more:
            names = ", ".join(s.name for s in (spec, *more))
            raise BadInputError(
                f"--measured-on {request.measured_on!r} names a family: one of {names}"
            )
        return spec
    assert run is not None  # checked: --measured-step comes with --measured-on
    if run.device is None:
        raise BadInputError(
            f"--measured-run: run {run.run_id}'s loop used no CUDA device: give --measured-on "
            "PART for the accelerator it ran on"
        )
    found = load_accelerators().for_device(run.device, run.device_memory_bytes)
    if len(found) != 1:
        known = ", ".join(s.name for s in found) if found else "no datasheet in the catalog"
        raise BadInputError(
            f"--measured-run: run {run.run_id} ran on {run.device!r} ({known}): give "
            "--measured-on PART"
        )
    return found[0]


def _measured_step(request: TrainRequest, flops: float) -> MeasuredStep | None:
    """The user's measured step as the MFU model takes it (bad input is one line)."""
    run = None
    if request.measured_run is not None:
        run = step_of_run(request.measured_run, request.store_path)
        step_s, flag = run.step_s, "--measured-run"
    elif request.measured_step_s is not None and request.measured_on is not None:
        step_s, flag = request.measured_step_s, "--measured-step"
    else:
        return None
    spec = _measured_part(request, run)
    devices = _measured_devices(request)
    dtype = PRECISIONS[request.precision][1]
    where = f"{devices} x {spec.name}"
    label = (
        f"your step of {step_s:g} s on {where}"
        if run is None
        else f"doctor run {run.run_id}'s step of {step_s:.4g} s (median of {run.steps}) on {where}"
    )
    try:
        return MeasuredStep(
            spec=spec,
            dtype=dtype,
            devices=devices,
            tokens_per_step=float(request.micro_batch * request.seq_len * (devices // request.tp)),
            flops_per_token=flops,
            step_s=step_s,
            label=label,
        )
    except ValueError as exc:
        raise BadInputError(f"{flag}: {exc}") from None


def _deadline_devices(
    request: TrainRequest, shape: ModelShape, spec: AcceleratorSpec, time: TrainTime
) -> int | None:
    """Fewest devices (a multiple of tp, at most :data:`MAX_DEVICES`) whose slow-end time meets
    the deadline (time scales as 1/devices in the projection) and whose step fits (memory per
    device never grows with the data-parallel degree: a bisection finds it)."""
    assert request.deadline_s is not None and spec.memory_bytes is not None
    memory = spec.memory_bytes
    sharding = SHARDINGS[request.sharding]
    needed = time.time_high_s * time.devices / request.deadline_s
    low = max(2 if sharding != "ddp" else 1, math.ceil(needed / request.tp))
    high = MAX_DEVICES // request.tp
    fp8 = spec.peak("fp8") is not None

    def fits(replicas: int) -> bool:
        setup = _setup(
            dataclasses.replace(request, devices=replicas * request.tp), shape, sharding, fp8
        )
        return estimate_train_memory(setup).fits(memory)

    if low > high or not fits(high):
        return None
    if fits(low):
        return low * request.tp
    while high - low > 1:  # fits(high) holds, fits(low) does not
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid
    return high * request.tp


def _option(
    request: TrainRequest,
    shape: ModelShape,
    spec: AcceleratorSpec,
    flops: float,
    catalog: Any,
    calibration: TrainCalibration,
) -> TrainOption:
    dtype = PRECISIONS[request.precision][1]
    memory = float(spec.memory_bytes or 0)
    price = usd_per_device_hour(spec, catalog)
    empty: dict[str, Any] = dict.fromkeys(
        ("fits", "total_bytes", "max_micro_batch", "time_s", "time_low_s", "time_high_s"), None
    ) | dict.fromkeys(("mfu", "mfu_low", "mfu_high", "usd", "usd_low", "usd_high"), None)
    base: dict[str, Any] = {
        "accelerator": spec.name,
        "family": spec.family,
        "memory_bytes": memory,
        "usd_per_device_hour": price[0] if price else None,
        "priced_by": price[1] if price else None,
    }
    if spec.peak(dtype) is None:
        why = f"no {dtype} peak in its datasheet"
        return TrainOption(**base, **empty, basis="", why=why)
    fp8 = spec.peak("fp8") is not None
    setup = _setup(request, shape, SHARDINGS[request.sharding], fp8)
    estimate = estimate_train_memory(setup)
    time = project_train_time(
        spec,
        dtype=dtype,
        tokens=request.tokens,
        flops_per_token=flops,
        devices=request.devices,
        calibration=calibration,
    )
    hours = request.devices / 3600
    usd = (time.time_s * hours * price[0]) if price else None
    deadline = (
        _deadline_devices(request, shape, spec, time) if request.deadline_s is not None else None
    )
    return TrainOption(
        **base,
        fits=estimate.fits(memory),
        total_bytes=estimate.total_bytes,
        max_micro_batch=max_micro_batch(setup, memory, limit=4096),
        time_s=time.time_s,
        time_low_s=time.time_low_s,
        time_high_s=time.time_high_s,
        mfu=time.mfu,
        mfu_low=time.mfu_low,
        mfu_high=time.mfu_high,
        usd=usd,
        usd_low=time.time_low_s * hours * price[0] if price else None,
        usd_high=time.time_high_s * hours * price[0] if price else None,
        basis=time.basis,
        deadline_devices=deadline,
        # the whole run's device-seconds do not change with the count: the $ is the budget's
        deadline_usd=usd if deadline is not None else None,
        why="" if estimate.fits(memory) else "does not fit: see the memory per device",
    )


def _memory(request: TrainRequest, shape: ModelShape) -> tuple[MemoryBreakdown, ...]:
    fp8 = PRECISIONS[request.precision][0] == "fp8_mixed"
    dp = request.devices // request.tp
    stages = [s for s in get_args(Sharding) if s == "ddp" or dp >= 2]
    return tuple(
        MemoryBreakdown.of(estimate_train_memory(_setup(request, shape, s, fp8)), s) for s in stages
    )


def _fleet(request: TrainRequest) -> tuple[str, tuple[FleetClass, ...]] | None:
    """The ``--fleet`` audit run's id and GPU families (bad input refused before any work)."""
    if request.fleet_run is None:
        return None
    from accelscope.commands.plan.workflow import fleet_from_store
    from accelscope.store.sqlite import DEFAULT_STORE_PATH, ResultStore

    path = request.store_path or DEFAULT_STORE_PATH
    if not path.exists():
        raise BadInputError(f"no results store at {path}: cannot read run {request.fleet_run}")
    with ResultStore(path) as store:
        return fleet_from_store(store, request.fleet_run)


def _recovery(
    request: TrainRequest, options: tuple[TrainOption, ...], fleet: tuple[FleetClass, ...]
) -> tuple[TrainRecovery, ...]:
    out = []
    for o in options:
        if not o.fits or o.usd_per_device_hour is None or o.time_s is None:
            continue
        assert o.time_low_s is not None and o.time_high_s is not None
        found = train_buy_or_recover(
            accelerator=o.accelerator,
            devices=request.devices,
            time_s=o.time_s,
            time_low_s=o.time_low_s,
            time_high_s=o.time_high_s,
            usd_per_gpu_hour=o.usd_per_device_hour,
            price_source=o.priced_by or "catalog",
            fleet=fleet,
            deadline_s=request.deadline_s,
        )
        if found is not None:
            out.append(found)
    return tuple(out)


def plan_train(request: TrainRequest) -> TrainPlan:
    """The training plan of the request's model on each accelerator."""
    _check(request)
    fleet = _fleet(request)
    specs = resolve_accelerators(request.accelerators, load_accelerators())
    config = load_model_config(request.config)
    shape = _decoder_shape(config, str(request.config))
    try:  # the recipe's own checks (tp dividing the heads and the MLP width, ...)
        _setup(request, shape, SHARDINGS[request.sharding], fp8=True)
    except ValueError as exc:
        raise BadInputError(f"plan train: {exc}") from None
    flops = flops_per_token(shape, request.seq_len)
    step = _measured_step(request, flops)
    calibration = tightened_training(
        shipped_training_calibration(), () if step is None else (step,)
    )
    memory = _memory(request, shape)
    catalog = load_catalog(request.catalog_files)
    options = tuple(
        _option(request, shape, s, flops, catalog, calibration) for s in specs if s.memory_bytes
    )
    in_deadline = [o for o in options if o.deadline_usd is not None]
    in_budget = [
        o
        for o in options
        if request.budget_usd is not None and o.usd is not None and o.usd <= request.budget_usd
    ]
    dtype = PRECISIONS[request.precision][1]
    return TrainPlan(
        config=str(config.get("_name_or_path") or request.config),
        params=float(sum(shape.params().values())),
        flops_per_token=flops,
        tokens=request.tokens,
        devices=request.devices,
        tp=request.tp,
        dp=request.devices // request.tp,
        seq_len=request.seq_len,
        micro_batch=request.micro_batch,
        optimizer=request.optimizer,
        precision=request.precision,
        checkpointing=request.checkpointing,
        sharding=request.sharding,
        memory=memory,
        options=options,
        coverage=COVERAGE,
        deadline_s=request.deadline_s,
        budget_usd=request.budget_usd,
        cheapest_in_deadline=min(in_deadline, key=lambda o: cast(float, o.deadline_usd)).accelerator
        if in_deadline
        else None,
        fastest_in_budget=min(in_budget, key=lambda o: cast(float, o.time_s)).accelerator
        if in_budget
        else None,
        fleet_run=None if fleet is None else fleet[0],
        measured_mfu=None if step is None else step.mfu,
        recovery=() if fleet is None else _recovery(request, options, fleet[1]),
        assumptions=(
            f"FLOPs per token 6N + 12 L n d S = {flops:.3g} (PaLM appendix B; N the weights a "
            "token multiplies, full attention counted)",
            f"MFU per family fitted on {len(calibration.rows)} MLPerf Training v4.0-v5.0 "
            "decoder results (gpt3, llama2_70b_lora, llama31_405b) against each part's 8-bit "
            f"peak; applied here to the {dtype} peak"
            + (
                ""
                if dtype == "fp8"
                else f" (assumed to carry over from 8 bits: {dtype} leans long, 8-bit runs pay "
                "casts and scaling it does not)"
            ),
            "time linear in devices (no scaling law: the table's spread over 4-11,616 devices "
            "is in the 80 % interval); wall clock of the training alone, no start-up or "
            "checkpoint writes",
            "$: the catalog's cheapest on-demand price per device x devices x time; '—' where "
            "the catalog rents none",
            "memory: accelscope.plan.train_memory (checked on CPU and an H200), with a GPU's "
            "fixed runtime overhead; FSDP = ZeRO-3",
        )
        + (
            ()
            if step is None
            else (
                f"{step.label}: MFU {step.mfu:.3f} of its {dtype} peak, added to the "
                f"{step.spec.family} family as one more row (its interval narrows; the others "
                "move through the mean they share)",
            )
        ),
    )


def store_train_plan(plan: TrainPlan, store_path: Path, *, command_line: str | None) -> str:
    """Store ``plan`` as a ``plan`` run (``plan train --save``); its id."""
    from accelscope.commands.plan.workflow import store_plan_document
    from accelscope.serialise import dump

    settings = {k: v for k, v in dump(plan).items() if k not in ("memory", "options", "recovery")}
    run = store_plan_document(store_path, plan.config, settings, dump(plan), None, command_line)
    return run.run_id or ""


def _duration(seconds: float) -> str:
    """Training lengths: days, hours or minutes (``units.format_seconds`` stops at seconds)."""
    for scale, unit in ((86400.0 * 2, "d"), (3600.0, "h"), (60.0, "min")):
        if seconds >= scale:
            return f"{seconds / (86400.0 if unit == 'd' else scale):.3g} {unit}"
    return format_seconds(seconds)


def _interval(point: float | None, low: float | None, high: float | None, fmt: Any) -> str:
    if point is None or low is None or high is None:
        return "—"
    return f"{fmt(point)} [{fmt(low)}-{fmt(high)}]"


def train_view(plan: TrainPlan) -> RenderableType:
    """The terminal view: memory per sharding, then one row per accelerator."""
    head = Text(
        f"{plan.config}: {plan.params / 1e9:.2f} B params, {plan.tokens:.3g} tokens on "
        f"{plan.devices} devices (tp {plan.tp}, dp {plan.dp}), micro-batch {plan.micro_batch} x "
        f"{plan.seq_len}, {plan.optimizer}, {plan.precision}, checkpointing "
        f"{'on' if plan.checkpointing else 'off'}  (estimate)"
    )
    memory = Table(title="memory per device at the step's peak (estimate)", title_justify="left")
    for column in ("sharding", "weights", "gradients", "optimizer", "activations", "overhead"):
        memory.add_column(column, justify="right")
    memory.add_column("total", justify="right")
    memory.add_column("at", justify="left")
    for m in plan.memory:
        memory.add_row(
            m.sharding,
            *(
                format_bytes(v)
                for v in (
                    m.weights_bytes,
                    m.gradient_bytes,
                    m.optimizer_bytes,
                    m.activation_bytes,
                    m.overhead_bytes,
                    m.total_bytes,
                )
            ),
            m.peak_phase.replace("_", " "),
        )
    options = Table(
        title=f"{plan.sharding}, {plan.devices} devices: time and $ [{plan.coverage:.0%} interval]",
        title_justify="left",
    )
    for column in ("accelerator", "fits", "max micro-batch", "time", "$", "MFU from"):
        options.add_column(
            column, justify="left" if column in ("accelerator", "MFU from") else "right"
        )
    for o in plan.options:
        fits = "—" if o.fits is None else ("yes" if o.fits else "no")
        options.add_row(
            o.accelerator,
            f"{fits} ({format_bytes(o.total_bytes)})" if o.total_bytes is not None else fits,
            "—" if o.max_micro_batch is None else str(o.max_micro_batch),
            _interval(o.time_s, o.time_low_s, o.time_high_s, _duration),
            _interval(o.usd, o.usd_low, o.usd_high, money_usd),
            o.basis or o.why,
        )
    lines: list[RenderableType] = [head, memory, options]
    if plan.deadline_s is not None:
        chosen = next((o for o in plan.options if o.accelerator == plan.cheapest_in_deadline), None)
        lines.append(
            Text(
                f"cheapest within {_duration(plan.deadline_s)} (slow end of the interval): "
                + (
                    f"{chosen.accelerator} x {chosen.deadline_devices}, "
                    f"{money_usd(chosen.deadline_usd)}"
                    if chosen
                    else f"none up to {MAX_DEVICES} devices"
                )
            )
        )
    if plan.budget_usd is not None:
        fastest = next((o for o in plan.options if o.accelerator == plan.fastest_in_budget), None)
        lines.append(
            Text(
                f"fastest within {money_usd(plan.budget_usd)} on {plan.devices} devices: "
                + (
                    f"{fastest.accelerator}, {_duration(fastest.time_s)}, {money_usd(fastest.usd)}"
                    if fastest and fastest.time_s is not None
                    else "none"
                )
            )
        )
    if plan.fleet_run is not None:
        lines += _recovery_view(plan)
    lines += [Text(f"assumed: {a}", style="dim") for a in plan.assumptions]
    return Group(*lines)


def _hours(hours: tuple[int, ...]) -> str:
    """``0-7, 20-23`` (UTC hours of the day, runs joined)."""
    runs: list[list[int]] = []
    for h in hours:
        if runs and h == runs[-1][-1] + 1:
            runs[-1].append(h)
        else:
            runs.append([h])
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def _recovery_view(plan: TrainPlan) -> list[RenderableType]:
    """Buy or recover: per option of a family the fleet has, idle hours, days, $ of each path."""
    head = Text(
        f"buy or recover: against audit run {plan.fleet_run} ({plan.devices} GPUs idle at once "
        "for a synchronous run; hours UTC, audited; GPU-hours projected; $ the catalog's rent)"
    )
    if not plan.recovery:
        return [head, Text("the fleet has no GPU of a family that fits and is priced here")]
    within = "" if plan.deadline_s is None else f" within {_duration(plan.deadline_s)}"
    table = Table(
        title=f"UTC hours with >= {plan.devices} idle, GPU-hours recovered and rented{within}",
        title_justify="left",
        show_edge=False,
    )
    for column in (
        "accelerator",
        "GPU-h needed",
        "idle hours",
        "GPU-h/day",
        "days alone",
        "recovered",
        "rented",
        "$ rent all",
        "$ recover",
        "$/useful GPU-h",
    ):
        table.add_column(column, justify="left" if column == "accelerator" else "right")
    for r in plan.recovery:
        before, after = (
            r.fleet_usd_per_useful_gpu_hour_before,
            r.fleet_usd_per_useful_gpu_hour_after,
        )
        table.add_row(
            r.accelerator,
            f"{r.needed_gpu_h:,.0f} [{r.needed_gpu_h_low:,.0f}-{r.needed_gpu_h_high:,.0f}]",
            _hours(r.hours_of_day),
            f"{r.recovered_gpu_h_per_day:g}",
            "never" if r.days_on_recovered is None else f"{r.days_on_recovered:.3g}",
            f"{r.recovered_gpu_h:,.0f}",
            f"{r.rented_gpu_h:,.0f}",
            money_usd(r.rent_all_usd),
            money_usd(r.recover_usd),
            "—" if before is None else f"{money_usd(before)} → {money_usd(after or before)}",
        )
    lines: list[RenderableType] = [head, table]
    late = [r.accelerator for r in plan.recovery if r.meets_deadline is False]
    if late:
        lines.append(Text(f"misses the deadline on {plan.devices} devices: {', '.join(late)}"))
    best = min(plan.recovery, key=lambda r: r.recover_usd)
    lines.append(
        Text(
            f"cheapest path: {best.accelerator}: recover {best.recovered_gpu_h:,.0f} GPU-hours of "
            f"idle {best.family}, rent {best.rented_gpu_h:,.0f}: {money_usd(best.recover_usd)} "
            f"against {money_usd(best.rent_all_usd)} all rented"
        )
    )
    return lines
