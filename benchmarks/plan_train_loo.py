"""Leave-one-out over MLPerf Training's decoder results: how wrong ``plan train``'s time
projection is, and how often its 80 % interval holds the published minutes; then the forward
check on round v5.1 (held out of the package); then measure-then-tighten (another system's
published row of the family plays the user's ``--measured-step``).

Each system (round, submitter, system) is left out, the MFU model is fitted to the other
systems' rows, and the left-out row's mean minutes are projected from the tokens its runs
consumed, its accelerator count and its datasheet's 8-bit peak. The forward check projects
every v5.1 row with a datasheet (``benchmarks/results/published_training_v5_1_heldout.toml``)
from the v4.0-v5.0 fit alone. The same code the tests hold (tests/plan/test_train_time.py);
this prints the tables for docs/BENCHMARKS.md and docs/plan.md.

    .venv/bin/python benchmarks/plan_train_loo.py [--rows]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from accelscope.plan.accelerators import load_accelerators
from accelscope.plan.projection.validation import Holdout, summarise, summary_table
from accelscope.plan.train_time import (
    forward_check,
    leave_one_out,
    load_published_training,
    shipped_training_calibration,
    tighten_training_leave_one_out,
)

HELD_OUT = Path(__file__).parent / "results" / "published_training_v5_1_heldout.toml"


def _rows(holdouts: Sequence[Holdout]) -> None:
    print(
        "\n| row | published min | projected min | 80 % interval | covered |\n|---|---|---|---|---|"
    )
    for h in holdouts:
        print(
            f"| {h.key} | {h.published:,.2f} | {h.point:,.2f} | {h.low:,.2f}-{h.high:,.2f} | "
            f"{'yes' if h.covered else 'no'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="also print every holdout")
    args = parser.parse_args()
    started = time.perf_counter()
    calibration = shipped_training_calibration()
    holdouts = leave_one_out(calibration)
    took = time.perf_counter() - started
    dropped = sum(1 for _, why in calibration.left_out if "not a decoder" not in why)
    print(
        f"{len(calibration.rows)} MLPerf Training v4.0-v5.0 decoder rows calibrate the MFU, "
        f"{dropped} decoder rows left out (no datasheet); {took:.1f} s\n"
    )
    by_benchmark = summarise(holdouts, lambda h: h.workload_class)
    print(summary_table("benchmark (leave-one-out)", [*by_benchmark, *summarise(holdouts)]))
    print()
    print(summary_table("family (leave-one-out)", summarise(holdouts, lambda h: h.family)))
    if args.rows:
        _rows(holdouts)
    forward, left_out = forward_check(
        calibration, load_published_training(HELD_OUT), load_accelerators()
    )
    skipped = sorted({r.family for r, why in left_out if "datasheet" in why})
    print(
        f"\nforward check: {len(forward)} v5.1 rows projected from v4.0-v5.0; "
        f"{len(left_out)} left out (no datasheet for {', '.join(skipped)}; or not a decoder)\n"
    )
    print(
        summary_table(
            "v5.1 benchmark", [*summarise(forward, lambda h: h.workload_class), *summarise(forward)]
        )
    )
    print()
    print(summary_table("v5.1 family", summarise(forward, lambda h: h.family)))
    if args.rows:
        _rows(forward)
    for unpublished in (False, True):
        held = tighten_training_leave_one_out(calibration, unpublished=unpublished)
        label = "no MLPerf row for the family" if unpublished else "the family has MLPerf rows"
        print()
        print(
            summary_table(
                f"measured step, {label}",
                [
                    *summarise([t.before for t in held], lambda h: "before"),
                    *summarise([t.after for t in held], lambda h: "after"),
                ],
            )
        )


if __name__ == "__main__":
    main()
