"""fp32 without mixed precision: the same wide MLP as ``tensor_core_bf16.py`` in plain fp32
(torch's default: IEEE fp32 matmuls, no TF32). The GPU is busy the whole step, on the slow fp32
path. Expected verdict: device-bound (compute), advice bf16 autocast, and the bf16 what-if
measures it several times faster.

    accelscope doctor examples/doctor/gpu/fp32_matmul.py --steps 20 --what-if bf16
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    width, depth, batch = size(args, 4096, 64), size(args, 6, 2), size(args, 2048, 16)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(batch, width, device=args.device)
    labels = torch.randint(0, 10, (batch,), device=args.device)
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
