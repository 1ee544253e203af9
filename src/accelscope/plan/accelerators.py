"""Accelerator datasheets: every kind users rent (GPU, TPU, NPU, CPU socket), with sources.

``plan/data/accelerators.toml`` (shipped) holds one ``[[accelerator]]`` table per part: device
memory, memory bandwidth, dense peak rates per dtype, power, each number with a source and the
date it was read, or ``unverified: why``; derived CPU figures say ``derived: the arithmetic``.
Projections read peaks from here; the research log is
``benchmarks/results/accelerators_SOURCES.md``.

Units: bytes, bytes per second (decimal), operations per second per device (per chip; per
socket for a CPU), dense (no 2:4 sparsity); int8, fp8 and fp4 in ops/s.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from accelscope.errors import BadInputError
from accelscope.validation import FieldProblem, PositiveCount, PositiveNumber, Text, validate

__all__ = [
    "ACCELERATOR_KINDS",
    "PEAK_DTYPES",
    "AcceleratorKind",
    "AcceleratorSpec",
    "Accelerators",
    "check_sourced_peaks",
    "load_accelerators",
]

AcceleratorKind = Literal["gpu", "tpu", "npu", "cpu"]
ACCELERATOR_KINDS: tuple[AcceleratorKind, ...] = ("gpu", "tpu", "npu", "cpu")
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
"""Dtypes a peak may be given for; a dtype absent from an entry has no fast path there (or no
figure was found)."""
LOW_PRECISION = ("fp8", "int8")
"""The 8-bit rates, fastest first where both exist: closed-division submissions quantise to 8
bits, so a published figure is set against the part's 8-bit peak."""

_SHIPPED = "accelerators.toml"


def check_sourced_peaks(
    peaks: Mapping[str, float],
    sources: Mapping[str, object],
    dtypes: tuple[str, ...],
    keys: tuple[str, ...],
) -> None:
    """Refuse (:class:`FieldProblem`) an empty or unknown-dtype peak table, or a number
    without its source: each of ``keys``, and each peak (its own source or the table's)."""
    if not peaks:
        raise FieldProblem(
            "peak_ops_per_s", "missing (a table of dtype = ops/s, e.g. fp32 = 8.1e12)"
        )
    for dtype in peaks:
        if dtype not in dtypes:
            raise FieldProblem(
                f"peak_ops_per_s.{dtype}", f"unknown dtype (use {', '.join(dtypes)})"
            )
    for key in keys:
        if key not in sources:
            raise FieldProblem(f"sources.{key}", "missing (every number needs a source)")
    for dtype in peaks:
        if f"peak_ops_per_s.{dtype}" not in sources and "peak_ops_per_s" not in sources:
            raise FieldProblem(f"sources.peak_ops_per_s.{dtype}", "missing")


