"""Forward in time: MLPerf Inference round v5.1 (held out of the package) projected by `plan`'s
two inference projections, each fitted on the shipped v4.0-v5.0 table alone.

- **Capacity** (``plan --model``; :mod:`accelscope.plan.projection.calibration`): every v5.1 row
  whose part has a datasheet and whose benchmark and scenario the shipped table holds, projected
  as throughput per device with its 80 % interval, exactly as the leave-one-out does
  (:func:`accelscope.plan.projection.validation.leave_one_out`), but from the whole v4.0-v5.0 fit.
- **LLM serving** (``plan llm``; :mod:`accelscope.plan.projection.llm_serving`): every v5.1
  LLM Server system (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B) with a datasheet, projected in
  tokens/s per device at its benchmark's workload and SLO up to its own accelerator count as
  tensor-parallel degree, exactly as that module's leave-one-out does, from the shipped serving
  calibration.

The held-out rows: ``benchmarks/results/published_inference_v5_1_heldout.toml`` (its header says
how they were read). The largest misses are listed with what the data show about them (a family
or variant without its own datasheet, fp4 weights, a software stack the family's calibrating
rows did not use, a multi-node system). The same code the tests hold
(tests/plan/projection/test_forward_v5_1.py); this prints the tables for docs/plan.md.

    .venv/bin/python benchmarks/plan_forward_v5_1.py [--rows]
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from accelscope.errors import BadInputError
from accelscope.plan.accelerators import Accelerators, AcceleratorSpec, load_accelerators
from accelscope.plan.projection.calibration import Calibration, calibrated_rows, shipped_calibration
from accelscope.plan.projection.llm_serving import (
    ServingCalibration,
    holdout,
    serving_rows,
    shipped_serving_calibration,
)
from accelscope.plan.projection.published import PublishedResult, PublishedTable, load_published
from accelscope.plan.projection.validation import COVERAGE, Holdout, summarise, summary_table
from accelscope.plan.projection.workloads import benchmark

HELD_OUT = Path(__file__).parent / "results" / "published_inference_v5_1_heldout.toml"
MISSES = 8
"""Largest misses listed per projection (by |log(point / published)|)."""
_FORM_FACTORS = ("SXM", "PCIE", "NVL")


@dataclass(frozen=True)
class Forward:
    """Held-out rows projected from a fit to earlier rounds: the holdouts, each holdout's row and
    datasheet (by key), and the rows that could not be projected, with why."""

    holdouts: tuple[Holdout, ...]
    rows: dict[str, tuple[PublishedResult, AcceleratorSpec]]
    left_out: tuple[tuple[PublishedResult, str], ...]


def capacity_forward(
    calibration: Calibration, table: PublishedTable, accelerators: Accelerators
) -> Forward:
    """Every row of ``table`` projected by the capacity model of ``calibration`` (fitted without
    it): throughput per device, point and 80 % interval, as the leave-one-out projects a row."""
    model = calibration.model
    left_out: list[tuple[PublishedResult, str]] = []
    known: list[PublishedResult] = []
    for result in table.results:
        try:
            benchmark(result.benchmark)
        except BadInputError:
            left_out.append((result, f"benchmark name {result.benchmark!r} not known here"))
            continue
        known.append(result)
    rows, no_sheet = calibrated_rows(PublishedTable(tuple(known), (), table.origin), accelerators)
    left_out += no_sheet
    held: list[Holdout] = []
    by_key: dict[str, tuple[PublishedResult, AcceleratorSpec]] = {}
    for row in rows:
        o = row.observation
        if o.group not in model.groups:
            left_out.append((row.result, f"no v4.0-v5.0 row of {o.group}"))
            continue
        prediction = model.predict(o.group, o.family, o.workload_class)
        low, high = prediction.interval(COVERAGE)
        scale = row.result.per_device / math.exp(o.log_value)  # the part's 8-bit peak
        held.append(
            Holdout(
                key=row.result.key,
                family=o.family,
                workload_class=o.workload_class,
                published=row.result.per_device,
                point=prediction.point * scale,
                low=low * scale,
                high=high * scale,
                basis=prediction.basis,
            )
        )
        by_key[row.result.key] = (row.result, row.spec)
    return Forward(tuple(held), by_key, tuple(left_out))


def serving_forward(
    calibration: ServingCalibration, table: PublishedTable, accelerators: Accelerators
) -> Forward:
    """Every LLM Server system of ``table`` (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B)
    projected by the serving model of ``calibration``: tokens/s per device at its benchmark's
    workload (the calibration's, from the earlier rounds) and SLO, up to the system's own
    accelerator count as tensor-parallel degree, exactly as that module's leave-one-out."""
    rows, left_out, _ = serving_rows(table, accelerators)
    held: list[Holdout] = []
    by_key: dict[str, tuple[PublishedResult, AcceleratorSpec]] = {}
    for row in rows:
        earlier = calibration.workloads.get(row.benchmark.group)
        if earlier is None:  # the earlier rounds never ran it: no workload to project at
            left_out.append((row.result, f"no {row.benchmark.benchmark} row before v5.1"))
            continue
        held.append(holdout(row, calibration.model, earlier))
        by_key[row.result.key] = (row.result, row.spec)
    return Forward(tuple(held), by_key, tuple(left_out))


def _release(framework: str) -> str:
    """A framework string's name and version (``TensorRT 10.8``, ``vLLM 0.6.5.dev964+mlperf50``)."""
    return " ".join(framework.replace(",", " ").split()[:2]) or "?"


def visible_reasons(
    result: PublishedResult,
    spec: AcceleratorSpec,
    earlier: Sequence[tuple[PublishedResult, AcceleratorSpec]],
) -> list[str]:
    """What the data show about a held-out row against the earlier rows (``earlier``: the
    shipped table's rows with their datasheets) of its family on its benchmark and scenario:
    nothing is inferred beyond them."""
    reasons: list[str] = []
    variant = (result.variant or "").upper().split("-")[0]
    sheet = spec.name.upper()
    if variant and variant not in sheet and any(f in sheet for f in _FORM_FACTORS):
        reasons.append(f"{result.variant} part projected on the {spec.name} datasheet")
    if "weight_data_types 'fp4'" in result.notes:
        reasons.append("fp4 weights")
    if "multi-node" in result.notes:
        reasons.append("multi-node system")
    group = f"{benchmark(result.benchmark).name}/{result.scenario}"
    same = [
        (r, s)
        for r, s in earlier
        if r.family == result.family and f"{benchmark(r.benchmark).name}/{r.scenario}" == group
    ]
    if not same:
        reasons.append(f"{result.family} has no v4.0-v5.0 {group} row")
        return reasons
    stacks = sorted({_release(r.framework).split()[0] for r, _ in same})
    releases = sorted({_release(r.framework) for r, _ in same})
    if _release(result.framework).split()[0] not in stacks:
        reasons.append(
            f"stack {result.framework!r}; the family's earlier {group} rows: {', '.join(stacks)}"
        )
    elif _release(result.framework) not in releases:
        reasons.append(f"{_release(result.framework)}; earlier {group} rows: {', '.join(releases)}")
    parts = sorted({s.name for _, s in same})
    if spec.name not in parts:
        reasons.append(f"no earlier {group} row of the {spec.name} (only {', '.join(parts)})")
    return reasons


def group_label(h: Holdout) -> str:
    """A holdout's benchmark and scenario, its twins as one (``llama2-70b/Server``)."""
    _, _, _, bench, scenario = h.key.split("/")
    return f"{benchmark(bench).name}/{scenario}"


def _miss(h: Holdout) -> float:
    """How far a holdout's point is from the published figure, on the log scale (a point of 0,
    no degree that meets the SLO, is the furthest)."""
    return abs(math.log(h.point / h.published)) if h.point > 0 else math.inf


def largest_misses(
    forward: Forward,
    earlier: Sequence[tuple[PublishedResult, AcceleratorSpec]],
    count: int = MISSES,
) -> list[tuple[Holdout, list[str]]]:
    """The ``count`` holdouts furthest from their published figure (log scale), the worst of
    each family on each benchmark and scenario (its look-alikes would repeat it), with reasons."""
    worst = sorted(forward.holdouts, key=_miss, reverse=True)
    shown: dict[tuple[str, str], Holdout] = {}
    for h in worst:
        shown.setdefault((h.family, group_label(h)), h)
    picked = list(shown.values())[:count]
    return [(h, visible_reasons(*forward.rows[h.key], earlier)) for h in picked]


def _print(
    title: str,
    forward: Forward,
    earlier: Sequence[tuple[PublishedResult, AcceleratorSpec]],
    slices: Sequence[tuple[str, Callable[[Holdout], str]]],
    rows: bool,
) -> None:
    systems = {k.rsplit("/", 2)[0] for k in forward.rows}
    print(f"\n## {title}: {len(forward.holdouts)} v5.1 rows ({len(systems)} systems) projected\n")
    print(summary_table("all", summarise(forward.holdouts)))
    for name, by in slices:
        print()
        print(summary_table(name, summarise(forward.holdouts, by)))
    why = Counter(reason for _, reason in forward.left_out)
    print(f"\nleft out ({len(forward.left_out)} rows):")
    for reason, n in why.most_common():
        print(f"- {n} x {reason}")
    print("\nlargest misses (the worst of each family on each benchmark/scenario):\n")
    print("| row | published /device | point | 80 % interval | error | visible in the data |")
    print("|---|---|---|---|---|---|")
    for h, reasons in largest_misses(forward, earlier):
        print(
            f"| {h.key} | {h.published:,.1f} | {h.point:,.1f} | {h.low:,.1f}-{h.high:,.1f} | "
            f"{h.error:+.0%} | {'; '.join(reasons) or 'nothing'} |"
        )
    if rows:
        print("\n| row | published | point | 80 % interval | covered |\n|---|---|---|---|---|")
        for h in forward.holdouts:
            print(
                f"| {h.key} | {h.published:,.1f} | {h.point:,.1f} | {h.low:,.1f}-{h.high:,.1f} | "
                f"{'yes' if h.covered else 'no'} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", action="store_true", help="also print every holdout")
    args = parser.parse_args()
    started = time.perf_counter()
    held_out = load_published(HELD_OUT)
    shipped = load_published()
    accelerators = load_accelerators()
    calibration = shipped_calibration()
    earlier = [(r.result, r.spec) for r in calibration.rows]
    capacity = capacity_forward(calibration, held_out, accelerators)
    serving = serving_forward(shipped_serving_calibration(), held_out, accelerators)
    took = time.perf_counter() - started
    print(
        f"{len(held_out.results)} held-out v5.1 rows ({HELD_OUT.name}); both projections fitted "
        f"on the shipped v4.0-v5.0 table ({len(shipped.results)} rows) only; {took:.1f} s"
    )
    _print(
        "capacity (plan --model)",
        capacity,
        earlier,
        [
            ("workload class", lambda h: h.workload_class),
            ("family", lambda h: h.family),
            ("benchmark/scenario", group_label),
        ],
        args.rows,
    )
    _print(
        "LLM serving (plan llm), LLM Server rows",
        serving,
        earlier,
        [("benchmark", lambda h: h.workload_class), ("family", lambda h: h.family)],
        args.rows,
    )


if __name__ == "__main__":
    main()
