"""The hardware catalog: instance types with prices, peak rates and a source for every number.

A catalog is a TOML file of ``[[instance]]`` tables (schema: ``plan/data/catalog.toml``, which
ships with the package). Users extend or override it with their own file of the same schema;
an entry whose ``type`` equals a shipped one replaces it. Every problem in a file is reported
as one line naming the file, the entry and the field.

Units: prices in US dollars per hour; memory in bytes; peak rates in operations per second per
*device* (one GPU, or for a CPU instance the instance's whole CPU share), dense, no sparsity;
bandwidth in bytes per second per device.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from accelscope.errors import BadInputError

__all__ = [
    "DTYPES",
    "Catalog",
    "Instance",
    "PublishedFigure",
    "Source",
    "load_catalog",
    "parse_catalog_text",
]

DTYPES = ("fp32", "bf16", "fp16", "int8", "fp8")
"""Dtypes a peak rate may be given for (``fp8`` optional; ``int8`` counts ops, not FLOPs)."""

KINDS = ("cpu", "gpu")
_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
_SHIPPED = "catalog.toml"

_FIELDS = {
    "type",
    "provider",
    "region",
    "kind",
    "accelerator",
    "accelerator_count",
    "device_memory_bytes",
    "vcpus",
    "host_memory_bytes",
    "price_per_hour",
    "spot_price_per_hour",
    "peak_ops_per_s",
    "memory_bandwidth_bytes_per_s",
    "sources",
    "published",
    "notes",
}
_PUBLISHED_FIELDS = {
    "model",
    "items_per_s",
    "precision",
    "batch",
    "scenario",
    "accelerators",
    "source",
    "date",
}
_SOURCE_KEYS = ("shape", "price_per_hour", "memory_bandwidth_bytes_per_s")


@dataclass(frozen=True)
class Source:
    """Where a number comes from (URL or document; ``unverified: ...`` when it could not be
    checked) and when it was read (``YYYY-MM-DD`` or ``YYYY-MM``)."""

    source: str
    date: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready dict."""
        return {"source": self.source, "date": self.date}

    @property
    def verified(self) -> bool:
        """False when the source itself says the number is unverified."""
        return "unverified" not in self.source.lower()


@dataclass(frozen=True)
class PublishedFigure:
    """A published throughput for a model on this instance's accelerator, used to check
    projections (not to size fleets)."""

    model: str
    items_per_s: float
    precision: str
    batch: str
    scenario: str
    accelerators: int
    source: str
    date: str

    @property
    def items_per_s_per_device(self) -> float:
        """The figure divided by the number of accelerators it was measured on."""
        return self.items_per_s / self.accelerators

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "model": self.model,
            "items_per_s": self.items_per_s,
            "precision": self.precision,
            "batch": self.batch,
            "scenario": self.scenario,
            "accelerators": self.accelerators,
            "source": self.source,
            "date": self.date,
        }


