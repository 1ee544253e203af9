"""plan llm's measure-then-tighten, checked against the real vLLM on this CPU (issue 40).

``plan llm`` projects serving with one efficiency ``eta`` per accelerator family on a floor
(``accelscope.plan.projection.llm_serving``): ``TPOT(B) = decode step(B) + B / output x
prefill``, both terms over the part's bandwidth and peak times ``eta``. A user who measures two
points on their own part adds them to the model as rows of its family (the update
``tightened_serving`` makes), and the interval for every other load narrows. This checks that
on hardware at hand: vLLM's CPU build serving a Llama built in code (random weights, large
enough that the weights' reads matter: ~90 M parameters, fp32), measured by ``accelscope llm`` at
five concurrencies, twice, in alternating order. This CPU enters as a datasheet of its own,
its bandwidth and fp32 peak measured here (numpy copy, torch matmul on both cores).

For every pair of concurrencies taken as "the two measured points", the other three are
projected before (the pooled prior: no row for this family) and after the update, and the
script reports the median |error| of TPOT and how often the 80 % interval held the measured
median TPOT.

    .venv/bin/python benchmarks/plan_llm_cpu_tighten.py \\
        --out benchmarks/results/plan_llm_cpu_tighten.json
    # the figures again from a previous run's TPOTs, no server (the model has changed since):
    .venv/bin/python benchmarks/plan_llm_cpu_tighten.py \\
        --replay benchmarks/results/plan_llm_cpu_tighten.json --out ...

Three projections of each held-out load: ``before`` (the pooled prior), ``after`` (each
measured point's efficiency added as a row: one efficiency, the model before the fixed step
cost) and ``after_step_cost`` (:func:`tightened_serving` on a run with the pair's TPOTs: a
fixed cost per step and one efficiency fitted by least squares, the model now shipped).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from accelscope.commands.llm.workflow import LlmRequestSettings, llm
from accelscope.hardware.fingerprint import collect_environment
from accelscope.llm.workload import Lengths, Workload
from accelscope.plan.accelerators import AcceleratorSpec
from accelscope.plan.llm_memory import shape_from_config
from accelscope.plan.projection.efficiency import Measured, Observation
from accelscope.plan.projection.llm_serving import (
    ServedModel,
    ServingRun,
    ServingSlo,
    ServingWorkload,
    StepOverhead,
    TpotPoint,
    served_model,
    shipped_serving_calibration,
    tightened_serving,
    tpot_floor,
    widened,
)
from accelscope.plan.projection.tighten import RUN_TO_RUN_LOG_SD
from accelscope.plan.projection.validation import COVERAGE
from accelscope.testing.llm_model import build_tiny_llama
from accelscope.testing.real_llm_servers import VllmServe

CONCURRENCIES = (1, 2, 4, 8, 16)
INPUT, OUTPUT = 64, 32
FAMILY = "this-cpu"


def measure_bandwidth() -> float:
    """Bytes/s of a numpy copy of 256 MiB (read + write), best of five."""
    src = np.ones(2**25, dtype=np.float64)
    dst = np.empty_like(src)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


def measure_fp32_peak() -> float:
    """fp32 FLOP/s of a 2048 x 2048 matmul on every core, best of five."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    torch.mm(a, b)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * 2048**3 / best


def _spec(bandwidth: float, peak: float) -> AcceleratorSpec:
    """This CPU as a datasheet: its bandwidth and fp32 peak as measured here, and its memory
    (the floor's limit on sequences in flight; far above what 16 sequences of 96 tokens need)."""
    measured_here = {
        "source": "measured here by benchmarks/plan_llm_cpu_tighten.py",
        "date": "2026-11-28",
    }
    return AcceleratorSpec.model_validate(
        {
            "name": "this CPU",
            "family": FAMILY,
            "kind": "cpu",
            "vendor": "AMD",
            "memory_bytes": psutil.virtual_memory().total,
            "memory_bandwidth_bytes_per_s": bandwidth,
            "peak_ops_per_s": {"fp32": peak},
            "sources": {
                "memory_bytes": measured_here,
                "memory_bandwidth_bytes_per_s": measured_here,
                "peak_ops_per_s": measured_here,
            },
        }
    )


