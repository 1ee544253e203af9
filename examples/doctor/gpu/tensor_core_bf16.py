"""Tensor-core-bound in bf16: a wide MLP under bf16 autocast, data on the GPU, no readbacks
but one ``loss.item()`` every 50 steps. The GPU's matrix units run nearly the whole step.
Expected verdict: device-bound (compute, tensor cores busy: SM activity high), with no
mixed-precision advice (it already runs bf16); what could move it is a lower precision (fp8)
or less work.

    accelscope doctor examples/doctor/gpu/tensor_core_bf16.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    width, depth, batch = size(args, 8192, 64), size(args, 6, 2), size(args, 4096, 16)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(batch, width, device=args.device)
    labels = torch.randint(0, 10, (batch,), device=args.device)
    for step in range(args.steps):
        with torch.autocast(args.device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
