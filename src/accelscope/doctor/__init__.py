"""``accelscope doctor``: where each training or inference step's time goes, the bottleneck
named with its evidence, and candidate fixes measured by re-running the script with one change.

Zero-code mode runs a script in an instrumented child (:mod:`.launcher`, :mod:`._bootstrap`);
API mode (:func:`watch`) instruments the caller's own loop. Both produce a
:class:`DoctorResult`.
"""

from accelscope.doctor.diagnose import DoctorPlan, DoctorResult, run_doctor
from accelscope.doctor.verdict import Diagnosis
from accelscope.doctor.watch import Watch, watch

__all__ = ["Diagnosis", "DoctorPlan", "DoctorResult", "Watch", "run_doctor", "watch"]
