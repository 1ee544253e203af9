"""accelscope.serialise: a dataclass's JSON form is what its field types declare, and exactly what
a reader of the stored JSON text gets back."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import pydantic
import pytest
from pydantic import Field

from accelscope.serialise import FiniteOrNull, Unbounded, dump, load


class Colour(StrEnum):
    RED = "red"


@dataclass(frozen=True, kw_only=True)
class Inner:
    count: int


@dataclass(frozen=True, kw_only=True)
class Record:
    colour: Colour
    samples_s: tuple[float, ...]
    inner: Annotated[
        Inner, Field(serialization_alias="stored_inner", validation_alias="stored_inner")
    ]
    high: Unbounded
    speedup: FiniteOrNull | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    scratch: Annotated[tuple[int, ...], Field(exclude=True)] = ()


def _record(**overrides: Any) -> Record:
    values: dict[str, Any] = {
        "colour": Colour.RED,
        "samples_s": (0.5, 2),
        "inner": Inner(count=3),
        "high": math.inf,
        "speedup": math.nan,
        "evidence": {"ratio": math.inf, "pair": (1, 2)},
        "scratch": (9,),
    }
    return Record(**(values | overrides))


def test_the_declared_shape() -> None:
    data = dump(_record())
    assert list(data) == ["colour", "samples_s", "stored_inner", "high", "speedup", "evidence"]
    assert data["colour"] == "red" and data["samples_s"] == [0.5, 2]
    assert data["stored_inner"] == {"count": 3}
    assert data["high"] is None and data["speedup"] is None  # unbounded / undefined: null
    # an untyped value keeps its infinity (pydantic's JSON mode would write null there)
    assert math.isinf(data["evidence"]["ratio"]) and data["evidence"]["pair"] == [1, 2]
    assert type(data["samples_s"][1]) is int  # an int stays an int, as json.dumps writes it


def test_dump_is_what_the_stored_text_reads_back_as() -> None:
    data = dump(_record(high=2.0, speedup=1.5))
    assert json.loads(json.dumps(data)) == data


def test_load_reads_what_dump_wrote_and_ignores_keys_it_does_not_know() -> None:
    # JSON has lists only, and no infinity where a bound is stored as null: a record whose
    # values survive that reads back equal
    evidence = {"ratio": math.inf, "pair": [1, 2]}
    record = _record(high=2.0, speedup=1.5, evidence=evidence, scratch=())
    stored = {**json.loads(json.dumps(dump(record))), "added_later": 1}
    assert load(Record, stored) == record


def test_load_refuses_a_wrong_type() -> None:
    with pytest.raises(pydantic.ValidationError):
        load(Inner, {"count": "many"})
