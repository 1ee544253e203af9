"""Quantities with units: durations and percentages as users type them, and the bytes one
element of each precision takes."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

from accelscope.errors import BadInputError

__all__ = ["ELEMENT_BYTES", "format_seconds", "parse_duration_s", "parse_fraction"]

ELEMENT_BYTES: Mapping[str, float] = MappingProxyType(
    {
        "fp32": 4.0,
        "tf32": 4.0,
        "bf16": 2.0,
        "fp16": 2.0,
        "fp8": 1.0,
        "int8": 1.0,
        "int4": 0.5,
    }
)
"""Bytes one element takes in each precision, by its name (``fp32``, ``bf16``, ...; a torch
dtype name reads as one through :func:`accelscope.documents.normalise_dtype`). ``tf32`` is a
way to multiply fp32 tensors, stored as fp32; ``int4`` packs two elements into a byte."""

_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(us|µs|ms|s|sec|m|min|h|d|day|days|w|week|weeks)?\s*$"
)
_SCALE_S = {
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 7 * 86400.0,
    "week": 7 * 86400.0,
    "weeks": 7 * 86400.0,
}


def parse_duration_s(text: str | float | int) -> float:
    """``"15m"``, ``"100ms"``, ``"10s"``, ``"7d"``, ``"2w"``, ``"10"`` or a number (seconds) ->
    positive seconds."""
    if isinstance(text, bool):
        raise BadInputError(f"duration must be a number or text like 10s, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _DURATION.match(text)
        if not match:
            raise BadInputError(
                f"duration {text!r} not understood; use e.g. 100ms, 10s, 15m, 1h, 7d"
            )
        value = float(match.group(1)) * _SCALE_S[match.group(2) or "s"]
    if not math.isfinite(value) or value <= 0:
        raise BadInputError(f"duration must be positive, got {text!r}")
    return value


def parse_fraction(text: str | float | int) -> float:
    """``"2%"`` or ``0.02`` -> 0.02 (a fraction in (0, 1))."""
    if isinstance(text, bool):
        raise BadInputError(f"expected a fraction like 2% or 0.02, got {text!r}")
    if isinstance(text, str):
        stripped = text.strip()
        try:
            value = float(stripped.rstrip("%")) / (100.0 if stripped.endswith("%") else 1.0)
        except ValueError:
            raise BadInputError(f"expected a fraction like 2% or 0.02, got {text!r}") from None
    else:
        value = float(text)
    if not 0.0 < value < 1.0:
        raise BadInputError(f"fraction must be between 0 and 1 (exclusive), got {text!r}")
    return value


def format_seconds(seconds: float) -> str:
    """Human duration with a unit that keeps 3 significant digits (``12.3 ms``): the one home
    of the spelling, for views (through :mod:`accelscope.report.format`) and analysis notes."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
