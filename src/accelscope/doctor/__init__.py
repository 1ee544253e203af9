"""``accelscope doctor``: where each training or inference step's time goes, the bottleneck
named with its evidence, and candidate fixes measured by re-running the script with one change.

Zero-code mode runs a script in an instrumented child (:mod:`.launcher`, :mod:`._bootstrap`);
API mode (:func:`watch`) instruments the caller's own loop. Both produce a
:class:`DoctorResult`.

The public names are imported on first use (PEP 562), so importing one analysis module of the
package (``doctor --trace`` reads a trace with :mod:`.kineto`) does not import the script
runner and everything it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelscope.doctor.diagnose import DoctorPlan, DoctorResult, run_doctor
    from accelscope.doctor.verdict import Diagnosis
    from accelscope.doctor.watch import Watch, watch

__all__ = ["Diagnosis", "DoctorPlan", "DoctorResult", "Watch", "run_doctor", "watch"]

_HOMES = {
    "Diagnosis": "accelscope.doctor.verdict",
    "DoctorPlan": "accelscope.doctor.diagnose",
    "DoctorResult": "accelscope.doctor.diagnose",
    "Watch": "accelscope.doctor.watch",
    "run_doctor": "accelscope.doctor.diagnose",
    "watch": "accelscope.doctor.watch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
