"""The published, measured results that projections are calibrated on (package data).

``plan/data/published_inference.toml`` holds MLPerf Inference closed-division, datacenter
results of rounds v4.0, v4.1 and v5.0, each read from its ``mlperf_log_summary.txt`` and its
system's JSON, and citing both (repository, commit, path, round). Round v5.1 is held back on
purpose: it checks the projection forward in time, as a user's next purchase would. How the
rows were collected: ``benchmarks/results/published_inference_SOURCES.md``.

Each row is one system's throughput on one benchmark in one scenario. The figure is the whole
system's; :attr:`PublishedResult.per_device` divides it by the accelerators (CPU sockets for a
CPU-only system). ``[[absent]]`` tables name accelerator classes users rent that have no
published result (AWS Inferentia2 and Trainium among them), so a projection can say so.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from accelscope.errors import BadInputError
from accelscope.validation import PositiveCount, PositiveNumber, Text, validate

__all__ = ["Absent", "PublishedResult", "PublishedTable", "load_published"]

_SHIPPED = "published_inference.toml"


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class PublishedResult(_Row):
    """One published result: a system's throughput on a benchmark, with its citation."""

    round: Text
    repo: Text
    commit: Text
    submitter: Text
    system: Text
    accelerator: Text
    family: Text
    variant: str | None = None
    accelerator_count: PositiveCount
    benchmark: Text
    scenario: Literal["Offline", "Server"]
    metric: Literal["samples_per_s", "tokens_per_s"]
    value: PositiveNumber
    """The whole system's figure, per second, exactly as its summary prints it."""
    value_label: Text
    samples_value: PositiveNumber | None = None
    """(LLM rows) the samples/s figure printed next to the tokens/s one: their ratio is the
    benchmark's mean output tokens per sample."""
    valid: bool
    path: Text
    framework: str = ""
    notes: str = ""

    @field_validator("scenario", mode="before")
    @classmethod
    def _scenario(cls, value: object) -> object:
        return value.capitalize() if isinstance(value, str) else value

    @field_validator("valid")
    @classmethod
    def _only_valid(cls, value: bool) -> bool:
        if not value:
            raise ValueError("only results whose summary says VALID belong in the table")
        return value

    @property
    def per_device(self) -> float:
        """Throughput per accelerator (per CPU socket for a CPU-only system), per second."""
        return self.value / self.accelerator_count

    @property
    def key(self) -> str:
        """Identity of the row: round, submitter, system, benchmark, scenario."""
        return f"{self.round}/{self.submitter}/{self.system}/{self.benchmark}/{self.scenario}"

    @property
    def citation(self) -> str:
        """``repo@commit:path (MLPerf Inference round)``, the file the figure was read from."""
        return f"{self.repo}@{self.commit[:10]}:{self.path} (MLPerf Inference {self.round})"


class Absent(_Row):
    """An accelerator class with no published result in the rounds read, and what was searched."""

    accelerator_class: Text
    family: Text
    finding: Text
    searched: Text


@dataclass(frozen=True)
class PublishedTable:
    """The published results and the classes without one, as read from ``origin``."""

    results: tuple[PublishedResult, ...]
    absent: tuple[Absent, ...]
    origin: str

    def families(self) -> tuple[str, ...]:
        """Accelerator families with at least one result, sorted."""
        return tuple(sorted({r.family for r in self.results}))


def _parse(text: str, origin: str) -> PublishedTable:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"published results {origin}: not valid TOML: {exc}") from None
    unknown = set(data) - {"result", "absent"}
    if unknown:
        raise BadInputError(
            f"published results {origin}: unknown top-level key {sorted(unknown)[0]!r} "
            "(expected [[result]] and [[absent]] tables)"
        )
    tables = data.get("result")
    if not isinstance(tables, list) or not tables:
        raise BadInputError(f"published results {origin}: no [[result]] tables")
    results = tuple(
        validate(PublishedResult, table, f"published results {origin}: result #{i + 1}")
        for i, table in enumerate(tables)
    )
    seen: set[str] = set()
    for row in results:
        if row.key in seen:
            raise BadInputError(f"published results {origin}: {row.key} is listed twice")
        seen.add(row.key)
    absent = tuple(
        validate(Absent, table, f"published results {origin}: absent #{i + 1}")
        for i, table in enumerate(data.get("absent", []))
    )
    return PublishedTable(results, absent, origin)


def load_published(path: Path | None = None) -> PublishedTable:
    """The shipped table, or the file at ``path`` (same schema); bad input is one line."""
    if path is None:
        text = resources.files("accelscope.plan").joinpath("data", _SHIPPED).read_text("utf-8")
        return _parse(text, f"(shipped) {_SHIPPED}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"published results {path}: cannot read: {exc}") from None
    return _parse(text, str(path))
