"""Busy but under-filled: a convolutional network trained at batch 1 on 224 x 224 images. Each
kernel is long enough to keep the GPU's queue full, so a utilisation counter reads near 100 %,
but each one fills a few of the GPU's multiprocessors (SM activity low). Expected verdict:
under-filled (advice: a larger batch, fusion, CUDA graphs), never bf16.

    accelscope doctor examples/doctor/gpu/underfilled_batch1.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    side, channels = size(args, 224, 32), size(args, 32, 8)
    blocks: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()]
    for _ in range(size(args, 12, 2)):
        blocks += [nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
    model = model.to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    image = torch.randn(1, 3, side, side, device=args.device)  # batch 1
    label = torch.randint(0, 10, (1,), device=args.device)
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(image), label)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
