"""Launch-bound: a deep stack of tiny layers whose kernels each run for a few microseconds, so
the GPU finishes each one before the host has launched the next. The data is already on the
GPU and nothing is read back: the GPU idles between kernels while Python and the CUDA launch
path issue them. Expected verdict: launch-bound (advice: CUDA graphs, torch.compile, a larger
batch), never bf16.

    accelscope doctor examples/doctor/gpu/launch_bound.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    depth, width, batch = size(args, 96, 8), size(args, 64, 16), size(args, 32, 4)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width)]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(batch, width, device=args.device)
    labels = torch.randint(0, 10, (batch,), device=args.device)
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
