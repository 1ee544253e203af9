"""Parsing of the plan command's quantities: rates, token counts, money, percentages."""

from __future__ import annotations

import math
import re

from accelscope.errors import BadInputError

__all__ = ["parse_count", "parse_money", "parse_percent", "parse_rate_per_s", "parse_tokens"]

_NUMBER = r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
_RATE = re.compile(rf"^\s*{_NUMBER}\s*([kKmM]?)\s*(qps|/s|rps|per\s*s(?:ec(?:ond)?)?)?\s*$")
_COUNT = re.compile(rf"^\s*{_NUMBER}\s*([kKmMbBgGtT]?)\s*$")
_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_BINARY = {"": 1, "k": 1024, "m": 1024**2}


def _finite(value: float, text: object, what: str, *, allow_zero: bool = False) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise BadInputError(f"{what} must be {kind}, got {text!r}")
    return value


def parse_rate_per_s(text: str | float, what: str = "rate") -> float:
    """``"300qps"``, ``"300/s"``, ``"1.5k qps"`` or ``300`` -> 300.0 (per second, > 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return _finite(float(text), text, what)
    match = _RATE.match(str(text))
    if not match:
        raise BadInputError(f"{what} {text!r} not understood; use e.g. 300qps, 300/s or 1.5k")
    value = float(match.group(1)) * _DECIMAL[match.group(2).lower()]
    return _finite(value, text, what)


def parse_count(text: str | float, what: str = "count") -> float:
    """Decimal counts: ``"500M"`` -> 5e8, ``"2B"``/``"2G"`` -> 2e9, ``"1e9"`` -> 1e9 (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return _finite(float(text), text, what)
    match = _COUNT.match(str(text))
    if not match:
        raise BadInputError(f"{what} {text!r} not understood; use e.g. 500M, 2B or 2e9")
    return _finite(float(match.group(1)) * _DECIMAL[match.group(2).lower()], text, what)


def parse_tokens(text: str | int, what: str = "context") -> int:
    """Context lengths in tokens, binary suffixes as models use them: ``"32k"`` -> 32768."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise BadInputError(f"{what} must be a positive number of tokens, got {text!r}")
        return text
    match = _COUNT.match(str(text))
    suffix = match.group(2).lower() if match else ""
    if not match or suffix not in _BINARY:
        raise BadInputError(f"{what} {text!r} not understood; use e.g. 8192, 8k or 32k")
    value = float(match.group(1)) * _BINARY[suffix]
    if value != int(value) or value < 1:
        raise BadInputError(f"{what} must be a whole, positive number of tokens, got {text!r}")
    return int(value)


def parse_money(text: str | float, what: str = "price") -> float:
    """``"$2.50"``, ``"2.5"`` -> 2.5 dollars (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return _finite(float(text), text, what)
    try:
        value = float(str(text).strip().lstrip("$").strip())
    except ValueError:
        raise BadInputError(f"{what} {text!r} is not a number of dollars") from None
    return _finite(value, text, what)


def parse_percent(text: str | float, what: str = "percentage", maximum: float = 10.0) -> float:
    """``"20%"`` or ``0.2`` -> 0.2; zero allowed; at most ``maximum`` (as a fraction)."""
    if isinstance(text, bool):
        raise BadInputError(f"{what} must be like 20% or 0.2, got {text!r}")
    if isinstance(text, int | float):
        value = float(text)
    else:
        stripped = text.strip()
        try:
            value = float(stripped.rstrip("%")) / (100.0 if stripped.endswith("%") else 1.0)
        except ValueError:
            raise BadInputError(f"{what} must be like 20% or 0.2, got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value <= maximum:
        raise BadInputError(f"{what} must be between 0% and {maximum:.0%}, got {text!r}")
    return value
