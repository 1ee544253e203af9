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

The ablations of docs/BENCHMARKS.md (session 13) re-fit the calibration with parts of it taken
away: ``--benchmarks llama2-70b`` (only those rows), ``--prompt-tokens llama2-70b=1024`` (the
assumption the calibration used to make), ``--no-interconnect`` (no all-reduce priced).
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

from accelscope.plan.accelerators import Accelerators, load_accelerators
from accelscope.plan.projection import llm_serving
from accelscope.plan.projection.llm_serving import (
    ServingCalibration,
    calibrate_serving,
    leave_one_out,
)
from accelscope.plan.projection.published import load_published
from accelscope.plan.projection.validation import summarise, summary_table


def calibration_of(
    benchmarks: list[str], prompt_tokens: dict[str, float], interconnect: bool
) -> ServingCalibration:
    """The serving calibration of the shipped table, of ``benchmarks`` only (all: empty), with
    their mean prompt tokens replaced by ``prompt_tokens``, with or without the datasheets'
    interconnect figures."""
    chosen = tuple(
        b.model_copy(
            update={"mean_input_tokens": prompt_tokens.get(b.benchmark, b.mean_input_tokens)}
        )
        for b in llm_serving.mlperf_benchmarks()
        if not benchmarks or b.benchmark in benchmarks
    )
    accelerators = load_accelerators()
    if not interconnect:
        unlinked = {
            "interconnect_bytes_per_s": None,
            "interconnect_peers": None,
            "interconnect_topology": "switch",
        }
        accelerators = Accelerators(
            tuple(s.model_copy(update=unlinked) for s in accelerators.specs), accelerators.origin
        )
    with mock.patch.object(llm_serving, "mlperf_benchmarks", lambda: chosen):
        return calibrate_serving(load_published(), accelerators)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="also print every holdout")
    parser.add_argument("--benchmarks", default="", help="comma-separated: only these rows")
    parser.add_argument(
        "--prompt-tokens", action="append", default=[], metavar="BENCHMARK=N",
        help="replace a benchmark's mean prompt tokens",
    )  # fmt: skip
    parser.add_argument("--no-interconnect", action="store_true", help="no all-reduce priced")
    args = parser.parse_args()
    prompt = {k: float(v) for k, v in (item.split("=", 1) for item in args.prompt_tokens)}
    started = time.perf_counter()
    calibration = calibration_of(
        [b for b in args.benchmarks.split(",") if b], prompt, not args.no_interconnect
    )
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
