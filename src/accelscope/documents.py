"""The documents commands hand each other through the result store (the contract between
commands): ``ceilings`` (:class:`Ceilings`), ``roofline`` (:class:`RooflineProfile` and its
:class:`Operator` rows) and ``capacity`` (:class:`LoadCapacity`).

Each is one pydantic model. Producers build their document through it
(``Model(...).model_dump(mode="json")``) and readers validate through it
(``Model.from_payload(payload, what)``), so both sides agree on every key. A malformed document
is the one-line :class:`~accelscope.errors.BadInputError` of :mod:`accelscope.validation`
(``run 7f3a roofline document: field 'operators[0].flops': must be a number, got 'many'``),
never a ``KeyError``. Keys a reader does not know are ignored, so a newer document still loads;
keys added after documents were first stored are optional with defaults, so older ones load too.

Reading also checks what makes a document usable beyond its keys: a roofline profile with no
operators is a valid record of a model that does no counted work (its producer may build it),
but a reader has nothing to project from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from accelscope.errors import BadInputError
from accelscope.spec import Device
from accelscope.units import parse_duration_s
from accelscope.validation import (
    Count,
    FieldProblem,
    NonNegativeNumber,
    Number,
    PositiveCount,
    PositiveNumber,
    validate,
)

__all__ = [
    "CPU_DTYPES",
    "DTYPES",
    "Ceilings",
    "CurvePoint",
    "Document",
    "KernelPeak",
    "LlmCapacity",
    "LoadCapacity",
    "Operator",
    "RooflineProfile",
    "SearchedPolicy",
    "Slo",
    "Theoretical",
    "normalise_dtype",
]

DTYPES = ("fp32", "tf32", "bf16", "fp16", "int8")
"""Dtypes whose matrix peak the ceilings search measures, in display order. ``fp32`` is IEEE
fp32; ``tf32`` is fp32 tensors on TF32 tensor cores (CUDA only), its own row since "fp32"
must mean the same thing everywhere."""

CPU_DTYPES = ("fp32", "bf16", "fp16", "int8")
"""The :data:`DTYPES` a CPU has (no TF32)."""

_DTYPE_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "int8": "int8",
    "qint8": "int8",
    "quint8": "int8",
    "uint8": "int8",
    "i8": "int8",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}


def normalise_dtype(name: str) -> str | None:
    """Map a dtype name to the catalog's (``fp32``, ``bf16``, ...); ``None`` if unknown."""
    return _DTYPE_ALIASES.get(name.strip().lower().removeprefix("torch."))


class Document(BaseModel):
    """A stored document: immutable, unknown keys ignored, validated on the way in."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: ClassVar[str] = "document"
    """The store's document kind (``ceilings``, ``roofline``, ``capacity``)."""

    @classmethod
    def from_payload(cls, payload: object, what: str | None = None) -> Self:
        """Validate a stored payload for use; ``what`` names it in the one-line error."""
        return validate(cls, payload, what or f"{cls.kind} document", _READING)


_READING = {"reading": True}
"""Validation context of :meth:`Document.from_payload` (see :func:`_reading`)."""


def _reading(info: ValidationInfo) -> bool:
    """Whether a document is being read for use (not built by its producer)."""
    return bool(info.context and info.context.get("reading"))


# ------------------------------------------------------------------------------------ ceilings


class KernelPeak(Document):
    """The kernel that reached a dtype's peak: family (``linear``, ``conv3x3_nhwc`` …), shape,
    threads, rate (FLOP/s) and the library path that ran it. ``probe``: the dtype was not
    searched (see :attr:`Ceilings.not_searched`) and this is its probe's small call."""

    family: str
    shape: tuple[Count, ...]
    threads: Count
    flops_per_s: NonNegativeNumber
    path: str = ""
    probe: bool = False


class Theoretical(Document):
    """The ISA (or datasheet) peak: FLOP/s per dtype, bandwidth when known, and how it was
    derived. Absent from a ceilings document, it is empty (no theoretical figures)."""

    flops_per_s: dict[str, PositiveNumber] = Field(default_factory=dict)
    bandwidth_bytes_per_s: NonNegativeNumber | None = None
    derivation: str = ""


