"""The confirmed winner: the best and the runner-up (and the reference) measured again, each in
a fresh server, alternately, and their goodputs set against each other round by round.

One measurement per configuration in its own server process says nothing about which is
faster: servers of one configuration differ from start to start (the machine, the allocator,
the KV-cache layout), so the search's single figures rank, and the confirmation decides. Each
round measures every configuration once, in an order that alternates (A B R, then R B A), at
the winner's load; the ratio of goodputs is the geometric mean of the per-round ratios with a
Student-t 95 % interval on the log scale (:func:`accelscope.measurement.stats.paired_ratio`):
the spread between server processes is in that interval. An interval that holds 1 is "not
ranked: either is as good here"; with no confirmation round, the verdict is "cannot tell" and
says what would tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from accelscope.measurement.stats import RatioEstimate, process_ratio
from accelscope.tune.documents import TuneConfig, TuneRound, TuneVerdict

__all__ = ["confirmation_order", "verdict"]


def confirmation_order(keys: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, key) in measuring order: forward in odd rounds, backward in even ones."""
    order = []
    for number in range(1, rounds + 1):
        sequence = keys if number % 2 == 1 else list(reversed(keys))
        order += [(number, key) for key in sequence]
    return order


def _paired(
    rounds: Sequence[TuneRound], baseline: str, candidate: str
) -> tuple[RatioEstimate | None, str, int]:
    """(the interval over complete rounds, why there is none, the rounds) by the one rule for
    ratios between processes (:func:`accelscope.measurement.stats.process_ratio`): an interval
    needs two or more rounds."""
    by_round: dict[int, dict[str, float]] = {}
    for found in rounds:
        if found.goodput_tokens_per_s:
            by_round.setdefault(found.round, {})[found.key] = found.goodput_tokens_per_s
    pairs = [
        (v[baseline], v[candidate]) for v in by_round.values() if baseline in v and candidate in v
    ]
    if not pairs:
        return None, "no round measured both", 0
    judged = process_ratio([b for b, _ in pairs], [c for _, c in pairs], paired=True)
    if judged.estimate is None:
        return None, judged.why, len(pairs)
    return judged.estimate, "", len(pairs)


def _interval(ratio: RatioEstimate) -> str:
    high = "unbounded" if math.isinf(ratio.high) else f"{ratio.high:.2f}"
    return f"{ratio.ratio:.2f}x (95 % CI {ratio.low:.2f} to {high}, {ratio.units})"


def verdict(
    best: str,
    runner_up: str | None,
    reference: str | None,
    configs: Sequence[TuneConfig],
    rounds: Sequence[TuneRound],
    confirm_rounds: int,
) -> TuneVerdict:
    """The verdict on ``best`` against ``runner_up`` and the gain over ``reference``."""
    by_key = {c.key: c for c in configs}
    searched = by_key[best].goodput_tokens_per_s or 0.0
    if runner_up is None:
        text = f"{best}: the only configuration that met the SLO ({searched:,.1f} good tokens/s)"
        return TuneVerdict(
            best=best, text=text, gain_text=_gain_text(best, reference, None, by_key)
        )
    ratio, missing, rounds_done = _paired(rounds, runner_up, best)
    if ratio is None:
        other = by_key[runner_up].goodput_tokens_per_s or 0.0
        single = searched / other if other else float("inf")
        text = (
            f"cannot tell: {best} measured {single:.2f}x {runner_up} in the search, one server "
            "process each, which includes the spread between server starts; "
            + (
                "give --confirm-rounds 2 or more to measure both again, alternately"
                if confirm_rounds == 0
                else f"the confirmation gave no interval ({missing}): give --confirm-rounds "
                f"{max(2, confirm_rounds + 1)} or more"
            )
        )
        return TuneVerdict(
            best=best, runner_up=runner_up, rounds=rounds_done, text=text,
            gain_text=_gain_text(best, reference, None, by_key),
        )  # fmt: skip
    ranked = ratio.separated and ratio.ratio > 1.0
    if ranked:
        text = f"{best} gives {_interval(ratio)} the good tokens/s of {runner_up} at the SLO"
    elif ratio.separated:
        text = (
            f"the search's order did not hold: {runner_up} gives {1 / ratio.ratio:.2f}x the "
            f"good tokens/s of {best} when both were measured again ({_interval(ratio)})"
        )
    else:
        text = (
            f"not ranked: either is as good here ({best} vs {runner_up}: {_interval(ratio)}, "
            "the interval holds 1)"
        )
    gain = _paired(rounds, reference, best)[0] if reference and reference != best else None
    return TuneVerdict(
        best=best,
        runner_up=runner_up,
        rounds=rounds_done,
        ratio=ratio,
        ranked=ranked,
        gain=gain,
        text=text,
        gain_text=_gain_text(best, reference, gain, by_key),
    )


def _gain_text(
    best: str, reference: str | None, gain: RatioEstimate | None, by_key: dict[str, TuneConfig]
) -> str:
    if reference is None:
        return "no gain over the reference: the reference did not meet the SLO"
    if reference == best:
        return "the reference is the best configuration"
    if gain is not None:
        if gain.separated:
            return f"{best} over the reference ({reference}): {_interval(gain)}"
        return f"over the reference ({reference}): no difference shown ({_interval(gain)})"
    ours = by_key[best].goodput_tokens_per_s or 0.0
    theirs = by_key[reference].goodput_tokens_per_s or 0.0
    single = ours / theirs if theirs else float("inf")
    return (
        f"over the reference ({reference}): {single:.2f}x in the search, one server process "
        "each: cannot tell without confirmation rounds"
    )
