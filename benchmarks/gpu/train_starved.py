"""An input-starved GPU training loop, for ``accelscope doctor`` on a GPU (validate.py's step).

Every sample is "decoded" on the CPU in ``__getitem__`` (a separable blur done line by line in
numpy: a slow per-sample transform) and the DataLoader runs in the main process
(``num_workers=0``, no pinned memory), while the model is a small CNN on the GPU. So the GPU
waits for its data most of the time. Expected verdict: input-bound, the device idle behind the
DataLoader, and more DataLoader workers measured several times faster.

    python benchmarks/gpu/train_starved.py [--device auto|cpu|cuda] [--steps 400]
    accelscope doctor benchmarks/gpu/train_starved.py --device cuda --steps 20 --warmup 5
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic images whose every read costs CPU time (decode + blur), as from disk."""

    def __init__(self, count: int, side: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.side = side
        self.images = rng.integers(0, 255, size=(count, side, side, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)
        self.kernel = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index].astype(np.float32) / 255.0
        for channel in range(3):  # the per-sample transform: one line at a time, in Python
            plane = image[:, :, channel]
            for line in range(self.side):
                plane[line] = np.convolve(plane[line], self.kernel, mode="same")
                plane[:, line] = np.convolve(plane[:, line], self.kernel, mode="same")
        tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
        return (tensor - 0.5) / 0.25, int(self.labels[index])


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--samples", type=int, default=2048)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = pick_device(args.device)
    loader = DataLoader(
        SlowImages(args.samples, args.side), batch_size=args.batch, shuffle=True, num_workers=0
    )
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64 * 16, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    while step < args.steps:
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"step {step} loss {loss.item():.3f}", flush=True)
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