class Ceilings(Document):
    """Measured ceilings of one device (all usable cores on CPU): the ``ceilings`` document.

    ``matmul_flops_per_s`` holds only dtypes with a measured peak. ``bandwidth_bytes_per_s`` is
    the memory roof used by rooflines: the best of the measured streams (copy, triad).
    ``by_threads`` maps a thread count to its per-dtype peaks (the roofs for ``--threads``).

    ``measured_dtypes`` are the dtypes this measurement covered (searched, stopped after their
    probe, or found not to run here); a command needing another dtype measures it and extends
    the cached ceilings. A document without the key covers every dtype (older measurements
    searched them all). ``not_searched`` maps a dtype stopped after its probe to the reason; its
    peak is then the probe's figure (``probe_flops_per_s``, the best small call per dtype).

    ``fp32_math`` says what the ``fp32`` row is: ``ieee`` when it was measured with TF32 off
    (every CUDA measurement since TF32 got its own ``tf32`` row; CPUs have no TF32). Empty in
    documents stored before: on CUDA their fp32 may be a TF32 convolution rate, so a command
    needing fp32 or tf32 measures them again (:meth:`missing`). ``device_index`` is the CUDA
    ordinal measured.

    Required: the peaks and the bandwidth. What describes the measurement (device, name,
    fingerprint, time, stream detail, theoretical peaks) was never required by plan's reader,
    so it defaults to empty.
    """

    kind: ClassVar[str] = "ceilings"

    device: str = ""
    device_index: Count = 0
    fp32_math: str = ""
    device_name: str = ""
    environment_fingerprint: str = ""
    measured_at: str = ""
    threads: Count = 0
    matmul_flops_per_s: dict[str, PositiveNumber]
    bandwidth_bytes_per_s: PositiveNumber
    bandwidth_detail_bytes_per_s: dict[str, NonNegativeNumber] = Field(default_factory=dict)
    theoretical: Theoretical = Field(default_factory=Theoretical)
    peaks: dict[str, KernelPeak] = Field(default_factory=dict)
    by_threads: dict[int, dict[str, NonNegativeNumber]] = Field(default_factory=dict)
    naive_flops_per_s: dict[str, NonNegativeNumber] = Field(default_factory=dict)
    """A naive square matmul per dtype (4096² on CPU), for comparison with the searched peak."""
    trials: Count = 0
    search_s: NonNegativeNumber = 0.0
    notes: tuple[str, ...] = ()
    measured_dtypes: tuple[str, ...] = CPU_DTYPES  # stored before the key: those four searched
    probe_flops_per_s: dict[str, NonNegativeNumber] = Field(default_factory=dict)
    not_searched: dict[str, str] = Field(default_factory=dict)

    def missing(self, dtypes: Sequence[str]) -> tuple[str, ...]:
        """The dtypes of ``dtypes`` this measurement did not cover, in order. On CUDA, fp32 and
        tf32 count as not covered when the fp32 row is not known to be IEEE (see
        :attr:`fp32_math`)."""
        covered = set(self.measured_dtypes)
        if self.device == "cuda" and self.fp32_math != "ieee":
            covered -= {"fp32", "tf32"}
        return tuple(d for d in dtypes if d not in covered)

    def peak(self, dtype: str, threads: int | None = None) -> float | None:
        """The measured peak for ``dtype`` (at ``threads`` when measured), ``None`` if absent."""
        if threads is not None and threads in self.by_threads:
            value = self.by_threads[threads].get(dtype)
            if value is not None:
                return value
        return self.matmul_flops_per_s.get(dtype)

    def fraction_of_theoretical(self, dtype: str) -> float | None:
        """Measured peak / ISA peak for ``dtype`` (``None`` when either is unknown)."""
        measured = self.matmul_flops_per_s.get(dtype)
        ideal = self.theoretical.flops_per_s.get(dtype)
        return None if not measured or not ideal else measured / ideal


