"""The real-time load generator against queueing theory: threads, the wall clock and a fake
system under test (no model), the counterpart of the simulated-clock unit tests.

M/M/1 (exponential service) and M/D/1 (fixed service) at utilisation 0.5. Each seed runs the
same schedule and service draws three ways: in simulated time (exact for that sample), and in
real time with a sleeping and a busy-waiting system under test. "vs theory" mixes sampling
noise with real-time effects; "vs sim" compares the same draws, so it isolates what real time
adds (sleep overshoot, thread wake-ups, other processes). The busy-wait runs Python code and
holds the GIL, so it delays the generator's own thread: its lag shows that.

    .venv/bin/python benchmarks/load_queueing.py                 # 5 ms service, 2500 queries
    .venv/bin/python benchmarks/load_queueing.py --service-ms 2 --queries 5000 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics

from accelscope.load.batcher import NO_BATCHING
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor, ThreadedExecutor
from accelscope.load.fakes import ExponentialService, FixedService, SleepingSUT
from accelscope.load.scenarios import run_server
from accelscope.load.summary import TrialSettings, TrialSummary
from accelscope.load.sut import ServiceModel


def theory_s(kind: str, service_s: float, rho: float) -> float:
    mu = 1.0 / service_s
    if kind == "M/M/1":
        return 1.0 / (mu - rho * mu)
    return 1.0 / mu + rho / (2.0 * mu * (1.0 - rho))


def one_run(kind: str, mode: str, seed: int, service_s: float, rate: float,
            queries: int) -> TrialSummary:  # fmt: skip
    service: ServiceModel = FixedService(service_s)
    if kind == "M/M/1":
        service = ExponentialService(service_s, seed=seed + 1000)  # independent of arrivals
    settings = TrialSettings(min_queries=queries, min_duration_s=0.0, seed=seed,
                             query_timeout_s=60.0, max_lag_p99_s=1.0)  # fmt: skip
    if mode == "simulated":
        executor: ThreadedExecutor | SimulatedExecutor = SimulatedExecutor(service, SimClock())
    else:
        executor = ThreadedExecutor([SleepingSUT(service, spin=mode == "spin")])
    try:
        return run_server(executor, rate, NO_BATCHING, settings)
    finally:
        executor.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-ms", type=float, default=5.0)
    parser.add_argument("--queries", type=int, default=2500)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="sleep,spin")
    args = parser.parse_args()
    service_s = args.service_ms / 1e3
    rate = args.rho / service_s
    print(f"service mean {args.service_ms:g} ms, utilisation {args.rho:g}, rate {rate:g} q/s, "
          f"{args.queries} queries per run, seeds 0..{args.repeats - 1}")  # fmt: skip
    print(f"{'queue':<6} {'system':<10} {'theory ms':>9} {'mean ms':>8} {'vs theory':>9} "
          f"{'vs sim':>7} {'lag p99 ms':>10}")  # fmt: skip
    for kind in ("M/M/1", "M/D/1"):
        expected = theory_s(kind, service_s, args.rho)
        sims = [one_run(kind, "simulated", s, service_s, rate, args.queries)
                for s in range(args.repeats)]  # fmt: skip
        sim_mean = statistics.median(t.latency.mean_s for t in sims)
        print(f"{kind:<6} {'simulated':<10} {expected * 1e3:9.3f} {sim_mean * 1e3:8.3f} "
              f"{sim_mean / expected - 1:+9.1%} {0:+7.1%} {0:10.3f}")  # fmt: skip
        for mode in args.modes.split(","):
            runs = [one_run(kind, mode, s, service_s, rate, args.queries)
                    for s in range(args.repeats)]  # fmt: skip
            mean = statistics.median(t.latency.mean_s for t in runs)
            vs_sim = statistics.median(r.latency.mean_s / s.latency.mean_s - 1
                                       for r, s in zip(runs, sims, strict=True))  # fmt: skip
            lag_ms = statistics.median(t.lag.p99_s for t in runs) * 1e3
            print(f"{kind:<6} {mode:<10} {expected * 1e3:9.3f} {mean * 1e3:8.3f} "
                  f"{mean / expected - 1:+9.1%} {vs_sim:+7.1%} {lag_ms:10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
