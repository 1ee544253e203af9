"""Do DataLoader workers pay for the input-bound example on this machine? The example's loop run
standalone (no doctor) with num_workers x torch intra-op threads x image side, steps/s after 10
warm-up steps over 100 steps, one configuration after another in one script.

    .venv/bin/python benchmarks/doctor_workers_check.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "doctor"))
import input_bound


def steps_per_s(workers: int, threads: int, side: int, steps: int = 100) -> float:
    torch.set_num_threads(threads)
    input_bound.SIDE = side
    loader = DataLoader(
        input_bound.CompressedImages(2048), batch_size=16, shuffle=True, num_workers=workers
    )
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = iter(loader)
    for _ in range(10):
        next(batches)
    started, done = time.perf_counter(), 0
    for images, labels in batches:
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done += 1
        if done == steps:
            break
    return done / (time.perf_counter() - started)


def main() -> None:
    for side in (48, 96):
        base = steps_per_s(0, 2, side)
        print(f"side {side}: workers=0 threads=2 {base:.1f} steps/s (baseline)")
        for workers, threads in ((2, 2), (2, 1), (1, 1)):
            rate = steps_per_s(workers, threads, side)
            print(
                f"side {side}: workers={workers} threads={threads} {rate:.1f} steps/s "
                f"= {rate / base:.2f}x"
            )


if __name__ == "__main__":
    main()
