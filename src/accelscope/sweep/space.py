"""The sweep space: backend x precision x batch x threads (x options), and its pre-screen.

Every candidate is either measured or listed as skipped with the reason (backend not installed,
no fast path for that precision on this hardware, runtime cannot run this model): nothing is
dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import product

from accelscope.backends.base import Backend
from accelscope.backends.registry import all_backends, get_backend
from accelscope.errors import BadInputError
from accelscope.hardware.fingerprint import Environment
from accelscope.models.base import LoadedModel
from accelscope.spec import Device, Precision, RunSpec

__all__ = ["Candidate", "SweepSpace", "expand"]


@dataclass(frozen=True)
class SweepSpace:
    """What to sweep. Empty ``backends``/``precisions`` mean every registered backend and every
    precision; ``options`` (key, value) pairs apply to each backend that has that option."""

    backends: tuple[str, ...] = ()
    precisions: tuple[Precision, ...] = ()
    batch_sizes: tuple[int, ...] = (8,)
    threads: tuple[int, ...] = (1,)
    device: Device = Device.CPU
    options: tuple[tuple[str, str], ...] = ()
    force_precisions: bool = False

    def __post_init__(self) -> None:
        if not self.batch_sizes or any(b <= 0 for b in self.batch_sizes):
            raise BadInputError("batch sizes must be positive integers")
        if not self.threads or any(t <= 0 for t in self.threads):
            raise BadInputError("thread counts must be positive integers")
        for name in self.backends:
            get_backend(name)  # unknown names are bad input, before anything runs


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


def expand(space: SweepSpace, model: LoadedModel, env: Environment) -> list[Candidate]:
    """All candidates in a stable order (backend, precision, threads, batch ascending), each
    pre-screened: availability, fast path (unless forced), and the backend's own support."""
    backends = [get_backend(n) for n in space.backends] if space.backends else all_backends()
    precisions = space.precisions or tuple(Precision)
    candidates: list[Candidate] = []
    for backend, precision, threads, batch in product(
        backends, precisions, space.threads, sorted(space.batch_sizes)
    ):
        if precision not in backend.precisions and not space.precisions:
            continue  # default sweep: only what the backend can do at all
        for options in _option_variants(space.options, backend.options):
            spec = RunSpec(
                model=model.ref,
                backend=backend.name,
                precision=precision,
                batch_size=batch,
                threads=threads,
                device=space.device,
                model_digest=model.digest,
                options=options,
            )
            candidates.append(Candidate(spec=spec, skip_reason=_screen(space, backend, model,
                                                                       spec, env)))  # fmt: skip
    return candidates


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


def _screen(
    space: SweepSpace, backend: Backend, model: LoadedModel, spec: RunSpec, env: Environment
) -> str:
    fast, why = _fast_path(env, spec.precision, space.device)
    if not fast and not space.force_precisions:
        return f"no fast path: {why} (--force-precision to measure anyway)"
    support = backend.supports(model, spec, env)
    return "" if support.ok else f"not available: {support.reason}"
