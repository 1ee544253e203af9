"""A healthy GPU training loop, for ``accelscope doctor`` on a GPU (benchmarks/gpu/validate.py).

The input pipeline keeps up (DataLoader workers on cores of their own, pinned memory,
non-blocking copies, samples that cost nothing to read) and the step logs with one
``loss.item()``, as most loops do, so the host waits there for each queued step. The model is
a wide MLP in fp32: its matrix products run as IEEE fp32 (torch's default for matmuls) and take
nearly all of the GPU's time. Expected verdict: compute-bound on the device (the GPU sets the
pace), not sync-bound, with bf16 autocast measured several times faster.

    python benchmarks/gpu/train_healthy.py [--device auto|cpu|cuda] [--width 4096]
    accelscope doctor benchmarks/gpu/train_healthy.py --device cuda --what-if bf16
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Features(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Precomputed synthetic features: a read is an index into a tensor."""

    def __init__(self, count: int, dim: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(count, dim, generator=generator)
        self.labels = torch.randint(0, 10, (count,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.labels[index]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="0: the cores the workers leave")
    parser.add_argument("--samples", type=int, default=16384)
    args = parser.parse_args()
    torch.manual_seed(0)
    # the workers get their own cores: intra-op threads + workers stay within the machine
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) - args.workers))
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    loader = DataLoader(
        Features(args.samples, args.dim),
        batch_size=args.batch,
        shuffle=True,
        drop_last=True,
        num_workers=args.workers,
        pin_memory=cuda,
        persistent_workers=args.workers > 0,
        prefetch_factor=4 if args.workers > 0 else None,
    )
    layers: list[nn.Module] = [nn.Linear(args.dim, args.width), nn.ReLU()]
    for _ in range(args.depth - 2):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    layers.append(nn.Linear(args.width, 10))
    model = nn.Sequential(*layers).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = 0
    while step < args.steps:
        for inputs, labels in loader:
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running = loss.item()  # one readback per step: the usual logging
            if step % 20 == 0:
                print(f"step {step} loss {running:.4f}", flush=True)
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