def _model(directory: Path) -> tuple[Path, ServedModel]:
    model_dir = build_tiny_llama(
        directory / "llama", hidden=1024, layers=8, heads=16, kv_heads=4,
        intermediate=2816, vocab=400,
    )  # fmt: skip
    config = json.loads((model_dir / "config.json").read_text())
    return model_dir, served_model(shape_from_config(config), "fp32", name="llama-90m")


def measure(model_dir: Path, rounds: int) -> dict[int, list[float]]:
    """TPOT p50 per concurrency, ``rounds`` times in alternating order, one server."""
    tpots: dict[int, list[float]] = {c: [] for c in CONCURRENCIES}
    env = collect_environment()
    with VllmServe(model_dir, dtype="float32", max_num_seqs=16, kv_cache_gib=2.0,
                   prefix_caching=False) as server:  # fmt: skip
        for round_ in range(rounds):
            order = CONCURRENCIES if round_ % 2 == 0 else tuple(reversed(CONCURRENCIES))
            for c in order:
                outcome = llm(
                    LlmRequestSettings(
                        url=server.url, model=server.model, concurrencies=(c,),
                        requests=max(8, 2 * c), tokenizer=model_dir, ignore_eos=True,
                        workload=Workload(input_tokens=Lengths(INPUT, INPUT),
                                          output_tokens=Lengths(OUTPUT, OUTPUT)),
                        timeout_s=600.0, stop_at_saturation=False,
                    ),
                    store_path=None,
                    environment=env,
                )  # fmt: skip
                [trial] = outcome.document.trials
                tpot = trial.summary.metrics.tpot_s.p50
                assert tpot is not None and trial.summary.errors == 0
                tpots[c].append(tpot)
                print(f"round {round_ + 1} concurrency {c:>2}: TPOT p50 {tpot * 1e3:.1f} ms")
    return tpots


def _projected(
    prediction: Any,
    floor_s: float,
    measured_s: float,
    overhead: StepOverhead | None = None,
) -> dict[str, Any]:
    """A held-out load's TPOT: the point, the 80 % interval (with a fitted step cost, its own
    spread added as ``project_serving`` adds it), the error and whether the interval held."""
    low, high = prediction.interval(COVERAGE)
    overhead_s = overhead.seconds if overhead is not None else 0.0
    point = overhead_s + floor_s / prediction.point
    slow, fast = overhead_s + floor_s / low, overhead_s + floor_s / high
    if overhead is not None:
        fast, slow = widened(point, fast, slow, overhead.relative_sd(floor_s))
    return {
        "tpot_ms": point * 1e3,
        "interval_ms": [fast * 1e3, slow * 1e3],
        "error": point / measured_s - 1,
        "covered": fast <= measured_s <= slow,
        "hi_lo": slow / fast,
    }


