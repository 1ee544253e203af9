"""Validating what accelscope reads with pydantic models, and the one conversion of a
:class:`pydantic.ValidationError` into the one-line :class:`~accelscope.errors.BadInputError`
every reader raises: ``<what>: field '<path>': <problem>``, e.g.
``store document 'capacity' of run 7f3a: field 'capacity_qps': must be a non-negative number,
got -1.0``. ``what`` names the file or document and the entry in it; the path names the field
(``operators[0].flops``, ``sources.price_usd_per_hour``).

The annotated number types below refuse booleans and text (``true`` or ``"8"`` is not a
number) and non-finite values; pydantic's own coercions would accept them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, StringConstraints, ValidationError
from pydantic_core import ErrorDetails

from accelscope.errors import BadInputError

__all__ = [
    "Count",
    "FieldProblem",
    "NonNegativeNumber",
    "Number",
    "PositiveCount",
    "PositiveNumber",
    "Text",
    "bad_input",
    "first_problem",
    "validate",
]

M = TypeVar("M", bound=BaseModel)
_MORE_THAN_ONE = " (and {count} more problem{s})"


class FieldProblem(ValueError):
    """Raised by a model's own validator to blame ``field`` (a dotted path relative to the
    model being validated) for ``problem``; :func:`bad_input` puts it in the message."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field, self.problem = field, problem


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, got {_show(value)}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {_show(value)}")
    return float(value)


def _positive(value: Any) -> float:
    if _number(value) <= 0:
        raise ValueError(f"must be a positive number, got {_show(value)}")
    return float(value)


def _non_negative(value: Any) -> float:
    if _number(value) < 0:
        raise ValueError(f"must be a non-negative number, got {_show(value)}")
    return float(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be an integer, got {_show(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"must be an integer, got {_show(value)}")
    return int(value)


def _count(value: Any) -> int:
    if _integer(value) < 0:
        raise ValueError(f"must be a non-negative integer, got {_show(value)}")
    return int(value)


def _positive_count(value: Any) -> int:
    if _integer(value) <= 0:
        raise ValueError(f"must be a positive integer, got {_show(value)}")
    return int(value)


Number = Annotated[float, BeforeValidator(_number)]
"""A finite number (int or float; not a bool, not text)."""
PositiveNumber = Annotated[float, BeforeValidator(_positive)]
NonNegativeNumber = Annotated[float, BeforeValidator(_non_negative)]
Count = Annotated[int, BeforeValidator(_count)]
"""An integer >= 0 (``2.0`` is accepted as 2; ``2.5``, ``true`` and ``"2"`` are not)."""
PositiveCount = Annotated[int, BeforeValidator(_positive_count)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
"""Non-empty text (surrounding whitespace removed)."""


def _path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if part == "[key]":
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _bound(sign: str, limit: Any, value: Any) -> str:
    return f"must be {sign} {limit}, got {_show(value)}"


def _problem(error: ErrorDetails, at_root: bool) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    match kind:
        case "missing":
            return "missing"
        case "extra_forbidden":
            return "unknown field (typo?)"
        case "greater_than":
            return _bound(">", ctx.get("gt"), value)
        case "greater_than_equal":
            return _bound(">=", ctx.get("ge"), value)
        case "less_than":
            return _bound("<", ctx.get("lt"), value)
        case "less_than_equal":
            return _bound("<=", ctx.get("le"), value)
        case "finite_number":
            return f"must be a finite number, got {_show(value)}"
        case "int_type" | "int_parsing" | "int_from_float":
            return f"must be an integer, got {_show(value)}"
        case "float_type" | "float_parsing":
            return f"must be a number, got {_show(value)}"
        case "bool_type" | "bool_parsing":
            return f"must be true or false, got {_show(value)}"
        case "string_type":
            return f"must be text, got {_show(value)}"
        case "string_too_short":
            return "must be non-empty text"
        case "literal_error" | "enum":
            return f"must be {ctx.get('expected')}, got {_show(value)}"
        case "dict_type" | "model_type" | "model_attributes_type" | "dataclass_type":
            if at_root:
                return f"not a JSON object (got {type(value).__name__})"
            return f"must be a table of names and values, got {_show(value)}"
        case "list_type" | "tuple_type":
            return f"must be a list, got {_show(value)}"
        case "too_short":
            if ctx.get("min_length") == 1:
                return "is empty"
            return f"needs at least {ctx.get('min_length')} items, got {ctx.get('actual_length')}"
        case "too_long":
            return f"has more than {ctx.get('max_length')} items"
        case "value_error" | "assertion_error":
            return str(ctx.get("error", error["msg"]))
    message = error["msg"]
    return message[:1].lower() + message[1:]


def first_problem(error: ValidationError) -> tuple[tuple[int | str, ...], str, int]:
    """``error``'s first problem (an unknown field before the others: a typo also makes the
    field it meant "missing"): its location, what is wrong, and how many other problems."""
    errors = error.errors()
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    cause = first.get("ctx", {}).get("error")
    loc = tuple(first["loc"])
    if isinstance(cause, FieldProblem) and cause.field:
        loc += tuple(cause.field.split("."))
    return loc, _problem(first, at_root=not loc), len(errors) - 1


def bad_input(error: ValidationError, what: str) -> BadInputError:
    """The one-line error for ``error``: ``what``, the field of its first problem, the
    problem, and how many more there are."""
    loc, problem, more = first_problem(error)
    path = _path(loc)
    where = f"field {path!r}: " if path else ""
    tail = _MORE_THAN_ONE.format(count=more, s="s" if more > 1 else "") if more else ""
    return BadInputError(f"{what}: {where}{problem}{tail}")


def validate(model: type[M], data: object, what: str, context: dict[str, Any] | None = None) -> M:
    """``data`` validated as ``model`` (``context`` is handed to its validators); a
    :class:`BadInputError` naming ``what`` if it is not."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise bad_input(exc, what) from None
