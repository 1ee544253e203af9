"""accelscope: profile first, then accelerate, then right-size, always with measurements.

The public, typed API. Everything not listed in ``__all__`` is internal.
"""

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
from accelscope.measurement.stats import Summary, summarize
from accelscope.measurement.timer import Timer, TimerConfig
from accelscope.models.base import LoadedModel
from accelscope.models.loading import load_model
from accelscope.result import Accuracy, Result, Status
from accelscope.spec import Device, Precision, RunSpec, TensorSpec
from accelscope.store.sqlite import ResultStore, RunRecord

__version__ = "0.1.0"

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
    "summarize",
    "watch",
]
