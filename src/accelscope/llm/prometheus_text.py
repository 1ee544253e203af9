"""The Prometheus text exposition format (version 0.0.4, and the OpenMetrics text it
resembles): :func:`parse_exposition`, a small, strict parser with no dependency, turns a
``/metrics`` answer into its :class:`Sample` lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Sample", "parse_exposition"]


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name{labels} value [timestamp]``. ``timestamp`` is as written (the
    text format's milliseconds, or OpenMetrics' seconds); ``None`` when the line has none."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0
    timestamp: float | None = None


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)
_TIMESTAMP = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_FIELDS = re.compile(r"[ \t]+")
_TYPES = frozenset(
    {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset"}
    | {"gaugehistogram"}
)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _blank(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """The label set that opens at ``line[pos] == "{"``; returns it and the index after ``}``."""
    labels: dict[str, str] = {}
    pos = _blank(line, pos + 1)
    while True:
        if pos >= len(line):
            raise ValueError("unterminated label set")
        if line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            raise ValueError(f"bad label name at column {pos + 1}")
        name = match.group()
        pos = _blank(line, match.end())
        if pos >= len(line) or line[pos] != "=":
            raise ValueError(f"label {name!r} has no '='")
        pos = _blank(line, pos + 1)
        if pos >= len(line) or line[pos] != '"':
            raise ValueError(f"label {name!r}: value is not quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= len(line):
                raise ValueError(f"label {name!r}: unterminated value")
            char = line[pos]
            if char == '"':
                pos += 1
                break
            if char == "\\":
                if pos + 1 >= len(line) or line[pos + 1] not in _ESCAPES:
                    raise ValueError(f"label {name!r}: bad escape sequence")
                chars.append(_ESCAPES[line[pos + 1]])
                pos += 2
                continue
            chars.append(char)
            pos += 1
        if name in labels:
            raise ValueError(f"label {name!r} appears twice")
        labels[name] = "".join(chars)
        pos = _blank(line, pos)
        if pos < len(line) and line[pos] == ",":
            pos = _blank(line, pos + 1)
        elif pos < len(line) and line[pos] != "}":
            raise ValueError(f"expected ',' or '}}' after label {name!r}")


def _sample(line: str) -> Sample:
    match = _METRIC_NAME.match(line)
    if match is None:
        raise ValueError("does not start with a metric name")
    name = match.group()
    pos = match.end()
    labels: dict[str, str] = {}
    after = _blank(line, pos)
    if after < len(line) and line[after] == "{":
        labels, pos = _labels(line, after)
    if pos < len(line) and line[pos] not in " \t":
        raise ValueError(f"{name}: unexpected {line[pos]!r}")
    rest = _FIELDS.split(line[pos:].strip(" \t"))
    if rest == [""]:
        raise ValueError(f"{name}: no value")
    if len(rest) > 2:
        raise ValueError(f"{name}: unexpected text after the value")
    if _FLOAT.fullmatch(rest[0]) is None:
        raise ValueError(f"{name}: {rest[0]!r} is not a number")
    timestamp: float | None = None
    if len(rest) == 2:
        if _TIMESTAMP.fullmatch(rest[1]) is None:
            raise ValueError(f"{name}: {rest[1]!r} is not a timestamp")
        timestamp = float(rest[1])
    return Sample(name, labels, float(rest[0]), timestamp)


def _comment(line: str) -> None:
    """Validate a ``# HELP`` / ``# TYPE`` line; any other comment is free text."""
    parts = line[1:].split(None, 2)
    if not parts or parts[0] not in ("HELP", "TYPE"):
        return
    if len(parts) < 2 or _METRIC_NAME.fullmatch(parts[1]) is None:
        raise ValueError(f"# {parts[0]} without a valid metric name")
    if parts[0] == "TYPE" and (len(parts) < 3 or parts[2].strip() not in _TYPES):
        raise ValueError(f"# TYPE {parts[1]}: unknown type")


def parse_exposition(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition, in order. Comments, ``# HELP`` and
    ``# TYPE`` lines and blank lines are skipped (HELP/TYPE are checked); label values keep
    their escapes decoded (``\\\\``, ``\\"``, ``\\n``); values may be ``+Inf``, ``-Inf``,
    ``NaN``; a trailing timestamp is kept. Sample names are as written: a counter's
    ``_total`` and ``_created`` samples are distinct names. Raises :class:`ValueError`, naming
    the line, on anything else."""
    samples: list[Sample] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r").strip(" \t")
        if not line:
            continue
        try:
            if line.startswith("#"):
                _comment(line)
            else:
                samples.append(_sample(line))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return samples
