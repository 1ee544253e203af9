"""ONNX model files: validate without running them, and read their input spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelscope.errors import ModelLoadError, NotAvailableError
from accelscope.spec import BATCH_DIM, TensorSpec

__all__ = ["check_onnx_file", "onnx_input_specs"]

# onnx.TensorProto element types -> TensorSpec dtype names
_ELEM_TYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    16: "bfloat16",
}


def check_onnx_file(path: Path) -> Any:
    """Load and check an ONNX file; a truncated or corrupt file is a ``ModelLoadError``."""
    try:
        import onnx
    except ImportError as exc:
        raise NotAvailableError(
            "ONNX models not available: the onnx package is not installed "
            "(pip install 'accelscope[onnx]' -c constraints.txt)"
        ) from exc
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelLoadError(
            f"{path} is not a valid ONNX model (truncated or corrupt?): {detail}"
        ) from exc
    if not model.graph.node:
        raise ModelLoadError(f"{path} is an ONNX model with an empty graph")
    return model


def onnx_input_specs(model: Any, path: Path) -> tuple[TensorSpec, ...] | None:
    """Input specs read from the graph; the first symbolic dimension becomes the batch ``N``.

    Returns ``None`` when a shape has other symbolic dimensions (the user must then give
    ``--input``).
    """
    initializers = {init.name for init in model.graph.initializer}
    specs: list[TensorSpec] = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = _ELEM_TYPES.get(tensor_type.elem_type)
        if dtype is None:
            raise ModelLoadError(
                f"{path}: input {value.name!r} has an element type accelscope cannot feed "
                f"({tensor_type.elem_type})"
            )
        dims: list[int | str] = []
        for position, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                dims.append(int(dim.dim_value))
            elif position == 0:
                dims.append(BATCH_DIM)
            else:
                return None
        specs.append(TensorSpec(name=value.name, shape=tuple(dims), dtype=dtype))
    return tuple(specs)
