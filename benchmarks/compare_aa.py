"""How often ``accelscope compare`` claims a change between runs of identical code (A/A).

Makes ``--runs`` separate ``accelscope measure`` processes of one fixed configuration (the zoo's
digits CNN, batch 32, 1 thread, ``--budget`` of samples, a CI target it cannot reach so every
run samples for its whole budget, as the A/A check that found the problem did), one after
another into one store. Identical code throughout, so every claimed change is a false one. Then:

* **one run per side**: runs (0, 1), (2, 3), ... each compared with the real CLI
  (``accelscope compare A B --json``, in process) under the rule now in force, and, for the
  record, under the old rule computed from the same stored samples (percentile bootstrap of
  the pooled samples for p50/p99, Holm across the tested rows, a claim when the adjusted p is
  below 5 % and the ratio outside the ±5 % band: what compare said before);
* **three runs per side**: runs (0, 2, 4) against (1, 3, 5), (6, 8, 10) against (7, 9, 11), ...
  with ``accelscope compare A1,A2,A3 B1,B2,B3 --json`` (Welch on the runs' figures: the old
  and the new rule agree there); then ``--resample`` random draws of 6 of the runs, 3 against
  3, for a sharper (but not independent) estimate of the same rate.

A comparison "claims a change" when any of its rows says slower, faster, worse or better. The
rate comes with its exact (Clopper-Pearson) binomial 95 % interval. Each run and comparison is
one JSON line in ``--out`` as it finishes; ``--analyse`` re-runs the comparisons from the store.

    .venv/bin/python benchmarks/compare_aa.py --runs 90 --store aa.sqlite --out aa.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from accelscope.cli import main as cli_main
from accelscope.compare.metrics import METRICS, ConfigObservations, observations
from accelscope.measurement.stats import bootstrap_ratio, holm_adjust
from accelscope.store.sqlite import ResultStore

CLAIMS = {"slower", "faster", "worse", "better"}
THRESHOLD = 0.05
ALPHA = 0.05


def measure_runs(args: argparse.Namespace) -> list[str]:
    """``--runs`` fresh ``accelscope measure`` processes; their run ids, in order."""
    accelscope = Path(sys.executable).with_name("accelscope")
    command = [
        str(accelscope),
        "measure",
        args.model,
        "--batch",
        str(args.batch),
        "--threads",
        "1",
        "--budget",
        args.budget,
        "--target-ci",
        "0.1%",
        "--store",
        str(args.store),
        "--json",
    ]
    run_ids: list[str] = []
    with args.out.open("a", encoding="utf-8") as out:
        for index in range(args.runs):
            began = time.monotonic()
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            data = json.loads(done.stdout)
            result = data["results"][0]
            summary = result["measurement"]
            row = {
                "type": "run",
                "index": index,
                "run_id": data["run_id"],
                "wall_s": time.monotonic() - began,
                "samples": len(summary["samples_s"]),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            run_ids.append(str(data["run_id"]))
            print(f"run {index}: {data['run_id']} ({row['wall_s']:.1f} s)", flush=True)
    return run_ids


def _compare_json(store: Path, baseline: Sequence[str], candidate: Sequence[str]) -> dict[str, Any]:
    """The real CLI, in process: ``accelscope compare A B --json``."""
    buffer = io.StringIO()
    argv = ["compare", ",".join(baseline), ",".join(candidate), "--store", str(store), "--json"]
    with contextlib.redirect_stdout(buffer):
        code = cli_main(argv)
    if code != 0:
        raise SystemExit(f"compare exited {code}: {argv}")
    result: dict[str, Any] = json.loads(buffer.getvalue())
    return result


def _old_rule(before: ConfigObservations, after: ConfigObservations) -> dict[str, str]:
    """What compare said before, one run per side: the samples within the runs as the unit."""
    tested: list[tuple[str, float, float, float, float]] = []  # metric, ratio, low, high, p
    verdicts: dict[str, str] = {}
    for metric_id, metric in METRICS.items():
        if metric_id not in before.metrics or metric_id not in after.metrics:
            continue
        if metric.percentile is None:
            verdicts[metric.name] = "not tested"
            continue
        estimate = bootstrap_ratio(
            before.metrics[metric_id].samples,
            after.metrics[metric_id].samples,
            q=metric.percentile,
            seed=0,
        )
        tested.append((metric.name, estimate.ratio, estimate.low, estimate.high, estimate.p_value))
    adjusted = holm_adjust([p for *_, p in tested])
    band = 1.0 + THRESHOLD
    for (name, ratio, low, high, _), p in zip(tested, adjusted, strict=True):
        if p < ALPHA and ratio > band:
            verdicts[name] = "slower"
        elif p < ALPHA and ratio < 1 / band:
            verdicts[name] = "faster"
        elif low >= 1 / band and high <= band:
            verdicts[name] = "no change"
        else:
            verdicts[name] = "inconclusive"
    return verdicts


def analyse(args: argparse.Namespace, run_ids: Sequence[str]) -> None:
    """Compare the runs one per side and three per side; one JSON line per comparison."""
    with ResultStore(args.store) as store:
        configs = {}
        for run_id in run_ids:
            record = store.get_run(run_id)
            [config] = observations(record.kind, record.results, record.documents)
            configs[run_id] = config
    with args.out.open("a", encoding="utf-8") as out:
        for k in range(len(run_ids) // 2):
            a, b = run_ids[2 * k], run_ids[2 * k + 1]
            data = _compare_json(args.store, [a], [b])
            new = {row["metric"]: row["verdict"] for row in data["rows"]}
            old = _old_rule(configs[a], configs[b])
            row = {
                "type": "pair",
                "per_side": 1,
                "baseline": [a],
                "candidate": [b],
                "p50_ratio": next(
                    r["ratio"] for r in data["rows"] if r["metric"] == "time/item p50"
                ),
                "new": new,
                "old": old,
            }
            out.write(json.dumps(row) + "\n")
            print(f"1 v 1 {a} {b}: ratio {row['p50_ratio']:.3f} old {old} new {new}", flush=True)
        for k in range(len(run_ids) // 6):
            group = run_ids[6 * k : 6 * k + 6]
            data = _compare_json(args.store, group[0::2], group[1::2])
            new = {row["metric"]: row["verdict"] for row in data["rows"]}
            p50 = next(r for r in data["rows"] if r["metric"] == "time/item p50")
            row = {
                "type": "pair",
                "per_side": 3,
                "baseline": group[0::2],
                "candidate": group[1::2],
                "p50_ratio": p50["ratio"],
                "p50_low": p50["estimate"]["low"] if p50["estimate"] else None,
                "p50_high": p50["estimate"]["high"] if p50["estimate"] else None,
                "new": new,
            }
            out.write(json.dumps(row) + "\n")
            print(f"3 v 3 {group}: ratio {p50['ratio']:.3f} new {new}", flush=True)
        generator = np.random.default_rng(0)
        for _ in range(args.resample if len(run_ids) >= 6 else 0):
            chosen = [run_ids[i] for i in generator.choice(len(run_ids), 6, replace=False)]
            data = _compare_json(args.store, chosen[:3], chosen[3:])
            row = {
                "type": "resampled",
                "per_side": 3,
                "new": {row["metric"]: row["verdict"] for row in data["rows"]},
            }
            out.write(json.dumps(row) + "\n")


def _rate(claims: int, total: int) -> str:
    if total == 0:
        return "—"
    interval = stats.binomtest(claims, total).proportion_ci(0.95, method="exact")
    share = f"{claims}/{total} = {claims / total:.1%}"
    return f"{share} (95 % CI {interval.low:.1%} to {interval.high:.1%})"


def summarise(path: Path) -> None:
    """The false-change rates, per design and rule, from the JSON lines."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    runs = [line for line in lines if line["type"] == "run"]
    if runs:
        walls = [float(r["wall_s"]) for r in runs]
        samples = [int(r["samples"]) for r in runs]
        print(
            f"{len(runs)} runs, {np.median(walls):.1f} s each (median), "
            f"{np.median(samples):.0f} samples each (median)"
        )
    print(
        "| per side | comparisons | rule | claimed a change (false) | verdicts of time/item p50 |"
    )
    print("|---|---|---|---|---|")
    for per_side in (1, 3):
        group = [line for line in lines if line["type"] == "pair" and line["per_side"] == per_side]
        for rule in ("old", "new"):
            found = [line[rule] for line in group if rule in line]
            if not found:
                continue
            claims = sum(1 for verdicts in found if CLAIMS & set(verdicts.values()))
            p50: dict[str, int] = {}
            for verdicts in found:
                word = verdicts.get("time/item p50", "—")
                p50[word] = p50.get(word, 0) + 1
            words = ", ".join(f"{word} {count}" for word, count in sorted(p50.items()))
            name = "before (samples as the unit)" if rule == "old" else "now"
            if per_side == 3:
                name = "before and now (runs as the unit)"
            print(f"| {per_side} | {len(found)} | {name} | {_rate(claims, len(found))} | {words} |")
    resampled = [line["new"] for line in lines if line["type"] == "resampled"]
    if resampled:
        claims = sum(1 for verdicts in resampled if CLAIMS & set(verdicts.values()))
        print(
            f"3 per side, {len(resampled)} random draws of 6 of the runs (overlapping, so not "
            f"independent: no binomial CI): {claims} claimed a change "
            f"({claims / len(resampled):.1%})"
        )
    for per_side in (1, 3):
        ratios = [
            float(line["p50_ratio"])
            for line in lines
            if line["type"] == "pair" and line["per_side"] == per_side
        ]
        if ratios:
            print(
                f"p50 ratios, {per_side} run(s) per side: median {np.median(ratios):.3f}, "
                f"range {min(ratios):.3f} to {max(ratios):.3f}, "
                f"IQR {np.percentile(ratios, 25):.3f} to {np.percentile(ratios, 75):.3f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=90, help="separate measure processes")
    parser.add_argument("--model", default="digits-cnn")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", default="1s", help="sampling time per run")
    parser.add_argument("--store", type=Path, default=Path("compare_aa.sqlite"))
    parser.add_argument("--out", type=Path, default=Path("compare_aa.jsonl"))
    parser.add_argument(
        "--resample", type=int, default=200, help="extra random 3-vs-3 draws (not independent)"
    )
    parser.add_argument(
        "--analyse", action="store_true", help="compare the runs already in --out again"
    )
    parser.add_argument("--summarise", action="store_true", help="only print the summary")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.out)
        return
    if args.analyse:
        lines = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        run_ids = [line["run_id"] for line in lines if line["type"] == "run"]
        args.out.write_text(
            "".join(json.dumps(line) + "\n" for line in lines if line["type"] == "run")
        )
    else:
        run_ids = measure_runs(args)
    analyse(args, run_ids)
    summarise(args.out)


if __name__ == "__main__":
    main()
