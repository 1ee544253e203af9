"""Sync-bound: a training loop that logs every parameter's gradient norm with ``.item()``
(about 150 readbacks a step), as a debugging hook left in. Each readback waits for the GPU and
then the host issues the next small kernel: the GPU is busy a small share of the step (on an
H200 the CUPTI timeline read 11-15 %). Expected verdict: sync-bound (advice: keep the values on
the device, read them every N steps), never compute-bound, never bf16.

    accelscope doctor examples/doctor/gpu/sync_bound.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    depth, width, batch = size(args, 74, 4), size(args, 512, 32), size(args, 256, 8)
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(batch, 64, device=args.device)
    labels = torch.randint(0, 10, (batch,), device=args.device)
    log: dict[str, float] = {}
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for name, parameter in model.named_parameters():  # one readback per parameter
            if parameter.grad is not None:
                log[f"grad_norm/{name}"] = parameter.grad.norm().item()
        optimizer.step()
        log["loss"] = loss.item()
        if step % 50 == 0:
            print(f"step {step} loss {log['loss']:.4f}", flush=True)


if __name__ == "__main__":
    main()
