"""One instrumented session in the process that runs the loop: the recorder, the torch patches,
the operator census, the device trace and the what-if injector, and the JSON they produce.

Shared by the zero-code child (:mod:`._bootstrap`) and API mode (:mod:`.watch`), so both
produce the same :class:`~accelscope.doctor.profile.Profile`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelscope.doctor.inprocess.device_trace import DeviceTrace
from accelscope.doctor.inprocess.gpu_memory import read_gpu_memory
from accelscope.doctor.inprocess.inject import Injector
from accelscope.doctor.inprocess.instrument import Instrumentation
from accelscope.doctor.inprocess.probe import OpCensus, measure_op_overhead_s
from accelscope.doctor.inprocess.recorder import Recorder
from accelscope.doctor.inprocess.worker_load import WorkerLoad

__all__ = ["PROGRESS_FD_ENV", "SCHEMA", "Session"]

SCHEMA = 1
PROGRESS_FD_ENV = "ACCELSCOPE_DOCTOR_PROGRESS_FD"
"""Environment variable naming the pipe descriptor the child writes one byte per step to."""


class Session:
    """Build and hold the instrumentation of one run (see the module doc).

    Args:
        warmup: Warm-up steps (the census runs over the last one).
        steps: Measured steps; 0 means unbounded (API mode).
        full: Wrap copies and syncs too (the diagnosis run); what-if runs only time steps.
        probe: Run the operator census.
        trace_steps: Measured steps whose spans are kept for the trace.
        whatif: Injection spec, or ``None``.
        on_step / on_done: Recorder callbacks.
        main_model: The model driving steps (API mode), found automatically otherwise.
        manual: Steps are marked by the caller (API mode).
        device_trace_path: Where torch.profiler writes the device timeline of the steps
            right after the warm-up (the diagnosis run on CUDA; see :mod:`.device_trace`).
    """

    def __init__(
        self,
        *,
        warmup: int,
        steps: int,
        full: bool = True,
        probe: bool = True,
        trace_steps: int = 0,
        whatif: dict[str, Any] | None = None,
        on_step: Callable[[int], None] | None = None,
        on_done: Callable[[], None] | None = None,
        main_model: Any = None,
        manual: bool = False,
        device_trace_path: str | None = None,
    ) -> None:
        self.worker_load = WorkerLoad()
        kind = (whatif or {}).get("kind", "none")
        self.injector = Injector(whatif or {}, warmup + steps) if kind != "none" else None
        self.census = OpCensus() if full and probe else None
        self.op_overhead_s = measure_op_overhead_s() if full else None
        self.device_trace = (
            DeviceTrace(Path(device_trace_path)) if full and device_trace_path else None
        )
        self.recorder = Recorder(
            target_steps=warmup + steps if steps else 0,
            warmup=warmup,
            trace_steps=trace_steps,
            on_step=on_step,
            on_done=on_done,
            probe=self.census,
            manual=manual,
            profiler=self.device_trace,
            on_measured=self.worker_load.begin,
        )
        self.instrumentation = Instrumentation(
            self.recorder, full=full, injector=self.injector, main_model=main_model
        )

    def payload(
        self, status: str, exit_code: int | None = None, error: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Everything recorded, JSON-ready (the :class:`Profile` schema)."""
        import torch

        rec = self.recorder
        if self.census is not None and not self.census.done and rec.steps:
            self.census.stop()
        trace = self.device_trace
        recording = trace is not None and trace.status in ("recording", "injected")
        if trace is not None and recording and rec.profiled_steps and not trace.path.exists():
            trace.stop()  # the script ended inside the profiled steps
        worker_busy_cores = self.worker_load.end()
        steps = rec.steps_payload()
        first_step_monotonic_s = None
        if rec.steps:  # the recorder's ticks on the clock the parent's telemetry uses
            ago_s = (rec.clock_ns() - rec.steps[0][0]) / 1e9
            first_step_monotonic_s = time.monotonic() - ago_s
        gpu_memory, gpu_memory_status = read_gpu_memory()
        inst = self.instrumentation
        census = self.census
        return {
            "schema": SCHEMA,
            "status": status,
            "exit_code": exit_code,
            "error": error,
            "mode": rec.mode,
            "warmup": rec.warmup,
            "target_steps": rec.target_steps,
            "steps": steps,
            "spans": rec.spans_payload(),
            "probe": census.summary() if census is not None and census.done else None,
            "op_overhead_s": self.op_overhead_s,
            "first_step_monotonic_s": first_step_monotonic_s,
            "gpu_memory": gpu_memory,
            "gpu_memory_status": gpu_memory_status,
            "device_trace": None
            if trace is None
            else {**trace.payload(), "steps": rec.profiled_steps},
            "facts": {
                "torch": str(torch.__version__),
                "torch_threads": torch.get_num_threads(),
                "interop_threads": torch.get_num_interop_threads(),
                "loaders": inst.loaders,
                "worker_busy_cores": worker_busy_cores,
                "main_model": inst.main_facts,
                "autocast": inst.autocast_seen,
                "cuda_initialized": bool(torch.cuda.is_initialized()),  # type: ignore[no-untyped-call]
                "optimizer_seen": rec.optimizer_seen,
                "backward_seen": rec.backward_seen,
                "train_state": inst.train_state,
            },
            "losses": inst.losses_payload(),
            "whatif": None
            if self.injector is None
            else {
                "kind": self.injector.kind,
                "applied": self.injector.applied,
                "notes": self.injector.notes,
                "details": self.injector.details,
            },
        }
