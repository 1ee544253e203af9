"""The one home of number formatting in views and reports: durations, rates, bytes, money."""

from __future__ import annotations

from typing import Any

from accelscope.units import format_seconds

__all__ = ["format_bytes", "format_seconds", "money_usd", "ms", "percent", "si_rate"]


def ms(seconds: float) -> str:
    """Milliseconds without the unit, 3-4 significant digits (``12.35``, ``123.4``, ``0.0123``)."""
    value = seconds * 1e3
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"


def format_bytes(count: float) -> str:
    """Human size in binary units (``1.5 GiB``)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def si_rate(value: float | None, unit: str = "FLOP/s") -> str:
    """A rate with an SI prefix (``1.23 TFLOP/s``); ``—`` when not measured."""
    if value is None:
        return "—"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.1f} {unit}"


def money_usd(value: Any) -> str:
    """US dollars: whole dollars from $100, cents below; ``—`` when unknown."""
    if value is None:
        return "—"
    amount = float(value)
    return f"${amount:,.0f}" if amount >= 100 else f"${amount:,.2f}"


def percent(value: Any) -> str:
    """A fraction as a whole percentage (``0.42`` → ``42%``); ``—`` when unknown."""
    return "—" if value is None else f"{float(value):.0%}"
