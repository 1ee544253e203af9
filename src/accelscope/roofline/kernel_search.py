"""Best-first search for the fastest kernel, and the timing of one kernel under a deadline.

The search is pure: candidates, their neighbours and their measured rates come from callables,
time from a clock, so tests drive it with a fake rate table and a fake clock. It evaluates the
seeds, then repeatedly expands (measures every unseen neighbour of) the best not-yet-expanded
candidate among the current top ``breadth``, until the top ``breadth`` are all expanded (a local
optimum) or the time budget is spent. Candidates the caller predicts it cannot afford are
skipped, never launched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from accelscope.hardware.sync import IntervalTimer

__all__ = [
    "Candidate",
    "Deadline",
    "SearchOutcome",
    "Trial",
    "best_first_search",
    "fastest_call_s",
    "measure_rate",
]

Clock = Callable[[], float]


@dataclass(frozen=True, order=True)
class Candidate:
    """A kernel to try: its family (layout and library path) and its shape."""

    family: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Trial:
    """One measured candidate; ``flops_per_s`` is ``None`` when it could not run here."""

    candidate: Candidate
    flops_per_s: float | None


@dataclass(frozen=True)
class SearchOutcome:
    """Every trial in order, the best one, and why the search stopped
    (``converged``: the top candidates' neighbourhoods are all measured; ``budget``: time ran
    out, or candidates were skipped as predicted not to fit, listed in ``skipped``)."""

    trials: tuple[Trial, ...]
    best: Trial | None
    stop_reason: str
    skipped: tuple[Candidate, ...] = ()


@dataclass(frozen=True)
class Deadline:
    """The time on ``clock`` (seconds) by which measuring must end.

    A call is launched only when the deadline :meth:`allows` its predicted duration, so the
    deadline is overrun by at most the one call that ran longer than predicted.
    """

    clock: Clock
    end_s: float

    @classmethod
    def after(cls, budget_s: float, clock: Clock = time.perf_counter) -> Deadline:
        """The deadline ``budget_s`` seconds from now."""
        return cls(clock, clock() + budget_s)

    @classmethod
    def never(cls, clock: Clock = time.perf_counter) -> Deadline:
        """No deadline."""
        return cls(clock, math.inf)

    def left_s(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.end_s - self.clock()

    def allows(self, predicted_s: float) -> bool:
        """Whether a call predicted to take ``predicted_s`` seconds ends by the deadline."""
        return predicted_s <= self.left_s()

    def within(self, seconds: float) -> Deadline:
        """The earlier of this deadline and ``seconds`` from now."""
        return Deadline(self.clock, min(self.end_s, self.clock() + seconds))


def fastest_call_s(
    fn: Callable[[], object],
    *,
    clock: Clock = time.perf_counter,
    min_time_s: float = 0.2,
    min_reps: int = 3,
    max_reps: int = 1000,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    interval: IntervalTimer | None = None,
    deadline: Deadline | None = None,
    predicted_call_s: float = 0.0,
) -> float | None:
    """Seconds of the fastest of at least ``min_reps`` calls of ``fn`` (more until
    ``min_time_s`` has passed), after ``warmup`` untimed calls.

    With a ``deadline``, a call (warm-up included) is launched only when it is predicted to end
    by it: the first from ``predicted_call_s``, later ones from the call before. ``None`` when no
    timed call fitted. With an ``interval`` (CUDA events) each call is timed on the device.
    """
    predicted = predicted_call_s

    def fits() -> bool:
        return deadline is None or deadline.allows(predicted)

    for _ in range(warmup):
        if not fits():
            return None
        started = clock()
        fn()
        predicted = clock() - started
    if sync is not None:
        sync()
    best = math.inf
    began = clock()
    reps = 0
    while reps < max_reps and (reps < min_reps or clock() - began < min_time_s) and fits():
        if interval is not None:
            interval.start()
            fn()
            took = interval.stop()
        else:
            start = clock()
            fn()
            if sync is not None:
                sync()
            took = clock() - start
        best = min(best, took)
        predicted = took
        reps += 1
    return best if reps else None


def measure_rate(
    fn: Callable[[], object],
    flops: float,
    *,
    clock: Clock = time.perf_counter,
    min_time_s: float = 0.2,
    min_reps: int = 3,
    max_reps: int = 1000,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    interval: IntervalTimer | None = None,
) -> float:
    """Peak rate of ``fn`` in FLOP/s: ``flops`` over the fastest of at least ``min_reps``
    calls (more until ``min_time_s`` has passed), after ``warmup`` untimed calls.

    The fastest call, not the median: a ceiling is the best the hardware delivered. With an
    ``interval`` (CUDA events) each call is timed on the device instead of by ``clock``.
    """
    best = fastest_call_s(
        fn,
        clock=clock,
        min_time_s=min_time_s,
        min_reps=min_reps,
        max_reps=max_reps,
        warmup=warmup,
        sync=sync,
        interval=interval,
    )
    return flops / best if best else 0.0


def best_first_search(
    seeds: Sequence[Candidate],
    neighbors: Callable[[Candidate], Sequence[Candidate]],
    evaluate: Callable[[Candidate], float | None],
    *,
    budget_s: float,
    clock: Clock = time.perf_counter,
    breadth: int = 3,
    affordable: Callable[[Candidate], bool] | None = None,
    known: Mapping[Candidate, float | None] | None = None,
) -> SearchOutcome:
    """Search for the candidate with the highest rate (see the module docstring).

    ``known`` rates (measured before, e.g. by a probe) count as the first trials and are not
    measured again. A candidate for which ``affordable`` is false is skipped, not evaluated.
    Without ``known`` and ``affordable`` at least one seed is measured, even with a zero budget.
    """
    began = clock()
    rates: dict[Candidate, float | None] = dict(known or {})
    trials: list[Trial] = [Trial(c, r) for c, r in rates.items()]
    expanded: set[Candidate] = set()
    skipped: dict[Candidate, None] = {}  # insertion-ordered set

    def out_of_time() -> bool:
        return bool(trials) and clock() - began >= budget_s

    def run(candidate: Candidate) -> None:
        if candidate in rates or candidate in skipped:
            return
        if affordable is not None and not affordable(candidate):
            skipped[candidate] = None
            return
        rate = evaluate(candidate)
        rates[candidate] = rate
        trials.append(Trial(candidate, rate))

    stop = "converged"
    for seed in seeds:
        if out_of_time():
            stop = "budget"
            break
        run(seed)
    while stop != "budget":
        ranked = sorted(
            (c for c, r in rates.items() if r is not None), key=lambda c: (-(rates[c] or 0.0), c)
        )[:breadth]
        pending = [c for c in ranked if c not in expanded]
        if not pending:
            break
        target = pending[0]
        expanded.add(target)
        for neighbor in neighbors(target):
            if out_of_time():
                stop = "budget"
                break
            run(neighbor)
    if skipped:
        stop = "budget"
    measured = [t for t in trials if t.flops_per_s is not None]
    best = max(measured, key=lambda t: t.flops_per_s or 0.0) if measured else None
    return SearchOutcome(tuple(trials), best, stop, tuple(skipped))
