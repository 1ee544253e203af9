"""Flag types: each flag's text becomes its real value while typer parses (``parser=``), so a
config file value (``default_map``) goes through exactly the same conversion as the flag."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

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


COMMA_TYPES = (Sizes, Names, Precisions)
"""Flag types whose config file value may be a TOML list."""


def parse_sizes(value: Any) -> Sizes:
    return value if isinstance(value, Sizes) else Sizes(parse_batch_sizes(_text(value)))


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
