"""Flag types: each flag's text becomes its real value while typer parses (``parser=``), so a
config file value (``default_map``) goes through exactly the same conversion as the flag."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from accelscope.cli._device import Tf32
from accelscope.errors import BadInputError
from accelscope.spec import (
    Precision,
    TensorSpec,
    parse_batch_sizes,
    parse_precision,
    parse_tensor_spec,
)
from accelscope.units import parse_duration_s, parse_fraction


def _text(value: Any) -> str:
    """The flag text of a value; a config file's TOML list is the comma-separated text."""
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _split(value: Any) -> tuple[str, ...]:
    return tuple(part.strip() for part in _text(value).split(",") if part.strip())


@dataclass(frozen=True)
class Sizes:
    """Comma-separated positive integers (``--batch 1,8,32``)."""

    values: tuple[int, ...]


@dataclass(frozen=True)
class Names:
    """Comma-separated names (``--backend eager,compile``)."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class Precisions:
    """Comma-separated precisions (``--precision fp32,bf16``)."""

    values: tuple[Precision, ...]


@dataclass(frozen=True)
class Numbers:
    """Comma-separated positive numbers (``--rate 0.5,1,2``)."""

    values: tuple[float, ...]


COMMA_TYPES = (Sizes, Names, Precisions, Numbers, Tf32)
"""Flag types whose config file value may be a TOML list."""


def parse_sizes(value: Any) -> Sizes:
    return value if isinstance(value, Sizes) else Sizes(parse_batch_sizes(_text(value)))


def parse_numbers(value: Any) -> Numbers:
    """Positive finite numbers, comma-separated; one line naming the bad one otherwise."""
    if isinstance(value, Numbers):
        return value
    values = []
    for part in _split(value):
        try:
            number = float(part)
        except ValueError:
            raise BadInputError(f"{part!r} is not a number (give e.g. 0.5,1,2)") from None
        if not math.isfinite(number) or number <= 0:
            raise BadInputError(f"{part!r}: give positive numbers")
        values.append(number)
    if not values:
        raise BadInputError(f"{value!r}: give at least one number")
    return Numbers(tuple(values))


def parse_rate_unit(value: Any) -> float:
    """``2e9``, ``800GB/s``, ``3.35TB/s`` -> bytes/s; ``150TFLOPS`` -> FLOP/s."""
    text = str(value)
    scales = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
    cleaned = text.strip().lower().removesuffix("/s").removesuffix("flops").removesuffix("b")
    try:
        number = (
            float(cleaned[:-1]) * scales[cleaned[-1]]
            if cleaned and cleaned[-1] in scales
            else float(cleaned)
        )
    except ValueError:
        raise BadInputError(
            f"{text!r}: give a number with a unit, e.g. 800GB/s or 150TFLOPS"
        ) from None
    if not math.isfinite(number) or number <= 0:
        raise BadInputError(f"{text!r}: give a positive rate")
    return number


def choice(flag: str, *choices: str) -> Callable[[Any], str]:
    """One of ``choices`` (lower-cased), refused as ``--flag 'x': give a, b or c``."""

    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            listed = (
                ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
            )
            raise BadInputError(f"{flag} {value!r}: give {listed}")
        return text

    return parse


def parse_names(value: Any) -> Names:
    return value if isinstance(value, Names) else Names(_split(value))


def parse_precisions(value: Any) -> Precisions:
    if isinstance(value, Precisions):
        return value
    return Precisions(tuple(parse_precision(p) for p in _split(value)))


def parse_input(value: Any) -> TensorSpec:
    """``--input NAME:SHAPE:DTYPE`` (a config file's input table arrives already parsed)."""
    return value if isinstance(value, TensorSpec) else parse_tensor_spec(str(value))


def seconds_or_zero(value: Any) -> float:
    """A duration that may also be zero (``0``, ``0s``)."""
    if value in (0, "0", "0s"):
        return 0.0
    return parse_duration_s(value)


def duration_text(seconds: float) -> str:
    """A default in seconds as the flag text that help shows (``10s``)."""
    return f"{seconds:g}s"


def positive_int(what: str) -> Callable[[Any], int]:
    """A positive integer, refused as ``what must be a positive integer``."""

    def parse(value: Any) -> int:
        text = str(value).strip().removeprefix("+")
        if isinstance(value, bool) or not text.isdigit() or int(text) <= 0:
            raise BadInputError(f"{what} must be a positive integer, got {value!r}")
        return int(text)

    return parse


def duration_option(flag: str, help: str, default: float | str | None = None) -> Any:
    """A ``--flag 100ms``-style option, parsed to seconds while typer parses."""
    return typer.Option(default, flag, parser=parse_duration_s, metavar="DURATION", help=help)


def fraction_option(flag: str, help: str, default: float | str | None = None) -> Any:
    """A ``--flag 2%``-style option, parsed to a fraction in (0, 1) while typer parses."""
    return typer.Option(default, flag, parser=parse_fraction, metavar="FRACTION", help=help)
