"""The hardware catalog: instance types with prices, peak rates and a source for every number.

A catalog is a TOML file of ``[[instance]]`` tables (schema: ``plan/data/catalog.toml``, which
ships with the package, and :class:`Instance`). Users extend or override it with their own file
of the same schema; an entry whose ``type`` equals a shipped one replaces it. Every problem in a
file is reported as one line naming the file, the entry and the field.

Units: prices in US dollars per hour; memory in bytes; peak rates in operations per second per
*device* (one GPU, or for a CPU instance the instance's whole CPU share), dense, no sparsity;
bandwidth in bytes per second per device.

Old names: ``price_per_hour`` and ``spot_price_per_hour`` (as keys of an entry and of its
``sources`` table) are read as ``price_usd_per_hour`` and ``spot_price_usd_per_hour``, so
catalog files written before the rename still load.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import AcceleratorKind, check_sourced_peaks, load_accelerators
from accelscope.validation import FieldProblem, PositiveCount, PositiveNumber, Text, validate

__all__ = [
    "DTYPES",
    "RENAMED",
    "Catalog",
    "Instance",
    "PublishedFigure",
    "Source",
    "load_catalog",
    "parse_catalog_text",
]

DTYPES = ("fp32", "bf16", "fp16", "int8", "fp8")
"""Dtypes a peak rate may be given for (``fp8`` optional; ``int8`` counts ops, not FLOPs)."""

_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
_SHIPPED = "catalog.toml"
_SOURCE_KEYS = ("shape", "price_usd_per_hour", "memory_bandwidth_bytes_per_s")
RENAMED = {
    "price_per_hour": "price_usd_per_hour",
    "spot_price_per_hour": "spot_price_usd_per_hour",
}
"""Old catalog key -> its current name (both accepted; not both in one table)."""


def _date(text: str) -> str:
    if not _DATE.match(text):
        raise ValueError(f"must be a date like 2025-06-30 or 2025-06, got {text!r}")
    return text


Date = Annotated[Text, AfterValidator(_date)]


def _not_twice(table: Mapping[str, Any], where: str = "") -> None:
    for old, new in RENAMED.items():
        if old in table and new in table:
            raise FieldProblem(
                f"{where}{new}", f"given twice: as {new!r} and as its old name {old!r}"
            )


def _renamed(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``table`` with old key names moved to the current ones."""
    _not_twice(table, where)
    return {RENAMED.get(key, key): value for key, value in table.items()}


