"""Step ``bench_sweep`` of the prepared GPU validation: the default ``bench --device cuda`` sweep
(what a user gets with no backend or precision flag) on ResNet-50 and ViT-B/16, within a budget.

On the lent GPU machine, ``validate.py`` calls :func:`bench_sweep_step`, one step per
:data:`SWEEPS` case, each sized for one device call (its sweep budget is 330 s; the step's
reference, re-measure and digest fit the 540 s call)::

    bash benchmarks/gpu/run.sh --only bench_sweep_resnet50_b256
    bash benchmarks/gpu/run.sh --only bench_sweep_resnet50_b8
    bash benchmarks/gpu/run.sh --only bench_sweep_vit

Each runs ``accelscope bench MODEL --device cuda --batch ...`` (the default GPU rows at the
batches the issue's figures need, each with its pinned-copy twin) and summarises: every row's
items/s on the device and with the host copy, compile time per shape, the winner, its standing
against the record and the roofline floor.

Here, without a GPU (``--dry-run``, and ``validate.py --cpu``): the same model's default GPU sweep
planned on a fake H100 in process (``bench --dry-run``), so the rows the real run would measure
are checked on the CPU::

    PYTHONPATH=src .venv/bin/python benchmarks/gpu/bench_sweep.py --dry-run bench_sweep_vit
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SWEEPS",
    "SweepCase",
    "bench_sweep_step",
    "dry_run",
    "standing_text",
    "summarise",
]


@dataclass(frozen=True)
class SweepCase:
    """One model's sweep on the GPU: its batches, budgets, and the step's name."""

    step: str
    model: str
    batches: tuple[int, ...]
    budget_s: int
    """The sweep's own budget (``--budget``): what is left is listed as skipped, with why."""
    measure_budget: str = "2s"
    accuracy_samples: int = 64


SWEEPS = (
    # one batch per step, so each fits one device call (about 6 minutes: the eager rows, two
    # cold compiles and their twins, which hit inductor's cache) and a session runs what it can
    # afford, in this order: b256 is the issue's >= 30k img/s device-resident figure, b8 its
    # launch-bound >= 5k (CUDA graphs), ViT-B/16 where float8 and compile behave differently
    SweepCase(step="bench_sweep_resnet50_b256", model="resnet50", batches=(256,), budget_s=330),
    SweepCase(step="bench_sweep_resnet50_b8", model="resnet50", batches=(8,), budget_s=330),
    SweepCase(step="bench_sweep_vit", model="vit-b-16", batches=(64,), budget_s=330),
)


def sweep_args(case: SweepCase, store: str) -> list[str]:
    """The ``accelscope`` arguments of ``case``'s sweep on the GPU."""
    return [
        "bench",
        case.model,
        "--device",
        "cuda",
        "--batch",
        ",".join(str(b) for b in case.batches),
        "--budget",
        f"{case.budget_s}s",
        "--measure-budget",
        case.measure_budget,
        "--accuracy-samples",
        str(case.accuracy_samples),
        "--confirm-rounds",
        "4",
        "--timeout",
        "240s",
        "--json",
        "--store",
        store,
    ]


