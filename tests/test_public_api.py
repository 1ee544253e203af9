"""The public API is curated: pinned names, all importable, typed package.

Covers: accelscope."""

from __future__ import annotations

from pathlib import Path

import accelscope

EXPECTED = {
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
}


def test_all_is_pinned() -> None:
    assert set(accelscope.__all__) == EXPECTED


def test_every_public_name_exists() -> None:
    missing = [name for name in accelscope.__all__ if not hasattr(accelscope, name)]
    assert missing == []


def test_package_is_typed() -> None:
    assert (Path(accelscope.__file__).parent / "py.typed").is_file()


def test_every_error_carries_an_exit_code() -> None:
    bad_input = [
        accelscope.BadInputError,
        accelscope.ConfigError,
        accelscope.ModelLoadError,
        accelscope.UnsafeModelError,
        accelscope.StoreError,
        accelscope.NotAvailableError,
    ]
    for error in bad_input:
        assert issubclass(error, accelscope.AccelscopeError)
        assert error.exit_code == 2, error
    assert accelscope.InterruptedRunError.exit_code == 130