def evaluate(
    tpots: dict[int, list[float]], model: ServedModel, spec: AcceleratorSpec
) -> dict[str, Any]:
    """Every pair of concurrencies as the user's two measured points; the other three
    projected before (the pooled prior), after one efficiency per point (the old update), and
    after ``tightened_serving`` (a fixed step cost and one efficiency fitted on the pair)."""
    workload = ServingWorkload(INPUT, OUTPUT)
    measured = {c: statistics.median(v) for c, v in tpots.items()}
    floor = {c: tpot_floor(model, spec, workload, c) for c in CONCURRENCIES}
    eta = {c: floor[c] / measured[c] for c in CONCURRENCIES}
    print("eta per concurrency: " + ", ".join(f"{c}: {e:.3f}" for c, e in eta.items()))
    calibration = shipped_serving_calibration()
    level = calibration.level_for(model, workload)
    group, klass = level.group, level.benchmark
    before = calibration.model.predict(group, FAMILY, klass)
    rows: list[dict[str, Any]] = []
    for pair in itertools.combinations(CONCURRENCIES, 2):
        points = [
            Measured(Observation(group, FAMILY, klass, math.log(eta[c])),
                     RUN_TO_RUN_LOG_SD**2, f"concurrency {c}")
            for c in pair
        ]  # fmt: skip
        one_eta = calibration.model.updated(points).predict(group, FAMILY, klass)
        run = ServingRun(
            run_id=f"pair {pair[0]},{pair[1]}", spec=spec, model=model, workload=workload,
            slo=ServingSlo(60.0, 10.0), devices=1,
            tokens_per_s_per_device=pair[1] / measured[pair[1]],
            points=tuple(TpotPoint(c, measured[c]) for c in pair),
        )  # fmt: skip
        tightened = tightened_serving([run], calibration)
        overhead = tightened.overheads.get(FAMILY)
        stepped = tightened.model.predict(group, FAMILY, klass)
        for c in CONCURRENCIES:
            if c in pair:
                continue
            rows.append({
                "measured_at": list(pair), "concurrency": c, "tpot_ms": measured[c] * 1e3,
                "between": pair[0] < c < pair[1],
                "overhead_ms": overhead.seconds * 1e3 if overhead else None,
                "before": _projected(before, floor[c], measured[c]),
                "after": _projected(one_eta, floor[c], measured[c]),
                "after_step_cost": _projected(stepped, floor[c], measured[c], overhead),
            })  # fmt: skip
    summary: dict[str, Any] = {}
    for where, keep in (("between", True), ("outside", False), ("all", None)):
        chosen = [r for r in rows if keep is None or r["between"] is keep]
        for name in ("before", "after", "after_step_cost"):
            found = [r[name] for r in chosen]
            summary[f"{where}/{name}"] = {
                "n": len(found),
                "median_abs_error": statistics.median(abs(f["error"]) for f in found),
                "worst_abs_error": max(abs(f["error"]) for f in found),
                "coverage": sum(f["covered"] for f in found) / len(found),
                "median_hi_lo": statistics.median(f["hi_lo"] for f in found),
            }
            s = summary[f"{where}/{name}"]
            print(
                f"{where:>8} {name:>16}: n {s['n']:>2}, median |error| "
                f"{s['median_abs_error']:.1%} (worst {s['worst_abs_error']:.1%}), coverage "
                f"{s['coverage']:.0%}, median hi/lo {s['median_hi_lo']:.2f}"
            )
    return {"eta": eta, "rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--replay", type=Path, default=None,
        help="a previous --out: evaluate its measured TPOTs again (no server)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.replay is not None:
        previous = json.loads(args.replay.read_text())
        bandwidth, peak = previous["bandwidth_bytes_per_s"], previous["fp32_flops_per_s"]
        tpots = {int(c): v for c, v in previous["tpot_s"].items()}
    else:
        bandwidth, peak = measure_bandwidth(), measure_fp32_peak()
    print(
        f"this CPU: copy bandwidth {bandwidth / 1e9:.2f} GB/s, fp32 matmul {peak / 1e9:.1f} GFLOP/s"
    )
    spec = _spec(bandwidth, peak)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, model = _model(Path(tmp))
        print(
            f"model: {model.params / 1e6:.1f} M parameters, {model.weights_bytes / 1e6:.0f} MB fp32"
        )
        if args.replay is None:
            tpots = measure(model_dir, args.rounds)
    found = evaluate(tpots, model, spec)
    if args.out:
        args.out.write_text(json.dumps({
            "bandwidth_bytes_per_s": bandwidth, "fp32_flops_per_s": peak,
            "params": model.params, "tpot_s": tpots, **found,
        }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
