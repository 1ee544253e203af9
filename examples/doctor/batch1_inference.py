"""Batch-1 inference of a small model: each request is run on its own, so every step is a
chain of tiny operators and the per-operator framework overhead, not arithmetic, sets the pace.

Run it alone (``python batch1_inference.py``) or under the doctor::

    accelscope doctor examples/doctor/batch1_inference.py --steps 100
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class SmallClassifier(nn.Module):
    """A small MLP classifier with normalisation and a residual block."""

    def __init__(self, features: int = 64, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.block = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(torch.relu(self.embed(x)))
        h = h + self.block(h)
        return self.head(h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SmallClassifier().eval()
    requests = torch.randn(args.requests, 1, 64)
    answers = []
    with torch.inference_mode():
        for request in requests:  # one request at a time: batch size 1
            answers.append(int(model(request).argmax(dim=1)[0]))
    print(f"answered {len(answers)} requests; class counts {torch.bincount(torch.tensor(answers))}")


if __name__ == "__main__":
    main()
