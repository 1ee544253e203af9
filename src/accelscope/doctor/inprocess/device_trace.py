"""The GPU's own timeline of a few steps, recorded in the instrumented process: a torch.profiler
(CPU + CUDA activities) over :data:`PROFILED_STEPS` extra steps right after the warm-up, outside
the operator census (the last warm-up step) and outside the measured steps, exported as a
Chrome/Kineto trace that the parent reads with :mod:`accelscope.doctor.kineto`.

The recorder (:mod:`.recorder`) calls :meth:`DeviceTrace.start` at the first step after the
warm-up; it returns ``False`` when the loop does not use CUDA (a CPU run: nothing changes, no
extra steps), else the recorder adds the profiled steps to the warm-up, marks each one
(``ProfilerStep#N``) and calls :meth:`DeviceTrace.stop` at the boundary after the last one,
before the first measured step starts. The profiler's cost (its overhead during the profiled
steps, collecting and exporting the trace) is recorded and never lands in a measured step.

Tests inject a recorded trace instead (:data:`INJECT_ENV`): the same steps are added and the
file is copied where the profiler would have written its trace, so the whole path runs without
a GPU.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

__all__ = ["INJECT_ENV", "PROFILED_STEPS", "DeviceTrace"]

PROFILED_STEPS = 3
"""Steps recorded by torch.profiler after the warm-up (not measured)."""
INJECT_ENV = "ACCELSCOPE_DOCTOR_DEVICE_TRACE"
"""Tests only: a Kineto trace file that stands in for the profiler's (no CUDA needed)."""


class DeviceTrace:
    """One torch.profiler recording of :attr:`steps` steps (see the module doc)."""

    def __init__(self, path: Path, *, steps: int = PROFILED_STEPS) -> None:
        self.path = path
        self.steps = steps
        self.inject = os.environ.get(INJECT_ENV) or None
        self.status = "not recorded: the loop did not use CUDA"
        self.profiled_s = 0.0
        self.stop_s = 0.0
        self._profiler: Any = None
        self._mark: Any = None
        self._marks = 0
        self._started_at = 0.0

    def start(self) -> bool:
        """Start recording if the loop uses CUDA (or a trace is injected)."""
        if self.inject is not None:
            self.status = "injected"
            self._started_at = time.perf_counter()
            return True
        import sys

        torch = sys.modules.get("torch")  # the loop imported it; never imported here
        if torch is None or not torch.cuda.is_initialized():  # a flag: costs nothing on a CPU run
            return False
        try:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                record_shapes=False,
                with_stack=False,
            )
            self._profiler.start()
        except Exception as exc:  # noqa: BLE001 - a profiler that cannot start costs nothing
            self._profiler = None
            self.status = f"not recorded: torch.profiler did not start ({exc})"
            return False
        self.status = "recording"
        self._started_at = time.perf_counter()
        self.step()
        return True

    def step(self) -> None:
        """A profiled step starts: close the previous step's mark, open ``ProfilerStep#N``."""
        if self._profiler is None:
            return
        import torch

        if self._mark is not None:
            self._mark.__exit__(None, None, None)
        self._mark = torch.autograd.profiler.record_function(f"ProfilerStep#{self._marks}")
        self._mark.__enter__()
        self._marks += 1

    def stop(self) -> None:
        """The last profiled step ended: stop, export the trace, note the cost."""
        ended = time.perf_counter()
        self.profiled_s = ended - self._started_at
        if self.inject is not None:
            try:
                shutil.copyfile(self.inject, self.path)
            except OSError as exc:
                self.status = f"not recorded: the injected trace could not be read ({exc})"
            self.stop_s = time.perf_counter() - ended
            return
        if self._profiler is None:
            return
        try:
            if self._mark is not None:
                self._mark.__exit__(None, None, None)
                self._mark = None
            self._profiler.stop()
            self._profiler.export_chrome_trace(str(self.path))
            self.status = "recorded"
        except Exception as exc:  # noqa: BLE001 - the run goes on without the timeline
            self.status = f"not recorded: torch.profiler failed ({exc})"
        finally:
            self._profiler = None
            self.stop_s = time.perf_counter() - ended

    def payload(self) -> dict[str, Any]:
        """What the parent needs: where the trace is, how many steps, what it cost."""
        written = self.path.exists()
        return {
            "path": str(self.path) if written else None,
            "steps": self.steps,
            "status": self.status,
            "profiled_s": self.profiled_s,
            "stop_s": self.stop_s,
        }
