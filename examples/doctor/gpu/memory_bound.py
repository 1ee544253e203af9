"""Memory-bandwidth-bound: a chain of normalisation and elementwise operators (layer norm,
GELU, scale, residual add, dropout) over large activations with only thin matmuls between
them. Every operator reads and writes the whole tensor from HBM: the GPU is busy, but on
memory traffic, not arithmetic. Expected verdict: device-bound on memory bandwidth (advice:
fusion, torch.compile), not bf16 tensor cores.

    accelscope doctor examples/doctor/gpu/memory_bound.py --steps 30
"""

from __future__ import annotations

import torch
from _common import arguments, size
from torch import nn


class Block(nn.Module):
    """Norm, activation and residual around a thin projection: elementwise-heavy."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.scale = nn.Parameter(torch.ones(width))
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.gelu(self.norm(x)) * self.scale
        y = self.drop(torch.tanh(y) + y.sigmoid() * 0.5)
        return x + y


def main() -> None:
    args = arguments(__doc__ or "")
    tokens, width, depth = size(args, 65536, 64), size(args, 1024, 32), size(args, 8, 2)
    model = nn.Sequential(*[Block(width) for _ in range(depth)], nn.Linear(width, 10))
    model = model.to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(tokens, width, device=args.device)
    labels = torch.randint(0, 10, (tokens,), device=args.device)
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
