"""After the search: rank what was measured in full, measure the best two (and the reference)
again in confirmation rounds, alternately, each in a fresh server, and judge them
(:func:`accelscope.tune.verdict.verdict`); when nothing ranks, say why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from accelscope.llm.documents import Arrivals
from accelscope.llm.harness import arrivals_at
from accelscope.tune.documents import TuneConfig, TuneRound, TuneVerdict
from accelscope.tune.search import Load
from accelscope.tune.space import Config, Space
from accelscope.tune.verdict import confirmation_order, verdict

__all__ = ["MeasureAgain", "Ranking", "rank_and_confirm"]

MeasureAgain = Callable[[int, Config, Arrivals], TuneRound]
"""Measure a configuration again in round ``number``, in a fresh server, at a load."""


@dataclass(frozen=True, kw_only=True)
class Ranking:
    """What the tune found: every configuration measured (in the space's order), the winner,
    the confirmed verdict, and why nothing ranked (``""`` when something did)."""

    configs: list[TuneConfig]
    winner: TuneConfig | None
    verdict: TuneVerdict | None
    rounds: list[TuneRound]
    nothing_ranked: str = ""


def rank_and_confirm(
    space: Space,
    stored: Mapping[str, TuneConfig],
    load: Load,
    *,
    confirm_rounds: int,
    rounds: Sequence[TuneRound] = (),
    measure_again: MeasureAgain,
) -> Ranking:
    """Rank the configurations measured in full by goodput; measure the best, the runner-up
    and a usable reference again in ``confirm_rounds`` alternated rounds at the winner's load
    (``rounds``: those measured before ``--resume``); judge them."""
    configs = [stored[c.key] for c in space.configurations() if c.key in stored]
    ranked = sorted(
        (c for c in configs if c.usable and c.phase == "full"),
        key=lambda c: -(c.goodput_tokens_per_s or 0.0),
    )
    done = list(rounds)
    if not ranked:
        return Ranking(
            configs=configs,
            winner=None,
            verdict=None,
            rounds=done,
            nothing_ranked=_nothing_ranked(configs),
        )
    best = ranked[0]
    runner = ranked[1] if len(ranked) > 1 else None
    reference = stored.get(space.reference.key)
    usable_reference = reference if reference is not None and reference.usable else None
    at = arrivals_at(load.capacity, best.load) if load.fixed is None and best.load else load.fixed
    keys = [best.key] + ([runner.key] if runner else [])
    if usable_reference is not None and usable_reference.key not in keys:
        keys.append(usable_reference.key)
    by_key = {c.key: c for c in space.configurations()}
    if confirm_rounds and runner is not None and at is not None:
        for number, key in confirmation_order(keys, confirm_rounds):
            if any(r.round == number and r.key == key for r in done):
                continue  # measured before (--resume)
            done.append(measure_again(number, by_key[key], at))
    judged = verdict(
        best.key,
        runner.key if runner else None,
        usable_reference.key if usable_reference else None,
        configs,
        done,
        confirm_rounds,
    )
    return Ranking(configs=configs, winner=best, verdict=judged, rounds=done)


def _nothing_ranked(configs: Sequence[TuneConfig]) -> str:
    """Why there is no winner: no server started (how each failed, the first error), or none
    of those that started met the SLO."""
    if not configs or any(c.startup_s is not None for c in configs):
        return "no configuration met the SLO: nothing to rank (see each one's why)"
    kinds = Counter(c.failure.description if c.failure else c.status for c in configs)
    how = ", ".join(f"{kind}: {count}" for kind, count in kinds.items())
    first = next((c.first_error for c in configs if c.first_error), "") or configs[0].why
    return (
        f"no configuration started: none of the {len(configs)} servers was ready ({how}); "
        f"the first error: {first}"
    )
