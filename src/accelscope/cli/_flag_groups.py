"""Groups of flags declared once and taken whole by the commands that share them.

A group is a frozen dataclass whose fields carry their typer option (:func:`flag`). A command
names the group as one parameter (``workload: WorkloadFlags = GROUP``); :func:`with_flag_groups`
rewrites the command's signature so typer sees each field as its own flag, and hands the
command one built group. The flag's name, parser, help and default live in the group alone,
and so does what the flags mean together (a method of the group), so two commands that share
a flag cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["GROUP", "FlagGroup", "flag", "with_flag_groups"]

GROUP: Any = object()
"""The default a group parameter is declared with (``workload: WorkloadFlags = GROUP``), so it
can stand among the flags where its flags should be listed; the group replaces it."""


def flag(option: Any) -> Any:
    """A group field that is the flag ``option`` (a ``typer.Option``)."""
    return dataclasses.field(metadata={"option": option})


class FlagGroup:
    """Marks a frozen dataclass as a group of flags (each field made with :func:`flag`)."""

    is_flag_group: ClassVar[bool] = True


def _group_class(annotation: Any) -> type[Any] | None:
    if (
        isinstance(annotation, type)
        and issubclass(annotation, FlagGroup)
        and dataclasses.is_dataclass(annotation)
    ):
        return annotation
    return None


def with_flag_groups(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with each parameter typed as a :class:`FlagGroup` spread into its flags for
    typer, and gathered back into the group when the command is called."""
    hints = typing.get_type_hints(command)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[Any], tuple[str, ...]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        group = _group_class(hints.get(parameter.name))
        if group is None:
            parameters.append(parameter.replace(annotation=hints.get(parameter.name)))
            continue
        field_hints = typing.get_type_hints(group)
        fields = dataclasses.fields(group)
        if parameter.default is not GROUP:
            raise TypeError(f"{command.__name__}: declare {parameter.name} = GROUP")
        groups[parameter.name] = (group, tuple(f.name for f in fields))
        for field in fields:
            if "option" not in field.metadata:
                raise TypeError(f"{group.__name__}.{field.name} is not declared with flag()")
            parameters.append(
                inspect.Parameter(
                    field.name,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=field.metadata["option"],
                    annotation=field_hints[field.name],
                )
            )
    names = [p.name for p in parameters]
    if len(names) != len(set(names)):
        clash = sorted({n for n in names if names.count(n) > 1})
        raise TypeError(f"{command.__name__}: flags declared twice: {', '.join(clash)}")

    @functools.wraps(command)
    def spread(**values: Any) -> None:
        for name, (group, fields) in groups.items():
            values[name] = group(**{field: values.pop(field) for field in fields})
        command(**values)

    signature = inspect.Signature(parameters, return_annotation=None)
    spread.__signature__ = signature  # type: ignore[attr-defined]
    spread.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
    return spread
