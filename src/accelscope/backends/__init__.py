"""Runtimes: the Backend extension point and one module per runtime."""

from accelscope.backends.base import Availability, Backend, Batch, Runner
from accelscope.backends.registry import all_backends, get_backend, register_backend

__all__ = [
    "Availability",
    "Backend",
    "Batch",
    "Runner",
    "all_backends",
    "get_backend",
    "register_backend",
]
