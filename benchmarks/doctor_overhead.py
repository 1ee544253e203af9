"""Doctor instrumentation overhead on the compute-bound example's loop, with torch.profiler's
overhead on the same loop beside it.

One process, one model, three ways of running the same training step, interleaved round by
round (plain, instrumented, profiled, plain, ...) so drift hits all three alike:

* plain: the loop as written;
* doctor: the zero-code instrumentation installed exactly as the bootstrap child installs it
  (global hooks narrowed after the first step, optimizer/backward/DataLoader/sync/copy
  wrappers, per-step accounting; the operator census is left out: it only runs over one
  warm-up step, which is never measured);
* torch.profiler: ``torch.profiler.profile()`` (CPU activities) around the loop.

Per way: the median step time over all rounds, its 95 % interval, and the overhead vs plain
(ratio of medians). Telemetry runs in the doctor's *parent* process, so it is not part of the
child's per-step cost; it costs a few ms of one core per second (see the report).

    .venv/bin/python benchmarks/doctor_overhead.py [--rounds 7] [--steps 15] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from accelscope.doctor.inprocess.session import Session
from accelscope.measurement.stats import median_ci


def make_step(width: int) -> Callable[[], None]:
    """The compute-bound example's training step (examples/doctor/compute_bound.py)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs, targets = torch.randn(256, 256), torch.randint(0, 10, (256,))

    def step() -> None:
        loss = nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() != loss.item():  # the example logs the loss; a readback per step
            raise FloatingPointError("nan loss")

    return step


def timed(step: Callable[[], None], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def run_plain(step: Callable[[], None], count: int) -> list[float]:
    return timed(step, count)


def run_doctor(step: Callable[[], None], count: int) -> list[float]:
    session = Session(warmup=1, steps=0, probe=False, trace_steps=3)
    session.instrumentation.install()
    try:
        step()  # the first step: top-level modules found, hooks narrowed
        return timed(step, count)
    finally:
        session.instrumentation.uninstall()


def run_profiler(step: Callable[[], None], count: int) -> list[float]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        step()
        return timed(step, count)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    step = make_step(args.width)
    for _ in range(5):
        step()
    ways = {"plain": run_plain, "doctor": run_doctor, "torch.profiler": run_profiler}
    samples: dict[str, list[float]] = {name: [] for name in ways}
    per_round: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            times = way(step, args.steps)
            samples[name] += times
            per_round[name].append(statistics.median(times))
    base = statistics.median(samples["plain"])
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, width {args.width}, "
        f"{args.rounds} rounds x {args.steps} steps per way (interleaved)"
    )
    print(f"{'way':<16}{'median step':>14}{'95% CI':>22}{'overhead':>10}{'round spread':>15}")
    for name in ways:
        ordered = sorted(samples[name])
        median = statistics.median(ordered)
        low, high = median_ci(ordered)
        rounds = per_round[name]
        spread = (max(rounds) - min(rounds)) / median
        print(
            f"{name:<16}{median * 1e3:>11.2f} ms{low * 1e3:>10.2f}-{high * 1e3:.2f} ms"
            f"{(median / base - 1) * 100:>+9.2f}%{spread:>14.0%}"
        )


if __name__ == "__main__":
    main()