def _by_dtype(rates: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """``rates`` under the catalog's dtype names (unknown names dropped)."""
    found = ((normalise_dtype(name), rate) for name, rate in rates.items())
    return tuple((dtype, rate) for dtype, rate in found if dtype is not None)


# ------------------------------------------------------------------------------------ roofline


class Operator(Document):
    """One operator (name + dtype) of a roofline profile, summed over its calls in one batch.

    ``name``, ``dtype``, ``flops`` and ``bytes`` are the work (what plan projects);
    ``measured_time_s`` and the roofs used are optional for readers. The derived figures
    (intensity … bound) are written by ``roofline`` for people reading the raw document;
    readers recompute what they use.
    """

    name: str
    dtype: str
    flops: NonNegativeNumber
    bytes: NonNegativeNumber
    measured_time_s: NonNegativeNumber | None = None
    category: str = ""
    calls: Count = 0
    flops_counted: bool = True
    peak_flops_per_s: PositiveNumber | None = None
    peak_dtype: str | None = None
    bandwidth_bytes_per_s: PositiveNumber | None = None
    unmatched_calls: Count = 0
    intensity_flops_per_byte: Number | None = None
    floor_time_s: Number | None = None
    attainable_flops_per_s: Number | None = None
    achieved_flops_per_s: Number | None = None
    efficiency: Number | None = None
    bound: str | None = None


class RooflineProfile(Document):
    """A ``roofline`` document: a model's per-operator work for one batch, how long that batch
    took here, and this machine's ceilings. The properties are what plan projects with: the
    measured peaks (catalog dtype names), and the theoretical spec peaks where known."""

    kind: ClassVar[str] = "roofline"

    model: str
    backend: str = "eager"
    precision: str
    batch_size: PositiveCount
    device: Device
    threads: Count = 0
    environment_fingerprint: str
    measured_time_s: PositiveNumber
    measured_ci_rel: NonNegativeNumber = 0.0
    floor_time_s: NonNegativeNumber
    total_flops: NonNegativeNumber | None = None
    total_bytes: NonNegativeNumber | None = None
    profiled_time_s: NonNegativeNumber | None = None
    gap: Number | None = None
    mfu: Number | None = None
    uncounted_ops: tuple[str, ...] = ()
    above_ceiling: tuple[str, ...] = ()
    ceilings: Ceilings
    operators: tuple[Operator, ...]
    notes: tuple[str, ...] = ()
    conventions: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _usable(self, info: ValidationInfo) -> Self:
        """A profile read for use has work to project, a floor, and a measured peak."""
        if not _reading(info):
            return self
        if not self.operators:
            raise FieldProblem("operators", "is empty: nothing to project")
        if self.floor_time_s <= 0:
            raise FieldProblem(
                "floor_time_s", f"must be a positive number, got {self.floor_time_s}"
            )
        if not self.measured_peaks:
            raise FieldProblem("ceilings.matmul_flops_per_s", "holds no measured peak")
        return self

    @property
    def measured_peaks(self) -> tuple[tuple[str, float], ...]:
        """The measured matrix peaks (FLOP/s) by catalog dtype."""
        return _by_dtype(self.ceilings.matmul_flops_per_s)

    @property
    def measured_bandwidth_bytes_per_s(self) -> float:
        """The measured memory roof."""
        return self.ceilings.bandwidth_bytes_per_s

    @property
    def theoretical_peaks(self) -> tuple[tuple[str, float], ...]:
        """The spec peaks by catalog dtype (empty when the roofline derived none)."""
        return _by_dtype(self.ceilings.theoretical.flops_per_s)

    @property
    def theoretical_bandwidth_bytes_per_s(self) -> float | None:
        """The spec memory bandwidth, ``None`` when unknown."""
        return self.ceilings.theoretical.bandwidth_bytes_per_s or None

    @property
    def device_name(self) -> str:
        """The device's name (its kind when the ceilings do not name it)."""
        return self.ceilings.device_name or self.device


# ------------------------------------------------------------------------------------ capacity


class SearchedPolicy(Document):
    """One batcher policy's capacity in a ``capacity`` document's search."""

    batching: dict[str, Any]
    capacity_qps: NonNegativeNumber
    ceiling_qps: NonNegativeNumber
    trials: Count
    note: str = ""


class CurvePoint(Document):
    """One server trial of a ``capacity`` document's latency curve."""

    offered_rate_per_s: NonNegativeNumber
    batching: dict[str, Any]
    p50_s: NonNegativeNumber
    p90_s: NonNegativeNumber
    p99_s: NonNegativeNumber
    meets_sla: bool
    valid: bool


class LoadCapacity(Document):
    """A ``capacity`` document: the highest rate whose p99 met the SLA, measured here, with
    the search's policies, its latency curve and the harness floor as extras (``spec``,
    ``batching``, ``capacity_trial`` and ``harness_floor`` are the documents of their own
    classes; ``harness_floor`` is absent from documents stored before it existed)."""

    kind: ClassVar[str] = "capacity"

    model: str
    label: str
    spec: dict[str, Any] = Field(default_factory=dict)
    scenario: str = "server"
    sla_p99_s: PositiveNumber
    capacity_qps: NonNegativeNumber
    batching: dict[str, Any] | None = None
    environment_fingerprint: str
    device: Device
    valid: StrictBool
    capacity_trial: dict[str, Any] | None = None
    policies: tuple[SearchedPolicy, ...] = ()
    curve: tuple[CurvePoint, ...] = ()
    harness_floor: dict[str, Any] | None = None


class Slo(Document):
    """Service-level objective: bounds on TTFT, TPOT and E2E (any subset) at a percentile."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    @classmethod
    def parse(cls, text: str, percentile: float = 99.0) -> Slo:
        """``ttft=500ms,tpot=50ms,e2e=10s`` (any subset); one-line error otherwise."""
        if not 0.0 < percentile < 100.0:
            raise BadInputError(f"--slo-percentile {percentile:g}: give a value in (0, 100)")
        bounds: dict[str, float] = {}
        for part in str(text).split(","):
            name, sep, value = part.partition("=")
            name = name.strip().lower()
            if not sep or name not in ("ttft", "tpot", "e2e"):
                raise BadInputError(
                    f"--slo {text!r}: give ttft=, tpot= and/or e2e= durations, "
                    "e.g. ttft=500ms,tpot=50ms"
                )
            if name in bounds:
                raise BadInputError(f"--slo {text!r}: {name} given twice")
            try:
                bounds[name] = parse_duration_s(value.strip())
            except BadInputError:
                raise BadInputError(
                    f"--slo {name}={value.strip()}: give a positive duration, e.g. 500ms"
                ) from None
        return cls(
            ttft_s=bounds.get("ttft"),
            tpot_s=bounds.get("tpot"),
            e2e_s=bounds.get("e2e"),
            percentile=percentile,
        )

    def terms(self) -> dict[str, float]:
        """The bounded metrics: ``{"ttft_s": 0.5, ...}``."""
        found = {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}
        return {k: v for k, v in found.items() if v is not None}

    @property
    def label(self) -> str:
        """``p99 TTFT <= 500 ms, TPOT <= 50 ms``."""
        parts = [
            f"{k.removesuffix('_s').upper()} <= {v * 1000:g} ms" for k, v in self.terms().items()
        ]
        return f"p{self.percentile:g} " + ", ".join(parts) if parts else "none"


class LlmCapacity(Document):
    """An ``llm-capacity`` document: what ``llm`` measured an LLM server to sustain under an
    SLO, for ``plan api --from-run``. ``capacity`` is the highest offered load that met the SLO
    with claimable tails (``unit``: ``req/s`` or ``concurrency``); ``good_output_tokens_per_s``
    the token goodput measured at that load. ``valid`` is false when no load met the SLO."""

    kind: ClassVar[str] = "llm-capacity"

    model: str
    target: dict[str, Any] = Field(default_factory=dict)
    slo: Slo | None = None
    capacity: NonNegativeNumber | None = None
    unit: str = "req/s"
    good_output_tokens_per_s: NonNegativeNumber | None = None
    good_requests_per_s: NonNegativeNumber | None = None
    output_tokens_mean: NonNegativeNumber | None = None
    prompt_tokens_mean: NonNegativeNumber | None = None
    environment_fingerprint: str = ""
    local_server: StrictBool = False
    valid: StrictBool

    @field_validator("slo", mode="before")
    @classmethod
    def _no_slo(cls, value: Any) -> Any:
        """Runs stored before the SLO was typed wrote none as ``{}``."""
        return None if value == {} else value
