"""The accuracy-guarded acceleration sweep behind ``accelscope bench``."""

from accelscope.sweep.driver import STRATEGIES, SweepEvents, SweepOutcome, SweepPlan, run_sweep
from accelscope.sweep.executor import Executor, LocalExecutor, WorkerOutcome
from accelscope.sweep.guard import AccuracyRule, apply_guard
from accelscope.sweep.select import Selection, baseline_for, select, speedup
from accelscope.sweep.space import Candidate, SweepSpace, expand

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
