"""The config file (TOML): every ``measure`` flag can be set there; flags win over the file.

[model]
ref = "resnet50"                        # zoo name, file.py:fn, module:fn, .onnx, .pt2
inputs = ["x:N,3,224,224:float32"]      # or tables: {name=, shape=[...], dtype=}
weights = "weights.safetensors"
trust_model_code = false

[run]
backend = "eager"
precision = "fp32"
batch = [1, 8]                          # or 8, or "1,8"
threads = 2
device = "cpu"
budget = "10s"
target_ci = "2%"
store = ".accelscope/results.db"

[load]                                  # accelscope load (flags win; same names, _ for -)
scenario = "server"
sla_p99 = "100ms"
backend = "compile"
precision = "int8"
batch = 8                               # the dynamic batcher's maximum batch
options = ["channels_last=true"]
min_duration = "10s"
min_queries = 1000
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from accelscope.errors import BadInputError, ConfigError
from accelscope.spec import TensorSpec, parse_batch_sizes, parse_tensor_spec

__all__ = ["CONFIG_KEYS", "load_bench_config", "load_config", "load_load_config"]

CONFIG_KEYS: dict[str, dict[str, tuple[type, ...]]] = {
    "model": {
        "ref": (str,),
        "inputs": (list,),
        "weights": (str,),
        "trust_model_code": (bool,),
    },
    "run": {
        "backend": (str,),
        "precision": (str,),
        "batch": (int, str, list),
        "threads": (int,),
        "device": (str,),
        "budget": (str, int, float),
        "target_ci": (str, float),
        "store": (str,),
        "seed": (int,),
    },
    "bench": {
        "backends": (str, list),
        "precisions": (str, list),
        "batch": (int, str, list),
        "threads": (int, str, list),
        "device": (str,),
        "options": (list,),
        "force_precision": (bool,),
        "sla_p99": (str, int, float),
        "max_accuracy_drop": (str, float, int),
        "strategy": (str,),
        "budget": (str, int, float),
        "measure_budget": (str, int, float),
        "timeout": (str, int, float),
        "accuracy_samples": (int,),
        "plugins": (list,),
        "report": (str,),
        "store": (str,),
        "seed": (int,),
        "eval_data": (str,),
        "metric": (str,),
        "confirm_rounds": (int,),
    },
    "load": {
        "scenario": (str,),
        "sla_p99": (str, int, float),
        "backend": (str,),
        "precision": (str,),
        "batch": (int,),
        "threads": (int,),
        "device": (str,),
        "options": (list,),
        "from_run": (str,),
        "rate": (int, float),
        "search": (bool,),
        "batching": (bool,),
        "max_delay": (str, int, float),
        "min_duration": (str, int, float),
        "min_queries": (int,),
        "seed": (int,),
        "burstiness_cv": (int, float),
        "query_timeout": (str, int, float),
        "report": (str,),
        "store": (str,),
    },
}


def _type_names(kinds: tuple[type, ...]) -> str:
    names = {str: "string", int: "integer", float: "number", bool: "true/false", list: "list"}
    return " or ".join(names[k] for k in kinds)


def _check_types(path: Path, data: dict[str, Any]) -> None:
    for section, values in data.items():
        if section not in CONFIG_KEYS:
            known = ", ".join(f"[{name}]" for name in CONFIG_KEYS)
            raise ConfigError(f"{path}: unknown section [{section}]; known sections: {known}")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section} must be a [{section}] table")
        for key, value in values.items():
            allowed = CONFIG_KEYS[section]
            if key not in allowed:
                raise ConfigError(
                    f"{path}: unknown key {section}.{key}; known keys: {', '.join(allowed)}"
                )
            kinds = allowed[key]
            is_bool = isinstance(value, bool)
            if (is_bool and bool not in kinds) or not isinstance(value, kinds):
                raise ConfigError(
                    f"{path}: {section}.{key} must be a {_type_names(kinds)}, "
                    f"got {type(value).__name__} {value!r}"
                )


def _inputs(path: Path, raw: list[Any]) -> tuple[TensorSpec, ...]:
    specs: list[TensorSpec] = []
    for item in raw:
        try:
            if isinstance(item, str):
                specs.append(parse_tensor_spec(item))
            elif isinstance(item, dict):
                unknown = set(item) - {"name", "shape", "dtype", "low", "high"}
                if unknown:
                    raise ConfigError(f"unknown input key(s): {', '.join(sorted(unknown))}")
                shape = item.get("shape")
                if not isinstance(shape, list) or not shape:
                    raise ConfigError("input shape must be a non-empty list like ['N', 3, 224]")
                specs.append(
                    TensorSpec(
                        name=str(item.get("name", "")),
                        shape=tuple(shape),
                        dtype=str(item.get("dtype", "float32")),
                        low=item.get("low"),
                        high=item.get("high"),
                    )
                )
            else:
                raise ConfigError("each input must be a string or a table")
        except BadInputError as exc:
            raise ConfigError(f"{path}: model.inputs: {exc}") from exc
    return tuple(specs)


def _csv(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def load_bench_config(path: Path) -> dict[str, Any]:
    """The ``[model]`` and ``[bench]`` sections as flat keys for ``accelscope bench``; list
    values become comma-separated text, exactly as the flags take them."""
    data = _read(path)
    flat = _model_keys(path, data.get("model", {}))
    for key, value in data.get("bench", {}).items():
        if key in ("options", "plugins"):
            if not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{path}: bench.{key} must be a list of strings")
            flat[key] = tuple(value)
        elif key in ("backends", "precisions", "batch", "threads"):
            flat[key] = _csv(value)
        elif key in ("report", "store", "eval_data"):
            flat[key] = Path(value)
        else:
            flat[key] = value
    return flat


def load_load_config(path: Path) -> dict[str, Any]:
    """The ``[model]`` and ``[load]`` sections as flat keys for ``accelscope load`` (the flag
    names with ``_`` for ``-``; paths as ``Path``)."""
    data = _read(path)
    flat = _model_keys(path, data.get("model", {}))
    for key, value in data.get("load", {}).items():
        if key == "options":
            if not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{path}: load.options must be a list of strings")
            flat[key] = tuple(value)
        elif key in ("report", "store"):
            flat[key] = Path(value)
        else:
            flat[key] = value
    return flat


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    _check_types(path, data)
    return data


def _model_keys(path: Path, model: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if "ref" in model:
        flat["model"] = model["ref"]
    if "inputs" in model:
        flat["inputs"] = _inputs(path, model["inputs"])
    if "weights" in model:
        flat["weights"] = Path(model["weights"])
    if "trust_model_code" in model:
        flat["trust_model_code"] = model["trust_model_code"]
    return flat


def load_config(path: Path) -> dict[str, Any]:
    """Read and validate a config file into flat keys (``model``, ``inputs``, ``batch``, ...)."""
    data = _read(path)
    run = data.get("run", {})
    flat = _model_keys(path, data.get("model", {}))
    for key in ("backend", "precision", "threads", "device", "budget", "target_ci", "seed"):
        if key in run:
            flat[key] = run[key]
    if "store" in run:
        flat["store"] = Path(run["store"])
    if "batch" in run:
        batch = run["batch"]
        text = ",".join(str(b) for b in batch) if isinstance(batch, list) else str(batch)
        try:
            flat["batch"] = parse_batch_sizes(text)
        except BadInputError as exc:
            raise ConfigError(f"{path}: run.batch: {exc}") from exc
    return flat
