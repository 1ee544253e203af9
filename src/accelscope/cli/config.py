"""The config file (TOML): the flags of ``measure``, ``bench`` and ``load`` can be set there
(not the per-run switches: --json, --quiet, --no-store, --resume, --refresh-probes); flags win
over the file.

[model]                                 # measure, bench and load
ref = "resnet50"                        # zoo name, file.py:fn, module:fn, .onnx, .pt2
inputs = ["x:N,3,224,224:float32"]      # or tables: {name=, shape=[...], dtype=}
weights = "weights.safetensors"
trust_model_code = false

[run]                                   # accelscope measure
backend = "eager"
precision = "fp32"
batch = [1, 8]                          # or 8, or "1,8"
threads = 2
device = "cpu"
budget = "10s"
target_ci = "2%"
store = ".accelscope/results.db"

[bench]                                 # accelscope bench
backends = ["eager", "compile"]         # or "eager,compile"
budget = "15m"

[load]                                  # accelscope load
scenario = "server"
sla_p99 = "100ms"
batch = 8                               # the dynamic batcher's maximum batch
options = ["channels_last=true"]
min_duration = "10s"
batching = false                        # --no-batching

A command's section holds its flags by their names with ``_`` for ``-`` (``--sla-p99`` is
``sla_p99``; ``bench --backend`` is ``backends``). ``--config`` is an eager option: its callback
reads the file and sets the command's ``default_map``, so a file value is converted and
validated by the flag's own type, exactly as if it had been typed, and is used only where the
flag is not given. A TOML list stands for a comma-separated flag (``batch = [1, 8]`` is
``--batch 1,8``) or for a repeated one (``options``, ``plugins``, ``inputs``). An unknown
section or key, or a value of the wrong type, is one ``ConfigError`` naming file and key.
"""

from __future__ import annotations

import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import typer

from accelscope.cli._main import USAGE_ERRORS
from accelscope.cli._types import COMMA_TYPES
from accelscope.errors import AccelscopeError, BadInputError, ConfigError
from accelscope.spec import TensorSpec

__all__ = ["SECTIONS", "config_option"]

SECTIONS = ("model", "run", "bench", "load", "llm", "tune")
"""The known sections; a command reads ``[model]`` and its own, and leaves the others."""

MODEL_KEYS = {
    "ref": "model",
    "inputs": "inputs",
    "weights": "weights",
    "trust_model_code": "trust_model_code",
}
"""``[model]`` keys -> parameter names."""

NOT_IN_FILE = frozenset(
    {"config", "no_store", "as_json", "quiet", "resume", "refresh_probes", *MODEL_KEYS.values()}
)
"""Parameters that are not keys of a command's own section (per-invocation switches)."""

_CONVERSION_ERRORS: tuple[type[BaseException], ...] = (*USAGE_ERRORS, ValueError, TypeError)


def config_option(section: str) -> Any:
    """The ``--config FILE`` option of a command whose flags live in ``[section]``."""

    def read(ctx: typer.Context, param: typer.CallbackParam, path: Path | None) -> Path | None:
        if path is not None and not ctx.resilient_parsing:
            ctx.default_map = {**(ctx.default_map or {}), **file_defaults(ctx, path, section)}
        return path

    return typer.Option(
        None, "--config", help="TOML config; flags override it.", callback=read, is_eager=True
    )


def file_defaults(ctx: typer.Context, path: Path, section: str) -> dict[str, Any]:
    """The ``default_map`` for the command of ``ctx``: ``[model]`` and ``[section]`` of the
    file, keyed by parameter name, each value checked by its parameter's own conversion."""
    data = _read(path)
    params = {p.name: p for p in ctx.command.params if p.name}
    assert ctx.command.callback is not None
    # the callback's own annotations: a command with flag groups has them per flag (typer's
    # wrapper copies them), where the function it wraps has one per group
    hints = typing.get_type_hints(ctx.command.callback)
    own = {name: name for name in params if name not in NOT_IN_FILE}
    found: dict[str, Any] = {}
    for name, keys in (("model", MODEL_KEYS), (section, own)):
        for key, raw in data.get(name, {}).items():
            where = f"{path}: {name}.{key}"
            if key not in keys or keys[key] not in params:
                known = ", ".join(k for k in keys if keys[k] in params)
                raise ConfigError(f"{path}: unknown key {name}.{key}; known keys: {known}")
            target = keys[key]
            value = _inputs(where, raw) if key == "inputs" else raw
            _check_kind(where, value, hints[target])
            try:
                params[target].process_value(ctx, value)  # the flag's own conversion
            except AccelscopeError as exc:
                raise ConfigError(f"{where}: {exc.message}") from exc
            except _CONVERSION_ERRORS as exc:
                message = getattr(exc, "message", None) or str(exc)
                raise ConfigError(f"{where}: {message} (got {raw!r})") from exc
            found[target] = value
    return found


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    for name, values in data.items():
        if name not in SECTIONS:
            known = ", ".join(f"[{s}]" for s in SECTIONS)
            raise ConfigError(f"{path}: unknown section [{name}]; known sections: {known}")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {name} must be a [{name}] table")
    return data


def _kind(value: Any) -> str:
    names = {bool: "true/false", int: "integer", float: "number", str: "string", list: "list"}
    return names.get(type(value), type(value).__name__)


def _check_kind(where: str, value: Any, annotation: Any) -> None:
    """Reject what no flag text could give: true/false for a non-flag, a string for a flag,
    a list for a single value, a single value for a repeatable flag. The rest is left to the
    parameter's conversion."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # X | None
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    expected = None
    if annotation is bool:
        if not isinstance(value, bool):
            expected = "true or false"
    elif typing.get_origin(annotation) is list:
        if not isinstance(value, list) or not all(
            isinstance(item, str | TensorSpec) for item in value
        ):
            expected = "a list of strings"
    elif isinstance(value, bool) or not isinstance(value, str | int | float | list):
        expected = "a string or a number"
    elif isinstance(value, list):
        if annotation not in COMMA_TYPES:
            expected = "a string or a number"
        elif not all(isinstance(v, str | int) and not isinstance(v, bool) for v in value):
            expected = "a list of strings or integers"
    if expected is not None:
        raise ConfigError(f"{where} must be {expected}, got {_kind(value)} {value!r}")


def _inputs(where: str, raw: Any) -> Any:
    """``[model] inputs``: a table ``{name=, shape=[...], dtype=, low=, high=}`` becomes a
    ``TensorSpec``; a string stays the flag text ``NAME:SHAPE:DTYPE``."""
    if not isinstance(raw, list):
        return raw
    specs: list[Any] = []
    for item in raw:
        if not isinstance(item, dict):
            specs.append(item)
            continue
        unknown = set(item) - {"name", "shape", "dtype", "low", "high"}
        if unknown:
            raise ConfigError(f"{where}: unknown input key(s): {', '.join(sorted(unknown))}")
        shape = item.get("shape")
        if not isinstance(shape, list) or not shape:
            raise ConfigError(f"{where}: input shape must be a non-empty list like ['N', 3, 224]")
        try:
            specs.append(
                TensorSpec(
                    name=str(item.get("name", "")),
                    shape=tuple(shape),
                    dtype=str(item.get("dtype", "float32")),
                    low=item.get("low"),
                    high=item.get("high"),
                )
            )
        except BadInputError as exc:
            raise ConfigError(f"{where}: {exc.message}") from exc
    return specs
