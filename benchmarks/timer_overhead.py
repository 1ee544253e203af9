"""Timer self-overhead: what the measurement loop adds to every sample.

Times an empty function with accelscope's Timer (host clock, no sync) and, beside it in the same
process, a bare ``perf_counter`` pair. The Timer's median for an empty call is its per-sample
floor: any workload's per-call time includes this much. Repeated 5 times; medians and spread.

    .venv/bin/python benchmarks/timer_overhead.py
"""

from __future__ import annotations

import statistics
import time

from accelscope.measurement.timer import Timer, TimerConfig


def _empty() -> None:
    return None


def bare_pair_ns(count: int = 200_000) -> float:
    """Median of ``count`` back-to-back perf_counter differences around an empty call, in ns."""
    deltas = []
    clock = time.perf_counter
    for _ in range(count):
        start = clock()
        _empty()
        deltas.append(clock() - start)
    return statistics.median(deltas) * 1e9


def timer_empty_ns() -> tuple[float, float, int, str]:
    """Timer's median and p99 for an empty call (ns), sample count, and stop reason."""
    config = TimerConfig(budget_s=2.0, target_rel_ci=0.02, max_samples=200_000)
    measurement = Timer(_empty, config=config).measure()
    summary = measurement.summary
    return summary.median_s * 1e9, summary.p99_s * 1e9, summary.count, measurement.stop_reason


def main() -> None:
    rows = []
    for repeat in range(5):
        median_ns, p99_ns, count, reason = timer_empty_ns()
        rows.append((repeat + 1, median_ns, p99_ns, count, reason, bare_pair_ns()))
    print(
        "| repeat | Timer median (ns) | Timer p99 (ns) | samples | stop | bare pair median (ns) |"
    )
    print("|---|---|---|---|---|---|")
    for repeat, median_ns, p99_ns, count, reason, bare in rows:
        print(
            f"| {repeat} | {median_ns:.0f} | {p99_ns:.0f} | {count} | {reason.value} | {bare:.0f} |"
        )
    medians = [row[1] for row in rows]
    bares = [row[5] for row in rows]
    print()
    timer_ns, bare_ns = statistics.median(medians), statistics.median(bares)
    print(
        f"Timer overhead per sample: median of medians {timer_ns:.0f} ns "
        f"(range {min(medians):.0f}-{max(medians):.0f} ns); bare perf_counter pair "
        f"{bare_ns:.0f} ns; ratio {timer_ns / bare_ns:.2f}x"
    )


if __name__ == "__main__":
    main()
