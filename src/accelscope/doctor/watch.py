"""API mode: ``with accelscope.doctor.watch(model=..., loader=...) as w:`` around your own
loop, ``w.step()`` at the end of each step; ``w.result`` is the same
:class:`~accelscope.doctor.diagnose.DoctorResult` the command produces (without what-ifs, which
need the script to be re-run).

Telemetry is sampled from a thread of this process here (there is no separate parent), at the
same rate; the instrumentation is removed on exit, leaving torch as it was. On CUDA the steps
right after the warm-up are profiled with torch.profiler, as in a ``doctor SCRIPT`` run, and
the verdict is drawn from that timeline (a temporary file, removed on exit).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from accelscope.doctor.breakdown import breakdown
from accelscope.doctor.diagnose import DoctorResult
from accelscope.doctor.findings import RuleContext
from accelscope.doctor.inprocess.session import Session
from accelscope.doctor.launcher import profile_of
from accelscope.doctor.verdict import diagnose
from accelscope.errors import MeasurementError
from accelscope.hardware.fingerprint import collect_environment
from accelscope.hardware.telemetry import NvmlSource, TelemetrySampler
from accelscope.measurement.threads import available_cores

__all__ = ["Watch", "watch"]


class Watch:
    """The context manager returned by :func:`watch`."""

    def __init__(
        self,
        model: Any = None,
        loader: Any = None,
        *,
        warmup: int = 1,
        trace_steps: int = 3,
        telemetry: bool = True,
    ) -> None:
        if warmup < 0:
            raise ValueError("warmup must be 0 or more")
        self.model = model
        self.loader = loader
        self.warmup = warmup
        self.trace_steps = trace_steps
        self.telemetry = telemetry
        self.session: Session | None = None
        self._sampler: TelemetrySampler | None = None
        self._result: DoctorResult | None = None
        self._telemetry_origin_s: float | None = None
        self._trace_dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Watch:
        self._trace_dir = tempfile.TemporaryDirectory(prefix="accelscope-watch-")
        self.session = Session(
            warmup=self.warmup,
            steps=0,
            trace_steps=self.trace_steps,
            main_model=self.model,
            manual=True,
            device_trace_path=str(Path(self._trace_dir.name) / "device-trace.json"),
        )
        self.session.instrumentation.install()
        if self.loader is not None:
            self.session.instrumentation._loader_facts(self.loader)
        self.session.recorder.manual_step()  # the first step starts now
        if self.telemetry:
            self._telemetry_origin_s = time.monotonic()  # the sampler's clock starts here
            self._sampler = TelemetrySampler(os.getpid(), gpu=NvmlSource())
            self._sampler.start()
        return self

    def step(self) -> None:
        """Mark the end of one step (and the start of the next)."""
        if self.session is None:
            raise RuntimeError("step() outside the watch block")
        self.session.recorder.manual_step()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        session = self.session
        if session is None:
            return
        session.instrumentation.uninstall()
        telemetry = self._sampler.stop() if self._sampler is not None else None
        try:
            if kind is not None:
                return
            profile = profile_of(session.payload("ended", 0))
        finally:
            if self._trace_dir is not None:
                self._trace_dir.cleanup()
        if not profile.measured:
            raise MeasurementError(
                f"watch saw {len(profile.steps)} step(s), all inside the warm-up "
                f"({self.warmup}); call step() more often or lower warmup"
            )
        env = collect_environment()
        ctx = RuleContext(
            profile=profile,
            breakdown=breakdown(profile.measured),
            telemetry=telemetry,
            support=env.precision_support(),
            cores=available_cores(),
            memory_bytes=env.memory_bytes,
            telemetry_steps_at_s=(
                profile.first_step_monotonic_s - self._telemetry_origin_s
                if profile.first_step_monotonic_s is not None
                and self._telemetry_origin_s is not None
                and telemetry is not None
                else None
            ),
        )
        name = type(self.model).__name__ if self.model is not None else "loop"
        self._result = DoctorResult(
            script=str(Path(f"<watch:{name}>")),
            args=(),
            profile=profile,
            telemetry=telemetry,
            diagnosis=diagnose(ctx),
            telemetry_steps_at_s=ctx.telemetry_steps_at_s,
        )

    @property
    def result(self) -> DoctorResult:
        """The diagnosis (available after the block)."""
        if self._result is None:
            raise RuntimeError("the result exists once the watch block has ended without error")
        return self._result


def watch(
    model: Any = None,
    loader: Any = None,
    *,
    warmup: int = 1,
    trace_steps: int = 3,
    telemetry: bool = True,
) -> Watch:
    """Diagnose your own loop in this process; see the module doc."""
    return Watch(model, loader, warmup=warmup, trace_steps=trace_steps, telemetry=telemetry)
