"""Leave-one-out over MLPerf's Llama-2-70B Server results: how wrong ``plan llm``'s serving
projection is, and how often its 80 % interval holds the published tokens/s per accelerator.

Each system (round, submitter, system; its -99 and -99.9 twins are one row) is left out, the
efficiency model is fitted to the other systems, and the left-out system's tokens/s per
accelerator is projected on its datasheet at MLPerf's workload and SLO (TTFT <= 2 s, TPOT <=
200 ms), up to its own accelerator count as tensor-parallel degree. The same code the tests
hold (tests/plan/test_llm_serving.py); this prints the table for docs/BENCHMARKS.md and
docs/plan.md.

    .venv/bin/python benchmarks/plan_llm_loo.py [--rows]
"""

from __future__ import annotations

import argparse
import time

from accelscope.plan.projection.llm_serving import leave_one_out, shipped_serving_calibration
from accelscope.plan.projection.validation import summarise, summary_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="also print every holdout")
    args = parser.parse_args()
    started = time.perf_counter()
    calibration = shipped_serving_calibration()
    holdouts = leave_one_out(calibration)
    took = time.perf_counter() - started
    workload = calibration.workload
    print(
        f"{len(calibration.rows)} Llama-2-70B Server systems, {len(calibration.left_out)} left "
        f"out; workload {workload.input_tokens:.0f} input (assumed) / "
        f"{workload.output_tokens:.0f} output tokens; {took:.1f} s\n"
    )
    print(summary_table("family", [*summarise(holdouts, lambda h: h.family), *summarise(holdouts)]))
    if args.rows:
        print("\n| system | published | point | 80 % interval | covered |\n|---|---|---|---|---|")
        for h in holdouts:
            print(
                f"| {h.key} | {h.published:,.0f} | {h.point:,.0f} | "
                f"{h.low:,.0f}-{h.high:,.0f} | {'yes' if h.covered else 'no'} |"
            )


if __name__ == "__main__":
    main()
