"""CLI start-up cost of two source trees, interleaved: `accelscope runs list` and `--help`.

Each round runs the same command once from tree A and once from tree B (order alternating),
in fresh processes, and the ratio B/A of the medians is reported with a bootstrap 95 % CI.

    python benchmarks/cli_startup.py --old /tmp/old/src --new src --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

COMMANDS = {
    "runs list": ["runs", "list", "--store", "{store}"],
    "--help": ["--help"],
    "plan api": [
        "plan",
        "api",
        "--tokens-per-month",
        "2B",
        "--input-price",
        "0.5",
        "--output-price",
        "1.5",
        "--instance",
        "g6.xlarge",
        "--throughput",
        "800",
    ],
}


def _time(src: str, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "accelscope.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "none.db")
        for name, template in COMMANDS.items():
            command = [part.replace("{store}", store) for part in template]
            old: list[float] = []
            new: list[float] = []
            _time(args.old, command), _time(args.new, command)  # warm the page cache
            for i in range(args.rounds):
                pair = [(args.old, old), (args.new, new)]
                for src, into in pair if i % 2 == 0 else pair[::-1]:
                    into.append(_time(src, command))
            ratio = statistics.median(new) / statistics.median(old)
            ci = bootstrap(
                (np.array(new), np.array(old)),
                lambda a, b: np.median(a) / np.median(b),
                n_resamples=2000,
                vectorized=False,
                paired=True,
                random_state=0,
            ).confidence_interval
            print(
                f"| {name} | {statistics.median(old):.2f} s | {statistics.median(new):.2f} s "
                f"| {ratio:.2f} [{ci.low:.2f}, {ci.high:.2f}] |"
            )


if __name__ == "__main__":
    main()
