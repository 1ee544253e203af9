"""A compute-bound FP32 training loop: a wide MLP whose matrix multiplies take nearly all of
each step. On a CPU with a bf16 fast path (AMX-BF16, AVX512-BF16) it leaves that unit idle.

Run it alone (``python compute_bound.py``) or under the doctor::

    accelscope doctor examples/doctor/compute_bound.py --steps 20
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.manual_seed(0)
    width = args.width
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
    inputs = torch.randn(256, 256)
    targets = torch.randint(0, 10, (256,))
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
