"""Durations and fractions as users type them (flags, config files, the docs' examples), and
the one table of element sizes by precision."""

from __future__ import annotations

import pytest

from accelscope.documents import DTYPES
from accelscope.errors import BadInputError
from accelscope.plan.catalog import DTYPES as CATALOG_DTYPES
from accelscope.spec import Precision
from accelscope.units import ELEMENT_BYTES, parse_duration_s, parse_fraction


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250us", 250e-6),
        ("100ms", 0.1),
        ("10s", 10.0),
        ("10", 10.0),
        ("1.5 min", 90.0),
        ("15m", 900.0),
        ("1h", 3600.0),
        ("7d", 7 * 86400.0),  # the README's `audit --since 7d`
        ("1day", 86400.0),
        ("2 days", 2 * 86400.0),
        ("2w", 14 * 86400.0),
        ("1week", 7 * 86400.0),
        ("0.5weeks", 3.5 * 86400.0),
        (30, 30.0),
    ],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["7x", "d", "7dd", "-1d", "0d", "1y", "7 d s", True])
def test_bad_durations_are_one_line(text: str | bool) -> None:
    with pytest.raises(BadInputError) as raised:
        parse_duration_s(text)
    assert "\n" not in raised.value.message


def test_fractions() -> None:
    assert parse_fraction("2%") == pytest.approx(0.02)
    assert parse_fraction(0.25) == 0.25
    with pytest.raises(BadInputError):
        parse_fraction("100%")


def test_every_precision_has_one_element_size() -> None:
    assert dict(ELEMENT_BYTES) == {
        "fp32": 4,
        "tf32": 4,
        "bf16": 2,
        "fp16": 2,
        "fp8": 1,
        "int8": 1,
        "int4": 0.5,
    }
    named = {*Precision, *DTYPES, *CATALOG_DTYPES}  # a configuration's, a ceiling's, a catalog's
    assert named <= set(ELEMENT_BYTES)
    with pytest.raises(TypeError):
        ELEMENT_BYTES["fp64"] = 8  # type: ignore[index]  # one table, not one copy per user