@dataclass(frozen=True)
class Instance:
    """One rentable machine type. ``devices`` is the number of independent replicas it serves
    (GPUs for a GPU instance, 1 for a CPU instance); peaks and bandwidth are per device."""

    type: str
    provider: str
    region: str
    kind: str
    accelerator: str
    accelerator_count: int
    device_memory_bytes: int
    vcpus: int
    host_memory_bytes: int
    price_per_hour: float
    spot_price_per_hour: float | None
    peak_ops_per_s: tuple[tuple[str, float], ...]
    memory_bandwidth_bytes_per_s: float
    sources: tuple[tuple[str, Source], ...]
    published: tuple[PublishedFigure, ...] = ()
    notes: str = ""
    origin: str = ""

    @property
    def devices(self) -> int:
        """Replicas one instance serves: one per GPU, one for a CPU instance."""
        return self.accelerator_count if self.kind == "gpu" else 1

    def peak(self, dtype: str) -> float | None:
        """Peak ops/s per device for ``dtype``, or ``None`` where the catalog gives none."""
        return dict(self.peak_ops_per_s).get(dtype)

    def source_of(self, key: str) -> Source | None:
        """The source for ``key`` (``peak_ops_per_s.bf16`` falls back to ``peak_ops_per_s``)."""
        found = dict(self.sources)
        if key in found:
            return found[key]
        return found.get(key.split(".", 1)[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the TOML schema, plus where the entry came from)."""
        return {
            "type": self.type,
            "provider": self.provider,
            "region": self.region,
            "kind": self.kind,
            "accelerator": self.accelerator,
            "accelerator_count": self.accelerator_count,
            "device_memory_bytes": self.device_memory_bytes,
            "vcpus": self.vcpus,
            "host_memory_bytes": self.host_memory_bytes,
            "price_per_hour": self.price_per_hour,
            "spot_price_per_hour": self.spot_price_per_hour,
            "peak_ops_per_s": dict(self.peak_ops_per_s),
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "sources": {k: s.to_dict() for k, s in self.sources},
            "published": [p.to_dict() for p in self.published],
            "notes": self.notes,
            "origin": self.origin,
        }


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
        """The GPU instances."""
        return tuple(i for i in self.instances if i.kind == "gpu")


class _Entry:
    """Validation context for one ``[[instance]]`` table: every error names file, entry, field."""

    def __init__(self, origin: str, name: str, table: Mapping[str, Any]) -> None:
        self.origin, self.name, self.table = origin, name, table

    def fail(self, key: str, problem: str) -> BadInputError:
        return BadInputError(f"catalog {self.origin}: {self.name}: field {key!r}: {problem}")

    def text(self, key: str, *, required: bool = True, default: str = "") -> str:
        if key not in self.table:
            if required:
                raise self.fail(key, "missing")
            return default
        value = self.table[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"must be non-empty text, got {value!r}")
        return value.strip()

    def number(self, key: str, value: Any = None, *, allow_zero: bool = False) -> float:
        value = self.table.get(key) if value is None else value
        if value is None:
            raise self.fail(key, "missing")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {value!r}")
        number = float(value)
        if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
            kind = "non-negative" if allow_zero else "positive"
            raise self.fail(key, f"must be a {kind} number, got {value!r}")
        return number

    def count(self, key: str, *, allow_zero: bool = False) -> int:
        number = self.number(key, allow_zero=allow_zero)
        if number != int(number):
            raise self.fail(key, f"must be a whole number, got {self.table[key]!r}")
        return int(number)


def _source(entry: _Entry, key: str, raw: Any) -> Source:
    where = f"sources.{key}"
    if not isinstance(raw, Mapping):
        raise entry.fail(where, "must be a table {source = ..., date = ...}")
    unknown = set(raw) - {"source", "date"}
    if unknown:
        raise entry.fail(where, f"unknown key(s) {', '.join(sorted(unknown))}")
    text, date = raw.get("source"), raw.get("date")
    if not isinstance(text, str) or not text.strip():
        raise entry.fail(where, "needs a non-empty 'source' (URL, document, or 'unverified: ...')")
    if not isinstance(date, str) or not _DATE.match(date):
        raise entry.fail(where, f"needs a 'date' like 2025-06-30, got {date!r}")
    return Source(text.strip(), date)


def _published(entry: _Entry, raw: Any) -> tuple[PublishedFigure, ...]:
    if not isinstance(raw, list):
        raise entry.fail("published", "must be an array of tables")
    figures = []
    for index, item in enumerate(raw):
        where = f"published[{index}]"
        if not isinstance(item, Mapping):
            raise entry.fail(where, "must be a table")
        unknown = set(item) - _PUBLISHED_FIELDS
        if unknown:
            raise entry.fail(where, f"unknown key(s) {', '.join(sorted(unknown))}")
        sub = _Entry(entry.origin, f"{entry.name} {where}", item)
        date = sub.text("date")
        if not _DATE.match(date):
            raise sub.fail("date", f"must look like 2025-06-30, got {date!r}")
        figures.append(
            PublishedFigure(
                model=sub.text("model"),
                items_per_s=sub.number("items_per_s"),
                precision=sub.text("precision"),
                batch=sub.text("batch"),
                scenario=sub.text("scenario"),
                accelerators=sub.count("accelerators"),
                source=sub.text("source"),
                date=date,
            )
        )
    return tuple(figures)


def _instance(origin: str, index: int, table: Any) -> Instance:
    name = f"entry #{index + 1}"
    if isinstance(table, Mapping) and isinstance(table.get("type"), str) and table["type"]:
        name = f"instance {table['type']!r}"
    entry = _Entry(origin, name, table if isinstance(table, Mapping) else {})
    if not isinstance(table, Mapping):
        raise entry.fail("instance", "must be a table")
    unknown = set(table) - _FIELDS
    if unknown:
        raise entry.fail(sorted(unknown)[0], "unknown field (typo?)")
    kind = entry.text("kind")
    if kind not in KINDS:
        raise entry.fail("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    count = entry.count("accelerator_count")
    if kind == "cpu" and count != 1:
        raise entry.fail("accelerator_count", "must be 1 for a cpu instance (its CPU share)")
    host_memory = entry.count("host_memory_bytes")
    device_memory = host_memory
    if kind == "gpu" or "device_memory_bytes" in table:
        device_memory = entry.count("device_memory_bytes")
    peaks_raw = table.get("peak_ops_per_s")
    if not isinstance(peaks_raw, Mapping) or not peaks_raw:
        raise entry.fail("peak_ops_per_s", "missing (a table of dtype = ops/s, e.g. fp32 = 8.1e12)")
    peaks = []
    for dtype, value in peaks_raw.items():
        if dtype not in DTYPES:
            raise entry.fail(f"peak_ops_per_s.{dtype}", f"unknown dtype (use {', '.join(DTYPES)})")
        peaks.append((dtype, entry.number(f"peak_ops_per_s.{dtype}", value)))
    if "fp32" not in dict(peaks):
        raise entry.fail("peak_ops_per_s.fp32", "missing (every entry needs an fp32 peak)")
    spot = None
    if "spot_price_per_hour" in table:
        spot = entry.number("spot_price_per_hour")
    sources_raw = table.get("sources")
    if not isinstance(sources_raw, Mapping):
        raise entry.fail("sources", "missing (every number needs a source and a date)")
    sources = {str(k): _source(entry, str(k), v) for k, v in sources_raw.items()}
    needed = list(_SOURCE_KEYS) + (["spot_price_per_hour"] if spot is not None else [])
    for key in needed:
        if key not in sources:
            raise entry.fail(f"sources.{key}", "missing (every number needs a source)")
    for dtype, _ in peaks:
        if f"peak_ops_per_s.{dtype}" not in sources and "peak_ops_per_s" not in sources:
            raise entry.fail(f"sources.peak_ops_per_s.{dtype}", "missing")
    notes = table.get("notes", "")
    if not isinstance(notes, str):
        raise entry.fail("notes", "must be text")
    return Instance(
        type=entry.text("type"),
        provider=entry.text("provider"),
        region=entry.text("region"),
        kind=kind,
        accelerator=entry.text("accelerator"),
        accelerator_count=count,
        device_memory_bytes=device_memory,
        vcpus=entry.count("vcpus"),
        host_memory_bytes=host_memory,
        price_per_hour=entry.number("price_per_hour"),
        spot_price_per_hour=spot,
        peak_ops_per_s=tuple(peaks),
        memory_bandwidth_bytes_per_s=entry.number("memory_bandwidth_bytes_per_s"),
        sources=tuple(sources.items()),
        published=_published(entry, table.get("published", [])),
        notes=notes,
        origin=origin,
    )


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
    instances = [_instance(origin, i, table) for i, table in enumerate(tables)]
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
