"""Measure, then tighten, checked: leave-one-out over the published table where one OTHER
published row of the held-out row's family and workload class plays the user's measurement.

For each held-out row, the first row (table order) of the same family and class from another
system is added to the model as a user's run is (:meth:`EfficiencyModel.updated`, with the
run-to-run variance a stored run carries); the fit leaves out the held-out row's system on its
benchmark and every row of the measuring system. Median |error|, 80 % coverage and median
interval width (hi/lo), before and after, two ways:

- ``published``: the family keeps its other published rows (a family MLPerf has results of);
- ``unpublished``: every row of the family is left out of the fit (a part with no published
  result: T4, A10G, Inferentia2, Trainium), so the measurement is all the model knows of it.

The same code the tests hold (tests/plan/projection/test_tighten.py).

    .venv/bin/python benchmarks/plan_tighten_loo.py [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from accelscope.plan.projection.calibration import shipped_calibration
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD, tighten_leave_one_out
from accelscope.plan.projection.validation import summarise, summary_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every holdout, before and after, here")
    args = parser.parse_args()
    calibration = shipped_calibration()
    print(
        f"{len(calibration.rows)} published rows calibrated; a measurement's run-to-run spread "
        f"{RUN_TO_RUN_LOG_SD:.3f} (log scale) on top of its class's spread"
    )
    dump: dict[str, list[dict[str, object]]] = {}
    for unpublished in (False, True):
        mode = "unpublished" if unpublished else "published"
        started = time.perf_counter()
        held = tighten_leave_one_out(calibration, unpublished=unpublished)
        took = time.perf_counter() - started
        print(f"\n### family {mode} ({len(held)} rows, {took:.1f} s)\n")
        for when in ("before", "after"):
            holdouts = [getattr(t, when) for t in held]
            print(f"{when}:\n")
            print(summary_table("all", summarise(holdouts)))
            print()
            print(summary_table("workload class", summarise(holdouts, lambda h: h.workload_class)))
            print()
        dump[mode] = [
            {
                "measured": t.measured,
                "before": {**dataclasses.asdict(t.before), "covered": t.before.covered},
                "after": {**dataclasses.asdict(t.after), "covered": t.after.covered},
            }
            for t in held
        ]
    if args.json:
        args.json.write_text(json.dumps(dump, indent=1))


if __name__ == "__main__":
    main()
