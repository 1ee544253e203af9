"""The accuracy-guarded acceleration sweep behind ``accelscope bench``.

Each name below is imported from its module on first use (PEP 562): importing one light module
of the package (``sweep.select``, ``sweep.space``) does not import the worker, which loads the
models and so torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelscope.sweep.driver import STRATEGIES, SweepEvents, SweepOutcome, SweepPlan, run_sweep
    from accelscope.sweep.executor import Executor, LocalExecutor, WorkerOutcome
    from accelscope.sweep.guard import AccuracyRule, apply_guard
    from accelscope.sweep.select import Selection, baseline_for, select, speedup
    from accelscope.sweep.space import Candidate, SweepSpace, expand

_MODULES: dict[str, str] = {
    "STRATEGIES": "driver",
    "SweepEvents": "driver",
    "SweepOutcome": "driver",
    "SweepPlan": "driver",
    "run_sweep": "driver",
    "Executor": "executor",
    "LocalExecutor": "executor",
    "WorkerOutcome": "executor",
    "AccuracyRule": "guard",
    "apply_guard": "guard",
    "Selection": "select",
    "baseline_for": "select",
    "select": "select",
    "speedup": "select",
    "Candidate": "space",
    "SweepSpace": "space",
    "expand": "space",
}

__all__ = [
    "STRATEGIES",
    "AccuracyRule",
    "Candidate",
    "Executor",
    "LocalExecutor",
    "Selection",
    "SweepEvents",
    "SweepOutcome",
    "SweepPlan",
    "SweepSpace",
    "WorkerOutcome",
    "apply_guard",
    "baseline_for",
    "expand",
    "run_sweep",
    "select",
    "speedup",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
