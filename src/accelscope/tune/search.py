"""How a tune spends its time: the full grid for a small space, screening for a large one,
and the time budget.

- **grid** (spaces of at most ``grid_max`` configurations): every configuration gets the full
  measurement (a capacity search at the SLO, or the fixed load).
- **screen** (larger spaces): the reference gets the full measurement; every other
  configuration one short trial at the reference's capacity (or the fixed load), ranked by
  goodput there; the best ``finalists`` then get the full measurement. What was only screened
  is said so in the table.
- **budget**: before a configuration starts, the time it will likely take (the mean of those
  measured so far, in the same phase) is set against what is left; one that would not fit is
  skipped and named.

:func:`search` runs it: it decides what to measure, in which phase and at which load, and hands
each configuration to the tuner's ``measure`` (:class:`accelscope.tune.tuner.Tuner`), skipping
what ``--resume`` found measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accelscope.errors import BadInputError
from accelscope.llm.documents import Arrivals
from accelscope.llm.harness import arrivals_at
from accelscope.tune.documents import CapacityKind, StrategyName, TuneConfig
from accelscope.tune.outcome import Phase
from accelscope.tune.space import Config, Space

__all__ = [
    "DEFAULT_FINALISTS",
    "DEFAULT_GRID_MAX",
    "Budget",
    "Load",
    "MeasureOne",
    "Strategy",
    "choose_strategy",
    "search",
]

DEFAULT_GRID_MAX = 8
DEFAULT_FINALISTS = 3


@dataclass(frozen=True)
class Strategy:
    """The search chosen and why."""

    name: StrategyName
    why: str
    finalists: int = DEFAULT_FINALISTS


def choose_strategy(
    candidates: int,
    requested: str = "auto",
    grid_max: int = DEFAULT_GRID_MAX,
    finalists: int = DEFAULT_FINALISTS,
) -> Strategy:
    """``grid`` for ``candidates`` up to ``grid_max`` (or when asked), else ``screen``."""
    if requested not in ("auto", "grid", "screen"):
        raise BadInputError(f"--search {requested!r}: give auto, grid or screen")
    if grid_max < 1 or finalists < 1:
        raise BadInputError("--grid-max and --finalists must be >= 1")
    if requested == "grid" or (requested == "auto" and candidates <= grid_max):
        why = "asked for" if requested == "grid" else f"{candidates} <= {grid_max} configurations"
        return Strategy("grid", f"the full grid: every configuration measured in full ({why})")
    why = "asked for" if requested == "screen" else f"{candidates} > {grid_max} configurations"
    return Strategy(
        "screen",
        f"screening ({why}): one short trial each at the reference's load, then the best "
        f"{finalists} measured in full",
        finalists,
    )


@dataclass
class Budget:
    """The tune's time budget (``None``: no limit), and what each phase has cost."""

    limit_s: float | None
    began: float = field(default_factory=time.monotonic)
    spent: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.limit_s is not None and self.limit_s <= 0:
            raise BadInputError("--budget must be positive")

    @property
    def elapsed_s(self) -> float:
        """Seconds since the tune began."""
        return time.monotonic() - self.began

    def record(self, phase: str, seconds: float) -> None:
        """One configuration of ``phase`` took ``seconds``."""
        self.spent.setdefault(phase, []).append(seconds)

    def expected_s(self, phase: str) -> float:
        """What the next configuration of ``phase`` will likely take (0 before any)."""
        found: Sequence[float] = self.spent.get(phase) or self.spent.get("full") or ()
        return sum(found) / len(found) if found else 0.0

    def fits(self, phase: str) -> bool:
        """Whether another configuration of ``phase`` fits what is left."""
        if self.limit_s is None:
            return True
        return self.elapsed_s + self.expected_s(phase) <= self.limit_s


@dataclass(frozen=True, kw_only=True)
class Load:
    """The load configurations are measured at: ``fixed``, else a capacity search by
    ``capacity`` (starting at ``capacity_start``; ``None``: the harness's own start)."""

    fixed: Arrivals | None = None
    capacity: CapacityKind = "concurrency"
    capacity_start: float | None = None

    def screening(self, reference: TuneConfig | None) -> Arrivals:
        """A screening trial's load: the fixed load, else the reference's capacity (else the
        capacity search's start)."""
        if self.fixed is not None:
            return self.fixed
        if reference is not None and reference.load is not None:
            return arrivals_at(self.capacity, reference.load)
        return arrivals_at(self.capacity, self.capacity_start or 1.0)


MeasureOne = Callable[[Config, Phase, Arrivals | None], TuneConfig]
"""Start a configuration's server, measure it in a phase at a load (``None``: a capacity
search), stop it, and return (and keep) its document."""


def search(
    space: Space,
    strategy: Strategy,
    load: Load,
    *,
    budget: Budget,
    stored: Mapping[str, TuneConfig],
    measure: MeasureOne,
) -> list[str]:
    """Measure the reference in full, then the grid in full or its screening and finalists
    (:data:`MeasureOne` keeps each in ``stored``); returns what was skipped, and why."""
    skipped: list[str] = []

    def one(config: Config, phase: Phase, at: Arrivals | None) -> None:
        done = stored.get(config.key)
        if done is not None and (done.phase == "full" or phase == "screen"):
            return  # measured before (--resume)
        if not budget.fits(phase):
            skipped.append(f"{config.key} ({phase}): the --budget would run out")
            return
        budget.record(phase, measure(config, phase, at).wall_s)

    one(space.reference, "full", load.fixed)
    candidates = [c for c in space.configurations() if c.key != space.reference.key]
    if strategy.name == "grid":
        for config in candidates:
            one(config, "full", load.fixed)
        return skipped
    screen_load = load.screening(stored.get(space.reference.key))
    for config in candidates:
        one(config, "screen", screen_load)
    screened = sorted(
        (stored[c.key] for c in candidates if c.key in stored),
        key=lambda c: -(c.goodput_tokens_per_s or -1.0),
    )
    finalists = [c for c in screened if c.usable][: strategy.finalists]
    for found in finalists:
        one(next(c for c in candidates if c.key == found.key), "full", load.fixed)
    for found in screened:
        if found not in finalists and found.usable:
            skipped.append(f"{found.key}: screened only (not among the best {strategy.finalists})")
    return skipped
