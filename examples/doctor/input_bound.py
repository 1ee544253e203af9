"""An input-bound training loop: every sample is decoded and pre-processed on the CPU in
``__getitem__`` and the DataLoader runs in the main process (``num_workers=0``), so the small
model waits for its data most of the time. The random augmentation (a horizontal flip) is done
on the batch in the loop, as pipelines that augment on the device do, so the decoded samples
are deterministic and may be cached.

Run it alone (``python input_bound.py``) or under the doctor::

    accelscope doctor examples/doctor/input_bound.py --steps 20 --warmup 3
"""

from __future__ import annotations

import argparse
import zlib

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIDE = 48


class CompressedImages(Dataset[tuple[torch.Tensor, int]]):
    """Images stored compressed, as on disk: decoding each one costs CPU time."""

    def __init__(self, count: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.blobs = []
        for _ in range(count):
            base = rng.integers(0, 255, size=(SIDE // 4, SIDE // 4, 3), dtype=np.uint8)
            image = np.kron(base, np.ones((4, 4, 1), dtype=np.uint8))  # blocky, compressible
            self.blobs.append(zlib.compress(image.tobytes(), level=6))
        self.labels = rng.integers(0, 10, size=count)

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raw = np.frombuffer(zlib.decompress(self.blobs[index]), dtype=np.uint8)
        image = raw.reshape(SIDE, SIDE, 3).astype(np.float32) / 255.0
        # the "decode" work of a real pipeline: a separable denoising blur, line by line
        kernel = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16
        for channel in range(3):
            plane = image[:, :, channel]
            for line in range(SIDE):
                plane[line] = np.convolve(plane[line], kernel, mode="same")
                plane[:, line] = np.convolve(plane[:, line], kernel, mode="same")
        image = image.reshape(SIDE // 3, 3, SIDE // 3, 3, 3).mean(axis=(1, 3))  # resize to 16x16
        tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
        return (tensor - 0.5) / 0.25, int(self.labels[index])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--samples", type=int, default=1024)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(CompressedImages(args.samples), batch_size=16, shuffle=True, num_workers=0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        for step, (images, labels) in enumerate(loader):
            flip = torch.rand(images.shape[0], 1, 1, 1) < 0.5  # random horizontal flip
            images = torch.where(flip, images.flip(-1), images)
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
