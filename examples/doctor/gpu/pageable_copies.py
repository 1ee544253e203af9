"""Copy-bound: every step copies a large batch (64 x 3 x 448 x 448 fp32, 154 MB) from pageable
host memory to a tiny CNN on the GPU. The copy goes through a staging buffer at a fraction of
the link's speed and the GPU computes for a small share of the step (on an H200: HtoD pageable
memcpy 75-81 % of the step, kernels 10 %). Expected verdict: copy-bound, pageable (advice:
pinned memory + ``non_blocking``, keep the data on the device, send uint8), never bf16.

    accelscope doctor examples/doctor/gpu/pageable_copies.py --steps 20
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "", steps=100)
    batch, side = size(args, 64, 2), size(args, 448, 32)
    host_batch = torch.randn(batch, 3, side, side)  # pageable: never pinned
    labels = torch.randint(0, 10, (batch,))
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=4, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    ).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        images, targets = host_batch.to(args.device), labels.to(args.device)
        loss = nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
