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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from accelscope.errors import BadInputError

__all__ = ["DEFAULT_FINALISTS", "DEFAULT_GRID_MAX", "Budget", "Strategy", "choose_strategy"]

DEFAULT_GRID_MAX = 8
DEFAULT_FINALISTS = 3

StrategyName = Literal["grid", "screen"]


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
