"""The real-time load generator against queueing theory: threads, the wall clock and a fake
system under test (no model), the counterpart of the simulated-clock unit tests.

M/M/1 (exponential service) and M/D/1 (fixed service) at utilisation 0.5. Each seed runs the
same schedule and service draws three ways: in simulated time (exact for that sample), and in
real time with a sleeping and a busy-waiting system under test. "vs theory" mixes sampling
noise with real-time effects; "vs sim" compares the same draws, so it isolates what real time
adds (wake-ups, thread hand-offs, other processes). The busy-wait runs Python code and holds
the GIL, so it delays the generator's own thread: its lag shows that.

The per-hop columns (means, µs) come from each query's own stamps: "idle" is scheduled arrival
to start when the server was free, "turn" is the previous batch's end to the start of a
queued one (the hand-back), "SUT+" is how much longer the fake ran than its drawn service time
(its sleep's overshoot: ``--plain-sleep`` uses one ``time.sleep``, as before the harness's
precise waits). The harness floor (a null system under test on the same path) comes first.

    .venv/bin/python benchmarks/load_queueing.py                 # 5 ms service, 2500 queries
    .venv/bin/python benchmarks/load_queueing.py --service-ms 2 --queries 5000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from accelscope.load.batcher import NO_BATCHING
from accelscope.load.clock import SimClock
from accelscope.load.executor import SimulatedExecutor, ThreadedExecutor
from accelscope.load.fakes import ExponentialService, FixedService, SleepingSUT
from accelscope.load.floor import measure_harness_floor
from accelscope.load.schedule import Query, arrival_offsets_s, sample_indices
from accelscope.load.sources import OpenSchedule
from accelscope.load.summary import Scenario, TrialSettings, TrialSummary, summarise_trial
from accelscope.load.sut import ServiceModel
from accelscope.load.trial import QueryStatus, TrialLimits, TrialRecord, run_trial


class Recorded:
    """A service model that keeps its draws (one batch of one query each: no batching)."""

    def __init__(self, inner: ServiceModel) -> None:
        self.inner = inner
        self.draws: dict[int, float] = {}

    def service_time_s(self, queries: Sequence[Query]) -> float:
        seconds = self.inner.service_time_s(queries)
        self.draws[queries[0].index] = seconds
        return seconds


@dataclass
class Run:
    summary: TrialSummary
    idle_s: list[float]
    turn_s: list[float]
    over_s: list[float]


def theory_s(kind: str, service_s: float, rho: float) -> float:
    mu = 1.0 / service_s
    if kind == "M/M/1":
        return 1.0 / (mu - rho * mu)
    return 1.0 / mu + rho / (2.0 * mu * (1.0 - rho))


def hops(record: TrialRecord, draws: dict[int, float]) -> tuple[list[float], ...]:
    idle, turn, over = [], [], []
    previous_end = None
    for i in range(record.issued):
        if record.status[i] is not QueryStatus.OK:
            continue
        scheduled, started, finished = (
            record.scheduled_s[i],
            record.started_s[i],
            record.finished_s[i],
        )
        if previous_end is None or previous_end <= scheduled:
            idle.append(started - scheduled)
        else:
            turn.append(started - previous_end)
        if i in draws:
            over.append(finished - started - draws[i])
        previous_end = finished
    return idle, turn, over


def one_run(
    kind: str, mode: str, seed: int, service_s: float, rate: float, queries: int, plain: bool
) -> Run:
    service: ServiceModel = FixedService(service_s)
    if kind == "M/M/1":
        service = ExponentialService(service_s, seed=seed + 1000)  # independent of arrivals
    recorded = Recorded(service)
    settings = TrialSettings(
        min_queries=queries, min_duration_s=0.0, seed=seed, query_timeout_s=60.0, max_lag_p99_s=1.0
    )
    if mode == "simulated":
        executor: ThreadedExecutor | SimulatedExecutor = SimulatedExecutor(recorded, SimClock())
    else:
        sut = SleepingSUT(service=recorded, spin=mode == "spin", precise=not plain)
        executor = ThreadedExecutor([sut])
    offsets = arrival_offsets_s(rate, min_queries=queries, min_duration_s=0.0, seed=seed)
    source = OpenSchedule(offsets, sample_indices(len(offsets), settings.pool_size, seed))
    limits = TrialLimits(
        query_timeout_s=settings.query_timeout_s, stall_limit_s=settings.stall_limit_s
    )
    try:
        record = run_trial(source, executor, NO_BATCHING, limits)
    finally:
        executor.close()
    summary = summarise_trial(
        record, Scenario.SERVER, NO_BATCHING, settings, offered_rate_per_s=rate
    )
    return Run(summary, *hops(record, recorded.draws))


def _us(values: list[float]) -> str:
    return f"{statistics.fmean(values) * 1e6:6.0f}" if values else f"{'-':>6}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-ms", type=float, default=5.0)
    parser.add_argument("--queries", type=int, default=2500)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--modes", default="sleep,spin")
    parser.add_argument(
        "--plain-sleep", action="store_true", help="the fake sleeps with one time.sleep"
    )
    args = parser.parse_args()
    service_s = args.service_ms / 1e3
    rate = args.rho / service_s
    floor = measure_harness_floor()
    print(
        f"harness floor: p50 {floor.latency.p50_s * 1e3:.3f} ms, p90 "
        f"{floor.latency.p90_s * 1e3:.3f} ms, p99 {floor.latency.p99_s * 1e3:.3f} ms, mean "
        f"{floor.latency.mean_s * 1e3:.3f} ms per query; lag p50 {floor.lag.p50_s * 1e3:.3f} "
        f"ms, p99 {floor.lag.p99_s * 1e3:.3f} ms (null system under test, {floor.queries} "
        f"queries at {floor.rate_per_s:g} q/s)"
    )
    print(
        f"service mean {args.service_ms:g} ms, utilisation {args.rho:g}, rate {rate:g} q/s, "
        f"{args.queries} queries per run, seeds 0..{args.repeats - 1}, "
        f"{'plain' if args.plain_sleep else 'precise'} fake sleep, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'queue':<6} {'system':<10} {'theory ms':>9} {'mean ms':>8} {'vs theory':>9} "
        f"{'vs sim':>7} {'lag p99 ms':>10} {'idle us':>7} {'turn us':>7} "
        f"{'SUT+ us':>7}"
    )
    for kind in ("M/M/1", "M/D/1"):
        expected = theory_s(kind, service_s, args.rho)
        sims = [
            one_run(kind, "simulated", s, service_s, rate, args.queries, args.plain_sleep)
            for s in range(args.repeats)
        ]
        sim_mean = statistics.median(t.summary.latency.mean_s for t in sims)
        print(
            f"{kind:<6} {'simulated':<10} {expected * 1e3:9.3f} {sim_mean * 1e3:8.3f} "
            f"{sim_mean / expected - 1:+9.1%} {0:+7.1%} {0:10.3f}"
        )
        for mode in args.modes.split(","):
            runs = [
                one_run(kind, mode, s, service_s, rate, args.queries, args.plain_sleep)
                for s in range(args.repeats)
            ]
            mean = statistics.median(t.summary.latency.mean_s for t in runs)
            vs_sim = statistics.median(
                r.summary.latency.mean_s / s.summary.latency.mean_s - 1
                for r, s in zip(runs, sims, strict=True)
            )
            lag_ms = statistics.median(t.summary.lag.p99_s for t in runs) * 1e3
            idle = [v for r in runs for v in r.idle_s]
            turn = [v for r in runs for v in r.turn_s]
            over = [v for r in runs for v in r.over_s]
            print(
                f"{kind:<6} {mode:<10} {expected * 1e3:9.3f} {mean * 1e3:8.3f} "
                f"{mean / expected - 1:+9.1%} {vs_sim:+7.1%} {lag_ms:10.3f} {_us(idle):>7} "
                f"{_us(turn):>7} {_us(over):>7}"
            )


if __name__ == "__main__":
    main()
