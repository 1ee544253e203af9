"""The configuration space of a tune: ``--space FLAG=V1,V2,...`` axes (their full grid),
``--candidate FLAG=V,FLAG=V`` configurations added as they are, and the reference
(``--reference FLAG=V,...``; by default the engine's own defaults: no flag set).

Values are checked against what the engine accepts (:mod:`accelscope.tune.flags`) before any
server starts. A configuration's ``key`` (``max-num-seqs=8,dtype=float32``, flags in space
order) names it in the store, so ``--resume`` finds what was measured.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelscope.errors import BadInputError
from accelscope.tune.flags import Value

__all__ = ["DEFAULTS_KEY", "Config", "Space", "parse_assignments"]

DEFAULTS_KEY = "engine defaults"
"""The key of the empty configuration: the engine started with none of the space's flags."""

Converter = Callable[[str, str], Value]
"""(flag, text) -> the value the engine takes (one-line error otherwise)."""


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Config:
    """One configuration: flag values, in the order the flags were first named."""

    values: tuple[tuple[str, Value], ...] = ()

    @property
    def key(self) -> str:
        """``max-num-seqs=8,dtype=float32`` (``engine defaults`` when empty)."""
        if not self.values:
            return DEFAULTS_KEY
        return ",".join(f"{name}={_text(value)}" for name, value in self.values)

    def as_dict(self) -> dict[str, Value]:
        """Flag -> value."""
        return dict(self.values)

    def get(self, name: str) -> Value | None:
        """The value of ``name`` (None: the engine's default)."""
        return self.as_dict().get(name)

    def merged(self, base: Config) -> Config:
        """This configuration over ``base`` (this one's values win)."""
        own = self.as_dict()
        names = [n for n, _ in base.values] + [n for n, _ in self.values if n not in base.as_dict()]
        return Config(tuple((n, own.get(n, base.as_dict().get(n))) for n in names))  # type: ignore[misc]

    def differs_in(self, other: Config) -> set[str]:
        """The flags whose value differs from ``other``'s (a flag absent is the default)."""
        mine, theirs = self.as_dict(), other.as_dict()
        return {n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n)}


def parse_assignments(text: str, flag: str, convert: Converter) -> Config:
    """``FLAG=V,FLAG=V`` (``--candidate`` and ``--reference``) -> a configuration."""
    values: list[tuple[str, Value]] = []
    for part in str(text).split(","):
        name, sep, raw = part.partition("=")
        name = name.strip().removeprefix("--")
        if not sep or not name:
            raise BadInputError(f"{flag} {text!r}: give FLAG=VALUE pairs, e.g. max-num-seqs=8")
        if any(n == name for n, _ in values):
            raise BadInputError(f"{flag} {text!r}: {name} given twice")
        values.append((name, convert(name, raw)))
    return Config(tuple(values))


@dataclass(frozen=True)
class Space:
    """The axes (flag, values) whose grid is measured, configurations added as they are, and
    the reference every result is compared with."""

    axes: tuple[tuple[str, tuple[Value, ...]], ...]
    extra: tuple[Config, ...] = ()
    reference: Config = Config()

    @classmethod
    def parse(
        cls,
        spaces: Sequence[str],
        configs: Sequence[str],
        reference: str | None,
        convert: Converter,
    ) -> Space:
        """From the ``--space``, ``--candidate`` and ``--reference`` texts; one-line errors for
        an empty space, a flag given twice, an empty or repeated value."""
        axes: list[tuple[str, tuple[Value, ...]]] = []
        for text in spaces:
            name, sep, raw = str(text).partition("=")
            name = name.strip().removeprefix("--")
            if not sep or not name:
                raise BadInputError(
                    f"--space {text!r}: give FLAG=V1,V2,..., e.g. max-num-seqs=1,8,32"
                )
            parts = [p.strip() for p in raw.split(",")]
            if not raw.strip() or any(not p for p in parts):
                raise BadInputError(f"--space {text!r}: give at least one value, none empty")
            if any(n == name for n, _ in axes):
                raise BadInputError(f"--space {name}: given twice; list its values once")
            values = tuple(convert(name, p) for p in parts)
            if len(set(values)) != len(values):
                raise BadInputError(f"--space {text!r}: a value is repeated")
            axes.append((name, values))
        extra = tuple(parse_assignments(t, "--candidate", convert) for t in configs)
        space = cls(
            axes=tuple(axes),
            extra=extra,
            reference=parse_assignments(reference, "--reference", convert)
            if reference
            else Config(),
        )
        if not space.candidates():
            raise BadInputError(
                "the space is empty: give --space FLAG=V1,V2 (a grid) or --candidate FLAG=V,..."
            )
        return space

    def grid(self) -> list[Config]:
        """Every combination of the axes' values, in order."""
        if not self.axes:
            return []
        names = [name for name, _ in self.axes]
        return [
            Config(tuple(zip(names, combination, strict=True)))
            for combination in itertools.product(*(values for _, values in self.axes))
        ]

    def candidates(self) -> list[Config]:
        """The grid, then the added configurations (duplicates removed)."""
        found: dict[str, Config] = {}
        for config in [*self.grid(), *self.extra]:
            found.setdefault(config.key, config)
        return list(found.values())

    def configurations(self) -> list[Config]:
        """The reference first, then every candidate not equal to it."""
        return [self.reference, *(c for c in self.candidates() if c.key != self.reference.key)]

    def flags(self) -> list[str]:
        """Every flag the space, the added configurations or the reference set."""
        names: list[str] = []
        for config in [*self.configurations()]:
            names += [n for n, _ in config.values if n not in names]
        return names

    def describe(self) -> dict[str, list[str]]:
        """JSON-ready: each axis's values, the added configurations, the reference."""
        return {
            **{name: [_text(v) for v in values] for name, values in self.axes},
            **({"configs": [c.key for c in self.extra]} if self.extra else {}),
            "reference": [self.reference.key],
        }
