"""Best-first search for the fastest kernel, and the rate measurement of one kernel.

The search is pure: candidates, their neighbours and their measured rates come from callables,
time from a clock, so tests drive it with a fake rate table and a fake clock. It evaluates the
seeds, then repeatedly expands (measures every unseen neighbour of) the best not-yet-expanded
candidate among the current top ``breadth``, until the top ``breadth`` are all expanded (a local
optimum) or the time budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelscope.hardware.sync import IntervalTimer

__all__ = ["Candidate", "SearchOutcome", "Trial", "best_first_search", "measure_rate"]

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
    (``converged``: the top candidates' neighbourhoods are all measured; ``budget``)."""

    trials: tuple[Trial, ...]
    best: Trial | None
    stop_reason: str


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
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    best = float("inf")
    began = clock()
    reps = 0
    while reps < max_reps and (reps < min_reps or clock() - began < min_time_s):
        if interval is not None:
            interval.start()
            fn()
            best = min(best, interval.stop())
        else:
            start = clock()
            fn()
            if sync is not None:
                sync()
            best = min(best, clock() - start)
        reps += 1
    return flops / best if best > 0 else 0.0


def best_first_search(
    seeds: Sequence[Candidate],
    neighbors: Callable[[Candidate], Sequence[Candidate]],
    evaluate: Callable[[Candidate], float | None],
    *,
    budget_s: float,
    clock: Clock = time.perf_counter,
    breadth: int = 3,
) -> SearchOutcome:
    """Search for the candidate with the highest rate (see the module docstring).

    At least one seed is always measured, even with a zero budget.
    """
    began = clock()
    rates: dict[Candidate, float | None] = {}
    trials: list[Trial] = []
    expanded: set[Candidate] = set()

    def out_of_time() -> bool:
        return bool(trials) and clock() - began >= budget_s

    def run(candidate: Candidate) -> None:
        if candidate in rates:
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
    measured = [t for t in trials if t.flops_per_s is not None]
    best = max(measured, key=lambda t: t.flops_per_s or 0.0) if measured else None
    return SearchOutcome(tuple(trials), best, stop)
