"""Input-bound: the DataLoader decodes every sample in the main process (``num_workers=0``), a
per-sample Python transform, while a small CNN on the GPU waits for each batch. Expected
verdict: input-bound, the GPU idle behind the DataLoader (advice: DataLoader workers, a cache
of decoded samples); the workers what-if measures the fix.

    accelscope doctor examples/doctor/gpu/input_bound.py --steps 20 --what-if workers
"""

from __future__ import annotations

import numpy as np
import torch
from _common import arguments, size
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic images whose every read costs CPU time, as a decode from disk would."""

    def __init__(self, count: int, side: int) -> None:
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 255, size=(count, side, side, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count)
        self.kernel = np.array([1, 4, 6, 4, 1], dtype=np.float32) / 16

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index].astype(np.float32) / 255.0
        for line in range(image.shape[0]):  # a blur, one image line at a time
            image[line] = np.apply_along_axis(np.convolve, 0, image[line], self.kernel, "same")
        tensor = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))
        return (tensor - 0.5) / 0.25, int(self.labels[index])


def main() -> None:
    args = arguments(__doc__ or "", steps=100)
    side, batch = size(args, 64, 16), size(args, 32, 4)
    loader = DataLoader(SlowImages(1024, side), batch_size=batch, shuffle=True, num_workers=0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, 10),
    ).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    while step < args.steps:
        for images, labels in loader:
            images, labels = images.to(args.device), labels.to(args.device)
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
