"""Resolve a model reference into a :class:`LoadedModel`, safely.

References: a zoo name (``resnet50``), a Python factory (``file.py:fn``, ``pkg.mod:fn``), an
ONNX file (``.onnx``), a ``torch.export`` program (``.pt2``), or a pickled model
(``.pt``/``.pth``: refused unless ``trust_model_code``).
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

from accelscope.errors import ModelLoadError, NotAvailableError, exception_line
from accelscope.models.base import LoadedModel, ModelFormat
from accelscope.models.eval_file import load_eval_file
from accelscope.models.factory import is_factory_ref, resolve_factory
from accelscope.models.onnx_file import check_onnx_file, onnx_input_specs
from accelscope.models.safe_load import load_checkpoint, load_state_dict, no_unpickling
from accelscope.models.zoo import ZOO, zoo_entry
from accelscope.spec import BATCH_DIM, TensorSpec

__all__ = ["load_model"]

_PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".ckpt", ".bin")
ZOO_VERSION = "1"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _need_inputs(ref: str, inputs: tuple[TensorSpec, ...] | None) -> tuple[TensorSpec, ...]:
    if not inputs:
        raise ModelLoadError(
            f"model {ref!r} declares no inputs: pass --input NAME:SHAPE:DTYPE "
            "(e.g. --input x:N,3,224,224:float32) or set [model] inputs in the config file"
        )
    return inputs


def _as_module(value: Any, ref: str) -> Any:
    import torch

    if not isinstance(value, torch.nn.Module):
        raise ModelLoadError(f"{ref} returned {type(value).__name__}, expected a torch.nn.Module")
    return value.eval()


def _apply_weights(module: Any, weights: Path, trust_model_code: bool) -> None:
    state = load_state_dict(weights, trust_model_code=trust_model_code)
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"weights in {weights} do not fit the model: {exception_line(exc)[:200]}"
        ) from exc


def _load_zoo(name: str, inputs: tuple[TensorSpec, ...] | None) -> LoadedModel:
    entry = zoo_entry(name)
    for package in entry.requires:
        if importlib.util.find_spec(package) is None:
            raise NotAvailableError(
                f"model {entry.name!r} not available: it needs the {package} package "
                f"(pip install 'accelscope[{package}]' -c constraints.txt)"
            )
    return LoadedModel(
        ref=entry.name,
        format=ModelFormat.TORCH,
        inputs=inputs or entry.inputs,
        digest=f"zoo:{entry.name}:v{ZOO_VERSION}",
        task=entry.task,
        module=entry.build(),
        eval_data=entry.eval_data() if entry.eval_data is not None and not inputs else None,
        description=entry.description,
    )


def _load_onnx(path: Path, inputs: tuple[TensorSpec, ...] | None) -> LoadedModel:
    graph = check_onnx_file(path)
    declared = onnx_input_specs(graph, path)
    if inputs and declared is not None:
        expected = sorted(spec.name for spec in declared)
        if sorted(spec.name for spec in inputs) != expected:
            raise ModelLoadError(
                f"{path} takes inputs {', '.join(expected)}; --input names do not match"
            )
    return LoadedModel(
        ref=str(path),
        format=ModelFormat.ONNX,
        inputs=inputs or _need_inputs(str(path), declared),
        digest=_file_digest(path),
        onnx_path=path,
        description=f"ONNX model {path.name}",
    )


def _exported_inputs(program: Any) -> tuple[TensorSpec, ...] | None:
    import torch

    specs: list[TensorSpec] = []
    user_inputs = set(program.graph_signature.user_inputs)
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return None
        dims: list[int | str] = []
        for position, size in enumerate(value.shape):
            if isinstance(size, int):
                dims.append(size)
            elif position == 0:
                dims.append(BATCH_DIM)
            else:
                return None
        specs.append(
            TensorSpec(
                name=node.name, shape=tuple(dims), dtype=str(value.dtype).removeprefix("torch.")
            )
        )
    return tuple(specs)


def _load_exported(
    path: Path, inputs: tuple[TensorSpec, ...] | None, trust_model_code: bool
) -> LoadedModel:
    import torch

    try:
        if trust_model_code:
            program = torch.export.load(str(path))
        else:
            with no_unpickling():
                program = torch.export.load(str(path))
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(
            f"{path} is not a loadable torch.export program: {exception_line(exc)[:200]}"
        ) from exc
    return LoadedModel(
        ref=str(path),
        format=ModelFormat.EXPORTED,
        inputs=inputs or _need_inputs(str(path), _exported_inputs(program)),
        digest=_file_digest(path),
        module=program.module(),
        description=f"torch.export program {path.name}",
    )


def load_model(
    ref: str,
    *,
    inputs: tuple[TensorSpec, ...] | None = None,
    weights: Path | None = None,
    trust_model_code: bool = False,
    eval_data: Path | None = None,
    metric: str = "top1_accuracy",
) -> LoadedModel:
    """Load the model ``ref`` names. ``inputs`` override the declared input spec; ``weights``
    (a state dict: ``.safetensors`` or a torch checkpoint) is loaded into torch models;
    ``eval_data`` (a ``.npz``, see :mod:`accelscope.models.eval_file`) replaces the model's
    eval data and gives it a task ``metric``."""
    ref = ref.strip()
    if not ref:
        raise ModelLoadError("no model given")
    path = Path(ref)
    lowered = ref.lower()
    if lowered in ZOO or (not path.suffix and not is_factory_ref(ref)):
        loaded = _load_zoo(ref, inputs)
    elif is_factory_ref(ref):
        factory, digest = resolve_factory(ref)
        try:
            built = factory()
        except Exception as exc:
            raise ModelLoadError(
                f"model factory {ref} raised {type(exc).__name__}: {exception_line(exc)}"
            ) from exc
        loaded = LoadedModel(
            ref=ref,
            format=ModelFormat.TORCH,
            inputs=_need_inputs(ref, inputs),
            digest=digest,
            module=_as_module(built, ref),
            description=f"factory {ref}",
        )
    elif not path.exists():
        raise ModelLoadError(f"model file {ref} does not exist")
    elif path.is_dir():
        raise ModelLoadError(f"{ref} is a directory; give a model file or a zoo name")
    elif lowered.endswith(".onnx"):
        loaded = _load_onnx(path, inputs)
    elif lowered.endswith(".pt2"):
        loaded = _load_exported(path, inputs, trust_model_code)
    elif lowered.endswith(_PICKLE_SUFFIXES):
        value = load_checkpoint(path, trust_model_code=trust_model_code)
        if isinstance(value, dict):
            raise ModelLoadError(
                f"{ref} holds a state dict, not a model: load it into an architecture with "
                "--weights (e.g. accelscope measure resnet50 --weights FILE)"
            )
        loaded = LoadedModel(
            ref=ref,
            format=ModelFormat.TORCH,
            inputs=_need_inputs(ref, inputs),
            digest=_file_digest(path),
            module=_as_module(value, ref),
            description=f"pickled model {path.name} (trusted)",
        )
    else:
        raise ModelLoadError(
            f"don't know how to load {ref!r}: expected a zoo name, file.py:function, "
            "module:function, .onnx, .pt2 or .pt/.pth"
        )
    if weights is not None:
        if loaded.module is None or loaded.format is not ModelFormat.TORCH:
            raise ModelLoadError("--weights applies to PyTorch models (zoo or factory) only")
        _apply_weights(loaded.module, weights, trust_model_code)
        loaded.digest = f"{loaded.digest}+{_file_digest(weights)}"
    if eval_data is not None:
        loaded.eval_data = load_eval_file(eval_data, loaded.inputs, metric)
    return loaded
