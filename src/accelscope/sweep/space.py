"""The sweep space: backend x precision x batch x threads (x options), and its pre-screen.

Every candidate is either measured or listed as skipped with the reason (backend not installed,
runtime cannot run this model, precision measured slower than fp32 here): nothing is dropped
silently.

The precision screen is measured, not assumed: on the CPU, a (runtime, precision) pair is
dropped only when its probe (:mod:`accelscope.engine.probe`) measured the runtime's kernels
slower than its fp32 kernels on this machine; the ISA table (:mod:`accelscope.hardware.fastpaths`)
only explains why. The rule alone decides where nothing can be probed: fp8 on a CPU (no CPU has
an fp8 unit; it is emulated), CUDA devices (compute-capability rules), backends without a probe
(plugins), and callers that pass no probe table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import product

from accelscope.backends.base import Backend
from accelscope.backends.registry import all_backends, get_backend
from accelscope.engine.probe import ProbeTable, needed_pairs
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.models.base import LoadedModel
from accelscope.spec import Device, Precision, RunSpec
from accelscope.sweep.gpu_default import default_gpu_rows
from accelscope.sweep.memory_fit import MemoryFit

__all__ = ["Candidate", "SweepSpace", "expand", "probe_requests"]


@dataclass(frozen=True, kw_only=True)
class SweepSpace:
    """What to sweep. Empty ``backends``/``precisions`` mean every registered backend and every
    precision; ``options`` (key, value) pairs apply to each backend that has that option. When
    the precisions leave fp32 out (``--precision int8,bf16``), the fp32 baseline is added: a
    speedup needs it.

    ``device_index`` is the CUDA ordinal. ``tf32`` lists the TF32 settings fp32 configurations
    run under (``(False, True)``: IEEE fp32 and TF32 as separate rows); reduced precisions run
    with TF32 off, as does the added fp32 baseline.

    ``gpu_default`` (CUDA only) replaces backends x precisions x options by the default GPU
    sweep (:mod:`accelscope.sweep.gpu_default`) at each of ``batch_sizes``. ``memory``, where
    given, holds each CUDA configuration against the device's free memory before it runs.
    """

    backends: tuple[str, ...] = ()
    precisions: tuple[Precision, ...] = ()
    batch_sizes: tuple[int, ...] = (8,)
    threads: tuple[int, ...] = (1,)
    device: Device = Device.CPU
    options: tuple[tuple[str, str], ...] = ()
    force_precisions: bool = False
    device_index: int = 0
    tf32: tuple[bool, ...] = (False,)
    gpu_default: bool = False
    memory: MemoryFit | None = None

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise BadInputError("batch sizes must be positive integers")
        if not self.threads or any(t <= 0 for t in self.threads):
            raise BadInputError("thread counts must be positive integers")
        for name in self.backends:
            get_backend(name)  # unknown names are bad input, before anything runs
        if not self.tf32:
            raise BadInputError("tf32: give on, off or both")
        if True in self.tf32 and self.device is not Device.CUDA:
            raise BadInputError(
                "--tf32 on needs --device cuda: TF32 is a mode of NVIDIA tensor cores"
            )
        if self.gpu_default and self.device is not Device.CUDA:
            raise BadInputError("the default GPU sweep needs --device cuda")


@dataclass(frozen=True)
class Candidate:
    """One configuration of the space, and why it is skipped (empty when it will run)."""

    spec: RunSpec
    skip_reason: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def runnable(self) -> bool:
        """True when the pre-screen let it through."""
        return not self.skip_reason


def _fast_path(env: Environment, precision: Precision, device: Device) -> tuple[bool, str]:
    for support in env.precision_support():
        if support.precision is precision and support.device is device:
            return support.fast, support.reason
    return False, f"no {device.value} device on this machine"


def _specs(space: SweepSpace, model: LoadedModel, env: Environment) -> list[tuple[RunSpec, str]]:
    """Every configuration in a stable order (backend, precision, threads, batch ascending),
    with the backend's own verdict: ``""`` when it can run it, else why not."""
    if space.gpu_default:
        return _gpu_default_specs(space, model, env)
    backends = [get_backend(n) for n in space.backends] if space.backends else all_backends()
    precisions = space.precisions or tuple(Precision)
    out: list[tuple[RunSpec, str]] = []
    for backend, precision, threads, batch in product(
        backends, precisions, space.threads, sorted(space.batch_sizes)
    ):
        if not space.precisions and (
            precision not in backend.precisions
            or (precision in backend.cuda_precisions and space.device is not Device.CUDA)
        ):
            continue  # default sweep: only what the backend can do at all (on this device)
        tf32_values = space.tf32 if precision is Precision.FP32 else (False,)
        for options, tf32 in product(_option_variants(space.options, backend.options), tf32_values):
            spec = RunSpec(
                model=model.ref,
                backend=backend.name,
                precision=precision,
                batch_size=batch,
                threads=threads,
                device=space.device,
                model_digest=model.digest,
                options=options,
                device_index=space.device_index,
                tf32=tf32,
            )
            out.append((spec, _support(backend, model, spec, env)))
    if not any(spec.precision is Precision.FP32 and not spec.tf32 for spec, _ in out):
        out.insert(0, _baseline(space, model, env))
    return out


