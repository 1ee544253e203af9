"""Leave-one-out over MLPerf's LLM Server results (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B):
how wrong ``plan llm``'s serving projection is, and how often its 80 % interval holds the
published tokens/s per accelerator.

Each system (round, submitter, system; its -99 and -99.9 twins are one row; its rows of every
benchmark together) is left out, the efficiency model is fitted to the other systems, and the
left-out row's tokens/s per accelerator is projected on its datasheet at its benchmark's
workload and Server SLO, up to its own accelerator count as tensor-parallel degree. The same
code the tests hold (tests/plan/test_llm_serving.py); this prints the tables for
docs/BENCHMARKS.md and docs/plan.md.

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
    workloads = "; ".join(
        f"{group}: {w.input_tokens:,.0f} in / {w.output_tokens:.0f} out"
        for group, w in calibration.workloads.items()
    )
    print(
        f"{len(calibration.rows)} LLM Server rows ({calibration.rows_text()}), "
        f"{len(calibration.left_out)} left out; workloads {workloads}; {took:.1f} s\n"
    )
    print(
        summary_table(
            "benchmark", [*summarise(holdouts, lambda h: h.workload_class), *summarise(holdouts)]
        )
    )
    print()
    print(summary_table("family", summarise(holdouts, lambda h: h.family)))
    if args.rows:
        print("\n| system | published | point | 80 % interval | covered |\n|---|---|---|---|---|")
        for h in holdouts:
            print(
                f"| {h.key} | {h.published:,.0f} | {h.point:,.0f} | "
                f"{h.low:,.0f}-{h.high:,.0f} | {'yes' if h.covered else 'no'} |"
            )


if __name__ == "__main__":
    main()
