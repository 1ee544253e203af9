"""Per-step time accounting inside the instrumented process: exclusive phase spans, step
boundaries, and what to do when enough steps have been seen.

The recorder is fed events by the instrumentation (DataLoader waits, forwards, backwards,
optimizer steps, syncs, copies) and keeps, per step, the *exclusive* time of each phase
(a sync inside a forward counts as sync, not forward), so the phases of a step never add up to
more than the step. It is written for a tiny per-event cost: integer clocks, lists, no
allocation beyond one small list per open span.

Units: everything this module hands out (:meth:`Recorder.steps_payload`,
:meth:`Recorder.spans_payload`) is in seconds, like the rest of accelscope. Inside, and only
inside, times are integer nanoseconds from ``time.perf_counter_ns``: a step is the sum of
thousands of sub-microsecond spans (syncs, copies, nested forwards), each made exclusive by
subtracting its children. Integer ticks keep that arithmetic exact (a phase can never come out
negative or larger than its step from rounding), where float seconds read from
``time.perf_counter()`` are quantised, on every read, to the float spacing at the clock's value
(about 2 ns once the machine has been up for a few months). The ticks are opaque to callers:
:mod:`.instrument` only reads :attr:`Recorder.clock_ns` to pass the same ticks back to
:meth:`Recorder.leaf`.

Step boundaries, in order of precedence:

* ``optimizer``: the end of every ``optimizer.step()`` (training);
* ``forward``: the start of the main model's next top-level forward once one has finished
  (inference loops, or training without an optimizer);
* ``dataloader``: the next ``DataLoader`` batch, when no model forward is ever seen;
* ``manual``: explicit :meth:`Recorder.manual_step` calls (API mode).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "BACKWARD",
    "COPY",
    "FORWARD",
    "INPUT",
    "OPTIMIZER",
    "PHASES",
    "SYNC",
    "OpProbe",
    "Recorder",
    "StepProfiler",
]

INPUT, COPY, FORWARD, BACKWARD, OPTIMIZER, SYNC = range(6)
PHASES: tuple[str, ...] = ("input", "copy", "forward", "backward", "optimizer", "sync")
"""Instrumented phases, by index; ``other`` (the rest of the step) is derived."""

# per-step counters, by index
N_SYNC, N_COPY, N_PAGEABLE, COPY_BYTES, N_FORWARD, ITEMS = range(6)
COUNTERS: tuple[str, ...] = (
    "syncs",
    "copies",
    "pageable_copies",
    "copy_bytes",
    "forwards",
    "items",
)


class OpProbe(Protocol):
    """Counts and times the operators of one step (a dispatch mode, in practice)."""

    def start(self, recorder: Recorder) -> None:
        """Begin counting."""

    def stop(self) -> None:
        """Stop counting; the summary stays on the probe."""


class StepProfiler(Protocol):
    """Records the device's own timeline over a few steps after the warm-up (torch.profiler;
    :mod:`.device_trace`). Those steps are added to the warm-up: they are never measured."""

    steps: int

    def start(self) -> bool:
        """Begin at the first step after the warm-up; ``False``: nothing to record (no CUDA)."""

    def step(self) -> None:
        """The next profiled step starts."""

    def stop(self) -> None:
        """The profiled steps are over (called before the next step's clock starts)."""


class Recorder:
    """Accumulates exclusive phase time per step and commits steps at boundaries.

    Args:
        target_steps: Stop (call ``on_done``) once this many steps are committed; 0: never.
        warmup: Steps before the measured ones (traced steps and the probe are placed by it).
        clock_ns: Monotonic clock in integer nanoseconds (the recorder's internal ticks; see
            the module doc for why they are not float seconds).
        trace_steps: How many measured steps keep their individual spans for the trace.
        on_step: Called with the number of committed steps after each commit.
        on_done: Called once ``target_steps`` steps are committed.
        probe: Optional operator probe run over the last warm-up step.
        manual: Only :meth:`manual_step` commits steps (API mode).
        profiler: Optional device-timeline recorder over the steps right after the warm-up;
            when it starts, its steps join the warm-up (and ``target_steps``), so the measured
            steps stay as many and unprofiled.
        on_measured: Called once, at the boundary before the first measured step.
    """

    def __init__(
        self,
        *,
        target_steps: int = 0,
        warmup: int = 0,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        trace_steps: int = 0,
        on_step: Callable[[int], None] | None = None,
        on_done: Callable[[], None] | None = None,
        probe: OpProbe | None = None,
        manual: bool = False,
        profiler: StepProfiler | None = None,
        on_measured: Callable[[], None] | None = None,
    ) -> None:
        self.clock_ns = clock_ns
        self.on_measured = on_measured
        self.profiler = profiler
        self.profiled_steps = 0
        self._profile_end = -1
        self.target_steps = target_steps
        self.warmup = warmup
        self.trace_steps = trace_steps
        self.on_step = on_step
        self.on_done = on_done
        self.probe = probe
        self.probe_step = warmup - 1 if probe is not None and warmup >= 1 else -1
        self.mode: str | None = "manual" if manual else None
        self.steps: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        self.spans: list[tuple[int, int, int, int]] = []  # (phase or -1 = step, start, end, depth)
        self.forward_depth = 0
        self.optimizer_seen = False
        self.backward_seen = False
        self._stack: list[list[int]] = []  # [phase, start_ns, child_ns]
        self._acc = [0] * len(PHASES)
        self._cnt = [0] * len(COUNTERS)
        self._step_start: int | None = None
        self._forward_done = False
        self._forward_ever = False
        self._dl_seen = False
        self._tracing = False
        self._probing = False
        self._done = False

    # -- spans -------------------------------------------------------------------------------

    def _touch(self, now: int) -> None:
        if self._step_start is None:
            self._step_start = now
            self._set_modes(0)

    def begin(self, phase: int) -> None:
        """Open a span of ``phase`` now."""
        now = self.clock_ns()
        if self._step_start is None:
            self._touch(now)
        self._stack.append([phase, now, 0])

    def end(self) -> None:
        """Close the innermost open span (no-op if none is open)."""
        if not self._stack:
            return
        now = self.clock_ns()
        phase, start, child = self._stack.pop()
        elapsed = now - start
        self._acc[phase] += elapsed - child
        if self._stack:
            self._stack[-1][2] += elapsed
        if self._tracing:
            self.spans.append((phase, start, now, len(self._stack)))

    def leaf(self, phase: int, start: int, end: int) -> None:
        """Record a span with no instrumented calls inside it (a sync, a copy)."""
        if self._step_start is None:
            self._touch(start)
        elapsed = end - start
        self._acc[phase] += elapsed
        if self._stack:
            self._stack[-1][2] += elapsed
        if self._tracing:
            self.spans.append((phase, start, end, len(self._stack)))

    def count(self, counter: int, amount: int = 1) -> None:
        """Add to one of the current step's counters."""
        self._cnt[counter] += amount

    # -- events that may be step boundaries -----------------------------------------------------

    def input_begin(self) -> None:
        """The loop asks the DataLoader for a batch."""
        if self.mode in (None, "dataloader") and not self._forward_ever and self._dl_seen:
            self._commit(self.clock_ns(), "dataloader")
        self._dl_seen = True
        self.begin(INPUT)

    def input_end(self) -> None:
        """The batch arrived."""
        self.end()

    def forward_begin(self, main: bool, items: int) -> None:
        """A top-level module forward starts; ``main`` marks the model that drives steps."""
        if main:
            if self._forward_done and self.mode not in ("optimizer", "manual"):
                self._commit(self.clock_ns(), "forward")
            self._forward_done = False
            self._forward_ever = True
            self._cnt[N_FORWARD] += 1
            self._cnt[ITEMS] += items
        self.forward_depth += 1
        self.begin(FORWARD)

    def forward_end(self, main: bool) -> None:
        """The top-level forward opened by :meth:`forward_begin` returned."""
        self.end()
        self.forward_depth = max(0, self.forward_depth - 1)
        if main:
            self._forward_done = True

    def backward_begin(self) -> None:
        """A backward pass starts."""
        self.backward_seen = True
        self.begin(BACKWARD)

    def backward_end(self) -> None:
        """The backward pass returned."""
        self.end()

    def optimizer_begin(self) -> None:
        """``optimizer.step()`` (or ``zero_grad``) starts."""
        self.begin(OPTIMIZER)

    def optimizer_end(self, step: bool) -> None:
        """``optimizer.step()`` (``step=True``) or ``zero_grad`` returned."""
        self.end()
        if step:
            self.optimizer_seen = True
            if self.mode != "manual" and not self._stack:
                self._commit(self.clock_ns(), "optimizer")

    def manual_step(self) -> None:
        """An explicit step boundary (API mode)."""
        now = self.clock_ns()
        if self._step_start is None:
            self._touch(now)
            return
        self._commit(now, "manual")

    # -- commits -----------------------------------------------------------------------------

    def _set_modes(self, index: int) -> None:
        """Turn the probe, the device profiler and tracing on or off for step ``index`` (about
        to start). The census stops before the profiler starts: they never overlap."""
        if self.probe is not None:
            if index == self.probe_step:
                self.probe.start(self)
                self._probing = True
            elif self._probing:
                self.probe.stop()
                self._probing = False
        if self.profiler is not None:
            if index == self.warmup and self._profile_end < 0 and self.profiler.steps > 0:
                self._profile_end = 0  # tried once
                if self.profiler.start():
                    self.profiled_steps = self.profiler.steps
                    self._profile_end = index + self.profiled_steps
                    self.warmup += self.profiled_steps
                    if self.target_steps:
                        self.target_steps += self.profiled_steps
            elif 0 < index < self._profile_end:
                self.profiler.step()
        if index == self.warmup and self.on_measured is not None:
            self.on_measured()  # the first measured step is about to start
        first = self.warmup
        self._tracing = first <= index < first + self.trace_steps

    def _commit(self, now: int, mode: str) -> None:
        if self._done:
            return
        if self.mode in (None, "dataloader", "forward") and mode != self.mode:
            self.mode = mode
        start = self._step_start if self._step_start is not None else now
        if self._tracing:
            self.spans.append((-1, start, now, 0))
        self.steps.append((start, now, tuple(self._acc), tuple(self._cnt)))
        self._acc = [0] * len(PHASES)
        self._cnt = [0] * len(COUNTERS)
        index = len(self.steps)
        if self.profiler is not None and index == self._profile_end:
            self.profiler.stop()
        self._set_modes(index)
        # what ran at the boundary (the profiler's export, starting or stopping the census,
        # reading the workers' load) stays out of every step
        self._step_start = self.clock_ns()
        if self.on_step is not None:
            self.on_step(index)
        if self.target_steps and index >= self.target_steps:
            self._done = True
            if self._probing and self.probe is not None:
                self.probe.stop()
                self._probing = False
            if self.on_done is not None:
                self.on_done()

    # -- output ------------------------------------------------------------------------------
    # The module boundary: integer nanoseconds become float seconds here and nowhere else.

    def steps_payload(self) -> list[dict[str, Any]]:
        """Every committed step as JSON-ready dicts (seconds; warm-up steps included)."""
        origin = self.steps[0][0] if self.steps else 0
        out = []
        for start, end, acc, cnt in self.steps:
            out.append(
                {
                    "start_s": (start - origin) / 1e9,
                    "duration_s": (end - start) / 1e9,
                    "phases_s": {name: acc[i] / 1e9 for i, name in enumerate(PHASES)},
                    "counts": {name: cnt[i] for i, name in enumerate(COUNTERS)},
                }
            )
        return out

    def spans_payload(self) -> list[dict[str, Any]]:
        """The traced spans (seconds since the first step's start), for the Chrome trace
        (:mod:`accelscope.doctor.trace` converts to the trace format's µs)."""
        origin = self.steps[0][0] if self.steps else 0
        return [
            {
                "name": "step" if phase < 0 else PHASES[phase],
                "start_s": (start - origin) / 1e9,
                "duration_s": (end - start) / 1e9,
                "depth": depth,
            }
            for phase, start, end, depth in self.spans
        ]
