"""Published per-GPU results (MLPerf Inference rounds): what a model's best bench figure is held
against, so a user sees how far it stands from the record on the same GPU.

The catalog (``plan/data/records.toml``, shipped with the package) holds only figures with a
source: each entry names its benchmark round, scenario, stack, where its samples start and the
page it comes from; a field its source does not state is absent, never filled in.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from accelscope.errors import BadInputError

__all__ = ["PublishedRecord", "load_records", "records_for"]


class PublishedRecord(BaseModel):
    """One published result, per GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """The accelscope zoo name of the model (``resnet50``)."""
    gpu: str
    """Words that must all occur in the device's name (``H100``)."""
    benchmark: str
    scenario: str
    items_per_s: float = Field(gt=0)
    stack: str
    inputs: str
    source: str = Field(pattern=r"^https://")
    precision: str | None = None
    batch_size: int | None = Field(default=None, gt=0)
    note: str = ""

    def matches(self, model_ref: str, gpu_name: str) -> bool:
        """True for ``model_ref`` on a GPU whose name holds every word of :attr:`gpu`."""
        words = set(re.split(r"[\s\-_]+", gpu_name.lower()))
        return self.model == model_ref and set(self.gpu.lower().split()) <= words

    def describe(self) -> str:
        """One line: round, scenario, figure, precision, stack, batch."""
        parts = [f"{self.benchmark} {self.scenario}: {self.items_per_s:,.0f} items/s"]
        parts.append(f"{self.precision or 'precision not stated'}, {self.stack}")
        if self.batch_size is not None:
            parts.append(f"batch {self.batch_size}")
        return ", ".join(parts)


def load_records(path: Path | None = None) -> tuple[PublishedRecord, ...]:
    """The records of ``path`` (default: the shipped catalog); a bad file is ``BadInputError``
    naming the file, the entry and the field."""
    if path is None:
        return _shipped()
    return _parse(path.read_text(encoding="utf-8"), str(path))


@cache
def _shipped() -> tuple[PublishedRecord, ...]:
    text = resources.files("accelscope.plan").joinpath("data/records.toml").read_text("utf-8")
    return _parse(text, "records.toml")


def _parse(text: str, where: str) -> tuple[PublishedRecord, ...]:
    try:
        entries = tomllib.loads(text).get("record", [])
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{where}: not valid TOML ({exc})") from None
    records = []
    for number, entry in enumerate(entries, start=1):
        try:
            records.append(PublishedRecord.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "entry"
            raise BadInputError(f"{where}: record {number}: {field}: {first['msg']}") from None
    return tuple(records)


def records_for(model_ref: str, gpu_name: str) -> tuple[PublishedRecord, ...]:
    """The shipped records of ``model_ref`` on the GPU named ``gpu_name``."""
    return tuple(r for r in load_records() if r.matches(model_ref, gpu_name))