class _Table(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpecSource(_Table):
    """Where a figure comes from, the date it was read, and an optional note."""

    source: Text
    date: Text
    note: str = ""

    @property
    def verified(self) -> bool:
        """False when the source says the figure is unverified."""
        return not self.source.lower().startswith("unverified")


class AcceleratorSpec(_Table):
    """One part's datasheet (one ``[[accelerator]]`` table)."""

    name: Text
    family: Text
    kind: AcceleratorKind
    vendor: Text
    variant: str = ""
    memory_bytes: PositiveCount | None = None
    memory_bandwidth_bytes_per_s: PositiveNumber
    peak_ops_per_s: dict[str, PositiveNumber]
    tdp_w: PositiveNumber | None = None
    interconnect_bytes_per_s: PositiveNumber | None = None
    """Device-to-device bandwidth a tensor-parallel all-reduce runs at, per direction per
    device (NVLink, Infinity Fabric, ICI, NeuronLink, RoCE; PCIe for cards without a link);
    ``None``: no figure found (the serving projection then prices no communication)."""
    interconnect_peers: PositiveCount | None = None
    """Links (or ports) to distinct neighbours the figure is summed over, on a part wired as a
    mesh or a torus (``interconnect_topology``); ``None`` on a switch (NVSwitch) or a host's
    PCIe link, which gives the whole figure to any group."""
    interconnect_topology: Literal["switch", "mesh", "torus"] = "switch"
    """How a group of ``TP`` devices reaches the figure (:meth:`interconnect_at`): a switch
    (or the host's PCIe link) all of it; a full mesh (Infinity Fabric, Gaudi's RoCE) the
    ``min(TP - 1, peers)`` links to the group's other members; a torus (ICI, NeuronLink) the two
    links of a ring along one axis."""
    sources: dict[str, SpecSource]

    @model_validator(mode="after")
    def _sourced(self) -> Self:
        linked = self.interconnect_topology != "switch"
        if linked and (self.interconnect_peers is None or self.interconnect_bytes_per_s is None):
            raise FieldProblem(
                "interconnect_peers",
                f"missing (a {self.interconnect_topology} needs its links and their bandwidth)",
            )
        if not linked and self.interconnect_peers is not None:
            raise FieldProblem(
                "interconnect_topology", "missing (links are given: is it a mesh or a torus?)"
            )
        if self.kind != "cpu" and self.memory_bytes is None:
            raise FieldProblem("memory_bytes", f"missing (every {self.kind} has device memory)")
        given = (
            "memory_bandwidth_bytes_per_s",
            *self._given("memory_bytes", "tdp_w", "interconnect_bytes_per_s", "interconnect_peers"),
        )
        check_sourced_peaks(self.peak_ops_per_s, self.sources, PEAK_DTYPES, given)
        return self

    def _given(self, *keys: str) -> tuple[str, ...]:
        return tuple(k for k in keys if getattr(self, k) is not None)

    def interconnect_at(self, tp: int) -> float | None:
        """Bytes/s per direction a group of ``tp`` (2 or more) of these devices all-reduces at
        (``None``: no figure)."""
        if tp < 2:
            raise ValueError(f"an all-reduce needs a group of 2 or more, got {tp}")
        link, peers = self.interconnect_bytes_per_s, self.interconnect_peers
        if link is None or peers is None:
            return link
        used = min(tp - 1, peers) if self.interconnect_topology == "mesh" else min(tp - 1, 2)
        return link * used / peers

    def peak(self, dtype: str) -> float | None:
        """Dense peak ops/s per device for ``dtype``; ``None`` where none is given."""
        return self.peak_ops_per_s.get(dtype)

    @property
    def low_precision_peak(self) -> tuple[str, float]:
        """The 8-bit dtype and its peak (fp8 before int8 where both exist); a part with neither
        falls back to bf16, then fp16, then fp32 (it then runs its benchmarks there)."""
        for dtype in (*LOW_PRECISION, "bf16", "fp16", "fp32"):
            peak = self.peak(dtype)
            if peak is not None:
                return dtype, peak
        raise AssertionError("validated: peak_ops_per_s is never empty")

    def source_of(self, key: str) -> SpecSource | None:
        """The source for ``key`` (``peak_ops_per_s.bf16`` falls back to ``peak_ops_per_s``)."""
        return self.sources.get(key) or self.sources.get(key.split(".", 1)[0])


@dataclass(frozen=True)
class Accelerators:
    """The datasheets by name, in file order."""

    specs: tuple[AcceleratorSpec, ...]
    origin: str

    def get(self, name: str) -> AcceleratorSpec:
        """The part named ``name``; an unknown name is bad input, with the known ones."""
        for spec in self.specs:
            if spec.name == name:
                return spec
        known = ", ".join(s.name for s in self.specs)
        raise BadInputError(f"no accelerator {name!r} in {self.origin} (known: {known})")

    def of_family(self, family: str) -> tuple[AcceleratorSpec, ...]:
        """The parts of ``family`` (``nvidia-h100``: SXM, PCIe, NVL)."""
        return tuple(s for s in self.specs if s.family == family)

    def for_device(self, name: str, memory_bytes: int | None = None) -> tuple[AcceleratorSpec, ...]:
        """The datasheets a device that calls itself ``name`` may be (the name the driver
        reports: ``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB``, ``AMD Instinct MI300X``).

        The family is the one whose model word (``h100`` of ``nvidia-h100``) is a word of the
        name. A form factor the name states (``SXM``, ``PCIe``, ``NVL``) picks that part; a name
        that states none is the family's SXM part where it has one (NVIDIA's PCIe and NVL parts
        say so in their names, its SXM parts do not always). Then, where several are left, the
        parts within 10 % of the memory the device reports. Empty: no datasheet matches; more
        than one: the name does not tell them apart."""
        words = [w for w in re.split(r"[\s\-_]+", name.lower()) if w]
        found = [s for s in self.specs if s.kind != "cpu" and s.family.split("-", 1)[-1] in words]
        stated = [f for f in _FORM_FACTORS if any(w.startswith(f) for w in words)]
        if stated:
            found = [s for s in found if stated[0] in _form_factors(s.name)]
        elif any("sxm" in _form_factors(s.name) for s in found):
            found = [s for s in found if "sxm" in _form_factors(s.name)]
        if len(found) > 1 and memory_bytes is not None and memory_bytes > 0:
            near = [
                s
                for s in found
                if s.memory_bytes is not None
                and abs(s.memory_bytes - memory_bytes) <= 0.1 * s.memory_bytes
            ]
            found = near or found
        return tuple(found)


_FORM_FACTORS = ("sxm", "pcie", "nvl")
"""Form factors a device name may state (``sxm4`` and ``sxm5`` are ``sxm``)."""


def _form_factors(name: str) -> set[str]:
    words = re.split(r"[\s\-_()]+", name.lower())
    return {f for f in _FORM_FACTORS if any(w.startswith(f) for w in words)}


def parse_accelerators(text: str, origin: str) -> Accelerators:
    """Parse and validate an accelerators file's text; problems are one line naming the entry."""
    try:
        data: Mapping[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"accelerators {origin}: not valid TOML: {exc}") from None
    unknown = set(data) - {"accelerator"}
    if unknown:
        raise BadInputError(
            f"accelerators {origin}: unknown top-level key {sorted(unknown)[0]!r} "
            "(expected [[accelerator]] tables)"
        )
    tables = data.get("accelerator")
    if not isinstance(tables, list) or not tables:
        raise BadInputError(f"accelerators {origin}: no [[accelerator]] tables")
    specs = []
    for i, table in enumerate(tables):
        name = table.get("name") if isinstance(table, Mapping) else None
        where = f"accelerator {name!r}" if isinstance(name, str) else f"entry #{i + 1}"
        specs.append(validate(AcceleratorSpec, table, f"accelerators {origin}: {where}"))
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInputError(f"accelerators {origin}: {twice[0]!r} is listed twice")
    return Accelerators(tuple(specs), origin)


@functools.cache
def load_accelerators() -> Accelerators:
    """The shipped datasheets (read once)."""
    text = resources.files("accelscope.plan").joinpath("data", _SHIPPED).read_text("utf-8")
    return parse_accelerators(text, f"(shipped) {_SHIPPED}")
