"""What the Ray executor costs and what it buys, on a real local Ray cluster on this machine.

1. **Overhead per configuration**: the same measurement task (``digits-cnn``, eager fp32,
   batch 8, 1 thread, ``--measure-budget``) run through the local executor and through the Ray
   executor on a one-node cluster, alternately (L R R L ...), ``--rounds`` times each; the
   difference of the medians of the wall time per task, with a bootstrap 95 % CI.
2. **Two nodes vs one**: the same sweep of ``--configs`` configurations (batch 1..N, 1 thread)
   on a cluster with one node of the type, then with two; wall time of each sweep. Both nodes
   share this machine's cores, so this measures the driver's parallelism, not a real fleet.
3. **Store throughput**: results per second the SQLite store takes, one commit per result
   (as a sweep commits), with results of 200 raw samples each.
4. **Driver cost per result**: CPU time the driver spends per finished Ray task (submit, wait,
   decode, record), from (2).

    python benchmarks/ray_executor.py --rounds 8 --configs 8 --out ray.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy import stats

from accelscope.commands.bench.workflow import BenchRequest, bench
from accelscope.hardware.fingerprint import collect_environment
from accelscope.measurement.timer import TimerConfig
from accelscope.result import Status
from accelscope.spec import Precision, RunSpec
from accelscope.store.sqlite import ResultStore
from accelscope.sweep.executor import LocalExecutor
from accelscope.sweep.ray_executor import RayExecutor
from accelscope.sweep.worker import WorkerTask
from accelscope.testing import fake_result
from accelscope.testing.ray_cluster import LocalRayCluster


def _task(node_type: str, budget_s: float) -> WorkerTask:
    spec = RunSpec(
        model="digits-cnn",
        backend="eager",
        precision=Precision.FP32,
        batch_size=8,
        threads=1,
        node_type=node_type,
    )
    return WorkerTask(
        spec=spec,
        model_ref="digits-cnn",
        environment=collect_environment(),
        timer=TimerConfig(budget_s=budget_s),
    )


def _diff_ci(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Median(b) - median(a) with a bootstrap 95 % CI (independent resampling)."""
    result = stats.bootstrap(
        (np.asarray(b), np.asarray(a)),
        lambda x, y: np.median(x) - np.median(y),
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        random_state=0,
    )
    low, high = result.confidence_interval
    return statistics.median(b) - statistics.median(a), float(low), float(high)


def overhead(rounds: int, budget_s: float) -> dict[str, object]:
    local_s: list[float] = []
    ray_s: list[float] = []
    with LocalRayCluster(["pool"]) as cluster:
        began = time.perf_counter()
        with RayExecutor(address=cluster.address, node_types=("pool",)) as ray:
            connect_s = time.perf_counter() - began
            local = LocalExecutor()
            for i in range(rounds):
                order = ("local", "ray") if i % 2 == 0 else ("ray", "local")
                for which in order:
                    t0 = time.perf_counter()
                    if which == "local":
                        outcome = local.run(_task("", budget_s))
                        local_s.append(time.perf_counter() - t0)
                    else:
                        outcome = ray.run(_task("pool", budget_s))
                        ray_s.append(time.perf_counter() - t0)
                    assert outcome.result is not None and outcome.result.status is Status.OK
    diff, low, high = _diff_ci(local_s, ray_s)
    return {
        "rounds": rounds,
        "measure_budget_s": budget_s,
        "local_task_s": local_s,
        "ray_task_s": ray_s,
        "local_median_s": statistics.median(local_s),
        "ray_median_s": statistics.median(ray_s),
        "overhead_s": diff,
        "overhead_ci_s": [low, high],
        "connect_s": connect_s,
    }


def scaling(configs: int, budget_s: float) -> dict[str, object]:
    out: dict[str, object] = {"configs": configs, "measure_budget_s": budget_s}
    for nodes in (1, 2):
        with LocalRayCluster(["pool"] * nodes) as cluster, tempfile.TemporaryDirectory() as d:
            request = BenchRequest(
                model="digits-cnn",
                backends=("eager",),
                precisions=(Precision.FP32,),
                batch_sizes=tuple(range(1, configs + 1)),
                threads=(1,),
                measure_budget_s=budget_s,
                accuracy_samples=16,
                confirm_rounds=0,
                executor="ray",
                ray_address=cluster.address,
                node_types=("pool",),
            )
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            began = time.perf_counter()
            outcome = bench(request, store_path=Path(d) / "r.db")
            wall = time.perf_counter() - began
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            ok = sum(1 for r in outcome.results if r.status is Status.OK)
            driver_cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
            out[f"{nodes}_node"] = {
                "wall_s": wall,
                "sweep_wall_s": outcome.wall_time_s,
                "ok": ok,
                "driver_cpu_s": driver_cpu,
                "nodes_used": len({r.node for r in outcome.results if r.node}),
            }
    return out


def store_throughput(count: int) -> dict[str, object]:
    env = collect_environment()
    base = fake_result(env)
    samples = tuple(0.01 + i * 1e-6 for i in range(200))
    measurement = dataclasses.replace(base.measurement, samples_s=samples)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as d, ResultStore(Path(d) / "r.db") as store:
        run_id = store.start_run("bench", "resnet50", "benchmark", env, {})
        results = [
            dataclasses.replace(
                base,
                measurement=measurement,
                spec=dataclasses.replace(base.spec, batch_size=i + 1, node_type="pool"),
            )
            for i in range(count)
        ]
        began = time.perf_counter()
        for result in results:
            store.add_result(run_id, result)
        elapsed = time.perf_counter() - began
        store.finish_run(run_id, "complete")
    return {"results": count, "seconds": elapsed, "results_per_s": count / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--budget", type=float, default=1.0, help="measure budget per task, s")
    parser.add_argument("--store-results", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report: dict[str, object] = {
        "cpu": collect_environment().cpu.model_name,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    report["store"] = store_throughput(args.store_results)
    print(json.dumps(report["store"]), flush=True)
    report["overhead"] = overhead(args.rounds, args.budget)
    print(
        json.dumps({k: v for k, v in report["overhead"].items() if "task_s" not in k}), flush=True
    )  # type: ignore[union-attr]
    report["scaling"] = scaling(args.configs, args.budget)
    print(json.dumps(report["scaling"]), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
