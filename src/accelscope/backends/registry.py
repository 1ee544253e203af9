"""The one registry of runtimes: name -> Backend instance."""

from __future__ import annotations

from accelscope.backends.base import Backend
from accelscope.backends.compiled import CompileBackend
from accelscope.backends.eager import EagerBackend
from accelscope.backends.onnxruntime import OnnxRuntimeBackend
from accelscope.backends.openvino import OpenVinoBackend
from accelscope.backends.tensorrt import TensorRtBackend
from accelscope.errors import BadInputError

__all__ = ["all_backends", "get_backend", "register_backend"]

_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> None:
    """Add (or replace) a backend under its ``name``."""
    if not backend.name:
        raise ValueError("a backend needs a name")
    _REGISTRY[backend.name] = backend


def get_backend(name: str) -> Backend:
    """The backend called ``name``; unknown names are a ``BadInputError`` listing the choices."""
    key = name.strip().lower()
    if key not in _REGISTRY:
        choices = ", ".join(sorted(_REGISTRY))
        raise BadInputError(f"unknown backend {name!r}; choose one of: {choices}")
    return _REGISTRY[key]


def all_backends() -> list[Backend]:
    """Every registered backend, available here or not."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


for _backend in (
    EagerBackend(),
    CompileBackend(),
    OnnxRuntimeBackend(),
    OpenVinoBackend(),
    TensorRtBackend(),
):
    register_backend(_backend)
