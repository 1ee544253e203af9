"""A many-small-tensors optimizer: a model of several hundred small parameter tensors trained
with Adam(foreach=False), so ``optimizer.step`` launches a handful of tiny kernels per
parameter, one after another. The forward and backward are short; the optimizer step is most
of the step and the GPU idles between its launches. Expected verdict: launch-bound in the
optimizer (advice: ``foreach=True`` or ``fused=True``, CUDA graphs), never bf16.

    accelscope doctor examples/doctor/gpu/foreach_optimizer.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


def main() -> None:
    args = arguments(__doc__ or "")
    experts, width, batch = size(args, 256, 8), size(args, 32, 8), size(args, 64, 4)
    model = nn.ModuleList(nn.Linear(width, width) for _ in range(experts)).to(args.device)
    head = nn.Linear(width, 10).to(args.device)
    parameters = [*model.parameters(), *head.parameters()]
    for parameter in parameters:  # every parameter has a gradient: Adam steps them all
        parameter.grad = torch.zeros_like(parameter)
    optimizer = torch.optim.Adam(parameters, lr=1e-3, foreach=False)
    inputs = torch.randn(batch, width, device=args.device)
    labels = torch.randint(0, 10, (batch,), device=args.device)
    for _ in range(args.steps):
        hidden = torch.stack([expert(inputs) for expert in model[:8]]).mean(0)  # a few used
        loss = nn.functional.cross_entropy(head(hidden), labels)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
