"""The JSON form of accelscope's frozen dataclasses, declared by their field types.

The in-memory figures (a :class:`~accelscope.measurement.record.Measurement`, a doctor
``Breakdown``, a probe table...) are frozen dataclasses; what they store and print is what
pydantic makes of their annotated fields, as JSON: enums as their values, tuples as lists,
nested dataclasses as objects. Where a stored key differs from the field, the field says so
with ``Annotated[..., Field(serialization_alias=..., validation_alias=...)]``; a field that is
not stored says ``Field(exclude=True)``; a bound that may be infinite is :data:`Unbounded`
(:data:`FiniteOrNull` where NaN is stored as ``null`` too). So there is no hand-written
``to_dict`` to keep in step with the fields, and reading back (:func:`load`) validates through
the same types: keys a reader does not know are ignored and fields added later have defaults,
so documents stored by earlier versions still load.

Pydantic models (the documents) need none of this: they are dumped with ``model_dump``.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import PlainSerializer, TypeAdapter

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["FiniteOrNull", "Unbounded", "dump", "load"]

T = TypeVar("T")


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def _bounded_or_none(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


Unbounded = Annotated[float, PlainSerializer(_bounded_or_none, return_type=float | None)]
"""A float that may be infinite (a one-sided interval, a ratio over zero): JSON has no
infinity, so an unbounded value is stored as ``null``."""

FiniteOrNull = Annotated[float, PlainSerializer(_finite_or_none, return_type=float | None)]
"""A float that may be infinite or undefined (NaN): stored as ``null`` unless finite."""


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    # Building an adapter walks the class's annotations: once per class, not per value.
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def dump(value: DataclassInstance) -> dict[str, Any]:
    """``value`` (a dataclass) as JSON-ready plain data, in the shape its fields declare:
    exactly what a reader of its JSON text gets back (``json.loads``)."""
    data = _adapter(type(value)).dump_python(value, by_alias=True)
    # Through JSON text and back rather than pydantic's JSON mode: that mode writes an
    # infinity or NaN inside an untyped value (a ``dict[str, Any]`` of evidence) as null, and
    # an int held by a float field as a float; stored documents keep both as they are.
    plain: dict[str, Any] = json.loads(json.dumps(data))
    return plain


def load(cls: type[T], data: Any) -> T:
    """A ``cls`` validated from what :func:`dump` wrote (also after a JSON round trip)."""
    value: T = _adapter(cls).validate_python(data)
    return value
