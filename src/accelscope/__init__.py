"""accelscope: profile first, then accelerate, then right-size, always with measurements.

The public, typed API. Everything not listed in ``__all__`` is internal.

Each public name is imported from its module when it is first used (PEP 562), so ``import
accelscope`` (and the CLI, which imports it) does not import torch, numpy or the runtimes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelscope.backends.base import Availability, Backend, Runner
    from accelscope.backends.registry import all_backends, get_backend, register_backend
    from accelscope.commands.measure.workflow import MeasureOutcome, MeasureRequest, measure
    from accelscope.doctor import DoctorResult, watch
    from accelscope.errors import (
        AccelscopeError,
        BadInputError,
        ConfigError,
        InterruptedRunError,
        MeasurementError,
        ModelLoadError,
        NotAvailableError,
        StoreError,
        UnsafeModelError,
    )
    from accelscope.hardware.fingerprint import Environment, collect_environment
    from accelscope.measurement.record import Measurement, StopReason
    from accelscope.measurement.stats import Summary, summarise
    from accelscope.measurement.timer import Timer, TimerConfig
    from accelscope.models.base import LoadedModel
    from accelscope.models.loading import load_model
    from accelscope.result import Accuracy, Result, Status
    from accelscope.spec import Device, Precision, RunSpec, TensorSpec
    from accelscope.store.sqlite import ResultStore, RunRecord

__version__ = "0.1.0"

_MODULES: dict[str, str] = {
    "Availability": "accelscope.backends.base",
    "Backend": "accelscope.backends.base",
    "Runner": "accelscope.backends.base",
    "all_backends": "accelscope.backends.registry",
    "get_backend": "accelscope.backends.registry",
    "register_backend": "accelscope.backends.registry",
    "MeasureOutcome": "accelscope.commands.measure.workflow",
    "MeasureRequest": "accelscope.commands.measure.workflow",
    "measure": "accelscope.commands.measure.workflow",
    "DoctorResult": "accelscope.doctor",
    "watch": "accelscope.doctor",
    "AccelscopeError": "accelscope.errors",
    "BadInputError": "accelscope.errors",
    "ConfigError": "accelscope.errors",
    "InterruptedRunError": "accelscope.errors",
    "MeasurementError": "accelscope.errors",
    "ModelLoadError": "accelscope.errors",
    "NotAvailableError": "accelscope.errors",
    "StoreError": "accelscope.errors",
    "UnsafeModelError": "accelscope.errors",
    "Environment": "accelscope.hardware.fingerprint",
    "collect_environment": "accelscope.hardware.fingerprint",
    "Measurement": "accelscope.measurement.record",
    "StopReason": "accelscope.measurement.record",
    "Summary": "accelscope.measurement.stats",
    "summarise": "accelscope.measurement.stats",
    "Timer": "accelscope.measurement.timer",
    "TimerConfig": "accelscope.measurement.timer",
    "LoadedModel": "accelscope.models.base",
    "load_model": "accelscope.models.loading",
    "Accuracy": "accelscope.result",
    "Result": "accelscope.result",
    "Status": "accelscope.result",
    "Device": "accelscope.spec",
    "Precision": "accelscope.spec",
    "RunSpec": "accelscope.spec",
    "TensorSpec": "accelscope.spec",
    "ResultStore": "accelscope.store.sqlite",
    "RunRecord": "accelscope.store.sqlite",
}
"""Each public name -> the module it is imported from on first use."""

__all__ = [
    "AccelscopeError",
    "Accuracy",
    "Availability",
    "Backend",
    "BadInputError",
    "ConfigError",
    "Device",
    "DoctorResult",
    "Environment",
    "InterruptedRunError",
    "LoadedModel",
    "MeasureOutcome",
    "MeasureRequest",
    "Measurement",
    "MeasurementError",
    "ModelLoadError",
    "NotAvailableError",
    "Precision",
    "Result",
    "ResultStore",
    "RunRecord",
    "RunSpec",
    "Runner",
    "Status",
    "StopReason",
    "StoreError",
    "Summary",
    "TensorSpec",
    "Timer",
    "TimerConfig",
    "UnsafeModelError",
    "__version__",
    "all_backends",
    "collect_environment",
    "get_backend",
    "load_model",
    "measure",
    "register_backend",
    "summarise",
    "watch",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once: later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