def _rate(result: dict[str, Any]) -> float | None:
    """Items/s at the median call time, from a stored result's raw samples."""
    measurement = result.get("measurement") or {}
    samples = sorted(measurement.get("samples_s") or [])
    if result.get("status") != "ok" or not samples:
        return None
    median = samples[len(samples) // 2]
    return float(measurement["items_per_call"]) / median if median > 0 else None


def _label(spec: dict[str, Any]) -> str:
    options = [tuple(o) for o in spec.get("options") or [] if tuple(o) != ("inputs", "pinned")]
    precision = (
        "tf32" if spec.get("tf32") and spec.get("precision") == "fp32" else spec["precision"]
    )
    opts = "".join(f"/{k}={v}" for k, v in sorted(options))
    return f"{spec['backend']}/{precision}/b{spec['batch_size']}{opts}"


def summarise(doc: dict[str, Any]) -> tuple[list[list[str]], dict[str, Any]]:
    """Rows (configuration, items/s on device, with copy, compile s, status) and figures (each
    row's two rates and compile time; the winner) of a ``bench --json`` document."""
    rows: dict[str, dict[str, Any]] = {}
    for result in doc.get("results") or []:
        spec = result.get("spec") or {}
        label = _label(spec)
        pinned = ["inputs", "pinned"] in (spec.get("options") or [])
        entry = rows.setdefault(label, {"status": "", "reason": ""})
        entry["pinned_items_per_s" if pinned else "items_per_s"] = _rate(result)
        if not pinned:
            entry["status"] = result.get("status", "")
            entry["reason"] = result.get("status_reason", "")
            if spec.get("backend") == "compile":
                entry["compile_s"] = result.get("prepare_s")
    table = [
        [
            label,
            f"{e['items_per_s']:,.0f}" if e.get("items_per_s") else "—",
            f"{e['pinned_items_per_s']:,.0f}" if e.get("pinned_items_per_s") else "—",
            f"{e['compile_s']:.0f} s" if e.get("compile_s") else "—",
            e["status"] if e["status"] == "ok" else f"{e['status']}: {e['reason']}"[:70],
        ]
        for label, e in rows.items()
    ]
    figures = {
        "rows": rows,
        "verdict": doc.get("verdict"),
        "best": doc.get("best"),
        "standing": doc.get("standing"),
    }
    return table, figures


def standing_text(standing: dict[str, Any] | None) -> str:
    """One line: the best device-resident figure as a share of each record and of the floor."""
    if not standing:
        return "no GPU row measured, so no standing"
    parts = [f"best {standing['best']} {standing['best_items_per_s']:,.0f}/s"]
    parts += [
        f"{r['share']:.0%} of {r['benchmark'].split(',')[0]} {r['scenario']} "
        f"({r['items_per_s']:,.0f}/s)"
        for r in standing["records"]
    ]
    share = standing.get("floor_share")
    parts.append(
        f"{share:.0%} of the roofline floor ({standing['floor_items_per_s']:,.0f}/s)"
        if share is not None
        else f"floor not known: {standing['floor_derivation']}"
    )
    return "; ".join(parts)


def bench_sweep_step(
    run: Any,
    allowed: float,
    case: SweepCase,
    outcome: Callable[..., Any],
    table: Callable[..., Any],
) -> Any:
    """The step for ``validate.py``: ``run`` is its Runner (``cli``, ``python``, ``gpu``,
    ``store``, ``record_command``); ``outcome`` and ``table`` its ``Outcome`` and ``Table``."""
    out = outcome(case.step, "ok")
    if run.gpu:
        result = run.cli(*sweep_args(case, str(run.store)), timeout_s=allowed, label=case.step)
    else:
        result = run.python(__file__, "--dry-run", case.step, timeout_s=allowed, label=case.step)
    run.record_command(out, result)
    doc = result.json()
    if not isinstance(doc, dict):
        out.status, out.note = "failed", result.why()
        return out
    if not run.gpu:
        runs = [c["label"] for c in doc["configurations"] if c["runs"]]
        out.summary = f"{case.model}: {len(runs)} of {len(doc['configurations'])} rows would run"
        out.figures = {"would_run": runs}
        return out
    rows, figures = summarise(doc)
    out.figures = figures
    out.summary = f"{case.model}: {standing_text(doc.get('standing'))}"
    out.note = str(doc.get("verdict", ""))
    out.tables.append(
        table(
            f"bench {case.model} --device cuda (the default GPU sweep)",
            ["configuration", "items/s on device", "with H2D copy", "compile", "status"],
            rows,
        )
    )
    if not result.ok:
        out.note = f"{result.why()}; {out.note}"
    return out


def dry_run(case: SweepCase) -> dict[str, Any]:
    """``case``'s default GPU sweep planned on a fake H100 in this process: the document
    ``bench --dry-run --json`` prints (no GPU needed, none touched)."""
    from accelscope.commands.bench.workflow import BenchRequest, preview
    from accelscope.hardware.fingerprint import collect_environment
    from accelscope.spec import Device
    from accelscope.testing.fake_gpus import H100_SXM, FakeGpus

    with FakeGpus([H100_SXM]):
        env = collect_environment()
        plan = preview(
            BenchRequest(
                model=case.model, device=Device.CUDA, batch_sizes=case.batches, threads=(1,)
            ),
            environment=env,
        )
    return {
        "model": plan.model.ref,
        "gpu": env.gpus[0].name,
        "configurations": [
            {"label": c.spec.label(), "runs": c.runnable, "skip_reason": c.skip_reason}
            for c in plan.candidates
        ],
        "notes": list(plan.notes),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="plan on a fake H100; run nothing")
    parser.add_argument("step", choices=[c.step for c in SWEEPS])
    args = parser.parse_args(argv)
    if not args.dry_run:
        parser.error("without --dry-run, validate.py runs this step (see the module docstring)")
    json.dump(dry_run(next(c for c in SWEEPS if c.step == args.step)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
