"""The flags an LLM server accepts, read from its own ``--help``, and a space's values checked
against them before anything starts.

Two help formats are read: argparse's usage line (vLLM: ``[--max-num-seqs MAX_NUM_SEQS]``,
``[--enable-prefix-caching | --no-enable-prefix-caching]``, ``[--dtype {auto,bfloat16,...}]``)
and click's option list (``transformers serve``: ``--cb-num-blocks INTEGER``,
``--continuous-batching / --no-continuous-batching``, ``--reasoning [on|off|auto]``). argparse
does not print a value's type, so an engine may add the types it knows (``max-num-seqs`` is an
integer); an unknown flag is refused with the nearest names the engine has.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Literal

from accelscope.errors import BadInputError

__all__ = ["FlagKind", "FlagSpec", "Value", "convert", "parse_help", "render"]

FlagKind = Literal["bool", "int", "float", "choice", "text"]
Value = bool | int | float | str

_ARGPARSE = re.compile(
    r"\[--(?P<name>[a-z0-9][a-z0-9-]*)"
    r"(?P<neg> \| --no-(?P=name))?"
    r"(?: \{(?P<choices>[^}]*)\}| (?P<metavar>[A-Z][A-Z0-9_]*))?"
)
_CLICK = re.compile(
    r"^\s+--(?P<name>[a-z0-9][a-z0-9-]*)"
    r"(?P<neg> / --no-(?P=name))?"
    r"(?: \[(?P<choices>[^\]]*)\]| (?P<type>INTEGER|FLOAT|TEXT|PATH|FILENAME|[A-Z]+))?",
    re.MULTILINE,
)
_CLICK_TYPES: dict[str, FlagKind] = {"INTEGER": "int", "FLOAT": "float"}
_TRUE = frozenset({"on", "true", "yes", "1"})
_FALSE = frozenset({"off", "false", "no", "0"})


@dataclass(frozen=True)
class FlagSpec:
    """One flag: its name (without ``--``), kind and, for a choice, the values allowed."""

    name: str
    kind: FlagKind
    choices: tuple[str, ...] = ()


def parse_help(text: str, types: dict[str, FlagKind] | None = None) -> dict[str, FlagSpec]:
    """Every flag of a ``--help`` text (argparse or click), by name; ``types`` sets the kind
    of flags whose help shows no type (argparse metavars)."""
    found: dict[str, FlagSpec] = {}
    known = types or {}
    for match in _ARGPARSE.finditer(text):
        name = match.group("name")
        if match.group("neg") or (not match.group("choices") and not match.group("metavar")):
            found[name] = FlagSpec(name, "bool")
        elif match.group("choices"):
            choices = tuple(c.strip() for c in match.group("choices").split(","))
            found[name] = FlagSpec(name, "choice", choices)
        else:
            found[name] = FlagSpec(name, known.get(name, "text"))
    for match in _CLICK.finditer(text):
        name = match.group("name")
        if name in found:
            continue
        if match.group("neg") or not (match.group("choices") or match.group("type")):
            found[name] = FlagSpec(name, "bool")
        elif match.group("choices"):
            found[name] = FlagSpec(name, "choice", tuple(match.group("choices").split("|")))
        else:
            kind = _CLICK_TYPES.get(match.group("type"), known.get(name, "text"))
            found[name] = FlagSpec(name, kind)
    return found


def unknown_flag(name: str, flags: dict[str, FlagSpec], engine: str) -> BadInputError:
    """The one-line error for a flag the engine does not have, with the nearest names."""
    near = difflib.get_close_matches(name, flags, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return BadInputError(f"--space {name}: {engine} has no --{name}{hint}")


def convert(spec: FlagSpec, text: str, engine: str) -> Value:
    """One value of the space for ``spec``: ``on``/``off`` (also true/false/yes/no/1/0) for a
    switch, a number of the right kind, one of the choices; one line naming the flag and what
    it takes otherwise."""
    raw = str(text).strip()
    where = f"--space {spec.name}={raw}"
    if spec.kind == "bool":
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise BadInputError(f"{where}: {engine}'s --{spec.name} is a switch: give on or off")
    if spec.kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise BadInputError(f"{where}: {engine}'s --{spec.name} takes an integer") from None
    if spec.kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise BadInputError(f"{where}: {engine}'s --{spec.name} takes a number") from None
        if not math.isfinite(value):
            raise BadInputError(f"{where}: {engine}'s --{spec.name} takes a finite number")
        return value
    if spec.kind == "choice" and raw not in spec.choices:
        listed = ", ".join(spec.choices[:12]) + (", ..." if len(spec.choices) > 12 else "")
        raise BadInputError(f"{where}: {engine}'s --{spec.name} takes one of {listed}")
    if not raw:
        raise BadInputError(f"{where}: give a value")
    return raw


def render(name: str, value: Value) -> list[str]:
    """The command-line words of ``--name value`` (a switch: ``--name`` or ``--no-name``)."""
    if isinstance(value, bool):
        return [f"--{name}" if value else f"--no-{name}"]
    return [f"--{name}", str(value)]