class _Table(BaseModel):
    """A catalog TOML table: immutable, unknown keys refused (typos)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Source(_Table):
    """Where a number comes from (URL or document; ``unverified: ...`` when it could not be
    checked) and when it was read (``YYYY-MM-DD`` or ``YYYY-MM``)."""

    source: Text
    date: Date

    @property
    def verified(self) -> bool:
        """False when the source itself says the number is unverified."""
        return "unverified" not in self.source.lower()


class PublishedFigure(_Table):
    """A published throughput for a model on this instance's accelerator, used to check
    projections (not to size fleets)."""

    model: Text
    items_per_s: PositiveNumber
    precision: Text
    batch: Text
    scenario: Text
    accelerators: PositiveCount
    source: Text
    date: Date

    @property
    def items_per_s_per_device(self) -> float:
        """The figure divided by the number of accelerators it was measured on."""
        return self.items_per_s / self.accelerators


class Instance(_Table):
    """One rentable machine type (one ``[[instance]]`` table). ``devices`` is the number of
    independent replicas it serves (GPUs for a GPU instance, 1 for a CPU instance); peaks and
    bandwidth are per device. ``device_memory_bytes`` defaults to the host memory on a CPU
    instance. Every number needs a source: ``sources`` has ``shape``, ``price_usd_per_hour``,
    ``memory_bandwidth_bytes_per_s``, ``spot_price_usd_per_hour`` when a spot price is given,
    and ``peak_ops_per_s`` (all dtypes) or ``peak_ops_per_s.<dtype>`` (one dtype)."""

    type: Text
    provider: Text
    region: Text
    kind: AcceleratorKind
    accelerator: Text
    part: str = ""
    """The datasheet (an ``accelerators.toml`` name) of the instance's accelerator, which
    projections calibrated on published results need; empty where none is shipped."""
    accelerator_count: PositiveCount
    device_memory_bytes: PositiveCount
    vcpus: PositiveCount | None = None
    """Host vCPUs; required for a CPU instance (its capacity), optional elsewhere (a TPU
    slice's share of its host is not always published)."""
    host_memory_bytes: PositiveCount | None = None
    price_usd_per_hour: PositiveNumber = Field(
        validation_alias=AliasChoices("price_usd_per_hour", "price_per_hour")
    )
    spot_price_usd_per_hour: PositiveNumber | None = Field(
        default=None,
        validation_alias=AliasChoices("spot_price_usd_per_hour", "spot_price_per_hour"),
    )
    peak_ops_per_s: dict[str, PositiveNumber]
    memory_bandwidth_bytes_per_s: PositiveNumber
    sources: dict[str, Source]
    published: tuple[PublishedFigure, ...] = ()
    notes: str = ""
    _origin: str = PrivateAttr(default="")

    @model_validator(mode="before")
    @classmethod
    def _old_names_and_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        _not_twice(data)
        data = dict(data)
        if isinstance(data.get("sources"), Mapping):
            data["sources"] = _renamed(data["sources"], "sources.")
        if "device_memory_bytes" not in data and data.get("kind") == "cpu":
            data["device_memory_bytes"] = data.get("host_memory_bytes")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.kind == "cpu" and (self.vcpus is None or self.host_memory_bytes is None):
            raise FieldProblem("vcpus", "missing (a cpu entry needs vcpus and host_memory_bytes)")
        if self.kind == "cpu" and self.accelerator_count != 1:
            raise FieldProblem("accelerator_count", "must be 1 for a cpu instance (its CPU share)")
        spot = ("spot_price_usd_per_hour",) if self.spot_price_usd_per_hour is not None else ()
        check_sourced_peaks(self.peak_ops_per_s, self.sources, DTYPES, (*_SOURCE_KEYS, *spot))
        if "fp32" not in self.peak_ops_per_s and self.kind in ("cpu", "gpu"):
            raise FieldProblem(
                "peak_ops_per_s.fp32", f"missing (every {self.kind} entry needs an fp32 peak)"
            )
        return self

    @classmethod
    def from_table(cls, table: object, origin: str, index: int) -> Instance:
        """Validate the ``index``-th ``[[instance]]`` table of the catalog file ``origin``."""
        name = f"entry #{index + 1}"
        if isinstance(table, Mapping) and isinstance(table.get("type"), str) and table["type"]:
            name = f"instance {table['type']!r}"
        if not isinstance(table, Mapping):
            raise BadInputError(f"catalog {origin}: {name}: must be a table")
        instance = validate(cls, table, f"catalog {origin}: {name}")
        instance._origin = origin
        return instance

    @property
    def origin(self) -> str:
        """The catalog file the entry came from."""
        return self._origin

    @property
    def devices(self) -> int:
        """Replicas one instance serves: one per accelerator (GPU, TPU chip, NPU), one for a
        CPU instance."""
        return 1 if self.kind == "cpu" else self.accelerator_count

    def peak(self, dtype: str) -> float | None:
        """Peak ops/s per device for ``dtype``, or ``None`` where the catalog gives none."""
        return self.peak_ops_per_s.get(dtype)

    def source_of(self, key: str) -> Source | None:
        """The source for ``key`` (``peak_ops_per_s.bf16`` falls back to ``peak_ops_per_s``)."""
        if key in self.sources:
            return self.sources[key]
        return self.sources.get(key.split(".", 1)[0])


@dataclass(frozen=True)
class Catalog:
    """Instances by type, in file order (shipped entries first, user entries after)."""

    instances: tuple[Instance, ...]
    files: tuple[str, ...] = ()
    overridden: tuple[str, ...] = field(default=())

    def get(self, type_: str) -> Instance:
        """The entry named ``type_``; unknown names are bad input (with the known ones)."""
        for instance in self.instances:
            if instance.type == type_:
                return instance
        known = ", ".join(i.type for i in self.instances)
        raise BadInputError(f"no instance type {type_!r} in the catalog (known: {known})")

    def gpus(self) -> tuple[Instance, ...]:
        """The GPU instances (TPU and NPU instances are apart: their memory-fit rules differ)."""
        return tuple(i for i in self.instances if i.kind == "gpu")


def parse_catalog_text(text: str, origin: str) -> tuple[Instance, ...]:
    """Parse and validate one catalog file's text; ``origin`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"catalog {origin}: not valid TOML: {exc}") from None
    unknown = set(data) - {"instance"}
    if unknown:
        raise BadInputError(
            f"catalog {origin}: unknown top-level key {sorted(unknown)[0]!r} "
            "(expected [[instance]] tables)"
        )
    tables = data.get("instance")
    if not tables:
        raise BadInputError(f"catalog {origin}: no [[instance]] entries (empty catalog)")
    if not isinstance(tables, list):
        raise BadInputError(f"catalog {origin}: 'instance' must be an array of tables")
    instances = [Instance.from_table(table, origin, i) for i, table in enumerate(tables)]
    parts = {spec.name for spec in load_accelerators().specs}
    for instance in instances:
        if instance.part and instance.part not in parts:
            raise BadInputError(
                f"catalog {origin}: instance {instance.type!r}: field 'part': no accelerator "
                f"{instance.part!r} in the shipped datasheets (accelerators.toml; known: "
                f"{', '.join(sorted(parts))})"
            )
    seen: set[str] = set()
    for instance in instances:
        if instance.type in seen:
            raise BadInputError(
                f"catalog {origin}: instance {instance.type!r}: field 'type': "
                "duplicate name in this file"
            )
        seen.add(instance.type)
    return tuple(instances)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(f"catalog {path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"catalog {path}: is a directory, not a TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"catalog {path}: cannot read: {exc}") from None


def _merge(base: Iterable[Instance], extra: Iterable[Instance]) -> tuple[list[Instance], list[str]]:
    merged = {i.type: i for i in base}
    overridden = [i.type for i in extra if i.type in merged]
    for instance in extra:
        merged[instance.type] = instance
    return list(merged.values()), overridden


def load_catalog(user_files: Iterable[Path] = (), *, include_shipped: bool = True) -> Catalog:
    """The shipped catalog extended (same ``type``: replaced) by each of ``user_files`` in turn."""
    instances: list[Instance] = []
    files: list[str] = []
    overridden: list[str] = []
    if include_shipped:
        text = resources.files("accelscope.plan").joinpath("data", _SHIPPED).read_text("utf-8")
        instances = list(parse_catalog_text(text, f"(shipped) {_SHIPPED}"))
        files.append(f"(shipped) {_SHIPPED}")
    for path in user_files:
        extra = parse_catalog_text(_read(Path(path)), str(path))
        instances, replaced = _merge(instances, extra)
        overridden += replaced
        files.append(str(path))
    return Catalog(tuple(instances), tuple(files), tuple(overridden))