def _gpu_default_specs(
    space: SweepSpace, model: LoadedModel, env: Environment
) -> list[tuple[RunSpec, str]]:
    """The default GPU sweep's rows, batch ascending, each with its backend's verdict."""
    out: list[tuple[RunSpec, str]] = []
    for threads, batch in product(space.threads, sorted(space.batch_sizes)):
        for row in default_gpu_rows(model, batch):
            spec = RunSpec(
                model=model.ref,
                backend=row.backend,
                precision=row.precision,
                batch_size=batch,
                threads=threads,
                device=space.device,
                model_digest=model.digest,
                options=row.options,
                device_index=space.device_index,
                tf32=row.tf32,
            )
            out.append((spec, _support(get_backend(row.backend), model, spec, env)))
    return out


def _baseline(space: SweepSpace, model: LoadedModel, env: Environment) -> tuple[RunSpec, str]:
    """The fp32 baseline a speedup needs, when the requested precisions leave it out: eager
    (ONNX Runtime for ONNX files) at the largest batch and most threads."""
    eager = get_backend("eager")
    backend = eager if model.format in eager.formats else get_backend("onnxruntime")
    spec = RunSpec(
        model=model.ref,
        backend=backend.name,
        precision=Precision.FP32,
        batch_size=max(space.batch_sizes),
        threads=max(space.threads),
        device=space.device,
        model_digest=model.digest,
        device_index=space.device_index,
    )
    return spec, _support(backend, model, spec, env)


def expand(
    space: SweepSpace, model: LoadedModel, env: Environment, probes: ProbeTable | None = None
) -> list[Candidate]:
    """All candidates in a stable order (backend, precision, threads, batch ascending), each
    pre-screened: the backend's own support first, then the precision (by ``probes`` where the
    pair was probed, else by the ISA rule; ``--force-precision`` measures it anyway), then, on
    a GPU with ``space.memory``, whether the batch fits in the device's free memory."""
    return [
        Candidate(
            spec=spec,
            skip_reason=why
            or _precision_screen(space, spec, env, probes)
            or _memory_screen(space, spec),
        )
        for spec, why in _specs(space, model, env)
    ]


def _memory_screen(space: SweepSpace, spec: RunSpec) -> str:
    if space.memory is None or spec.device is not Device.CUDA:
        return ""
    return space.memory.refusal(spec)


def probe_requests(
    space: SweepSpace, model: LoadedModel, env: Environment
) -> list[tuple[str, Precision]]:
    """The (runtime, precision) probes the pre-screen of this space needs: CPU configurations
    the backends can run, in reduced precisions, unless precisions are forced."""
    if space.device is not Device.CPU or space.force_precisions:
        return []
    return needed_pairs(
        [(spec.backend, spec.precision) for spec, why in _specs(space, model, env) if not why]
    )


def _option_variants(
    requested: tuple[tuple[str, str], ...], known: Mapping[str, tuple[str, ...]]
) -> list[tuple[tuple[str, str], ...]]:
    """Every combination of the requested option values that this backend has; a value list
    (``channels_last=true,false``) is an axis of the sweep."""
    axes = [
        [(key, value.strip()) for value in values.split(",") if value.strip()]
        for key, values in requested
        if key in known
    ]
    return [tuple(combo) for combo in product(*axes)] if axes else [()]


def _support(backend: Backend, model: LoadedModel, spec: RunSpec, env: Environment) -> str:
    support = backend.supports(model, spec, env)
    return "" if support.ok else f"not available: {support.reason}"


_FORCE = "(--force-precision to measure anyway)"


def _precision_screen(
    space: SweepSpace, spec: RunSpec, env: Environment, probes: ProbeTable | None
) -> str:
    if spec.precision is Precision.FP32 or space.force_precisions:
        return ""
    fast, why = _fast_path(env, spec.precision, space.device)
    verdict = probes.get(spec.backend, spec.precision) if probes is not None else None
    if verdict is not None and space.device is Device.CPU:
        return "" if verdict.keep else f"measured slower here: {verdict.describe()}; {why} {_FORCE}"
    return "" if fast else f"no fast path: {why} {_FORCE}"
